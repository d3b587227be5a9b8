//! What a command replicates: `RM_Replicate` over strings the caller holds, and a value's
//! internal restore command.

use super::strings::TempStrings;
use redis_module::{Context, RedisString, raw};
use std::ffi::CStr;

/// `RM_Replicate(command, argv...)` for module strings the caller holds (Redis takes its own
/// references): no argument copied, no C string built per call.
pub fn replicate_strings(ctx: &Context, command: &CStr, argv: &[*mut raw::RedisModuleString]) {
    unsafe {
        raw::RedisModule_Replicate.expect("Replicate")(
            ctx.ctx,
            command.as_ptr(),
            c"v".as_ptr(),
            argv.as_ptr(),
            argv.len(),
        )
    };
}

/// Replicates a value as its internal restore command (`SECKILL._RESTORE` / `LOCK._RESTORE`
/// `key version payload`), the effect rather than the command.
pub fn replicate_restore(
    ctx: &Context,
    command: &CStr,
    key_name: &RedisString,
    version: u32,
    payload: &[u8],
) {
    let mut argv = TempStrings::new(ctx);
    // SAFETY: the key is a live string of the caller's for the whole call.
    unsafe { argv.retain(key_name.inner) };
    argv.integer(u64::from(version));
    argv.bytes(payload);
    replicate_strings(ctx, command, argv.all());
}
