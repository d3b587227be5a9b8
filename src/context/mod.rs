//! The C-API wrappers, grouped by area as redismodule-rs's `src/context/` does: each unsafe
//! call of the module API the crate's safe API lacks is wrapped once, here, in a small safe
//! function. Nothing here knows a command.

pub mod blocked;
pub mod clock;
pub mod command_info;
pub mod keyspace;
pub mod replication;
pub mod reply;
pub mod stream;
pub mod strings;
pub mod timer;

use redis_module::{Context, raw};
use std::sync::atomic::{AtomicPtr, Ordering};

static DETACHED: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Keeps a context that outlives any command, for work that starts where Redis gives none
/// (arming a timer while a value loads).
pub fn keep_detached_context(ctx: &Context) {
    let detached = unsafe {
        raw::RedisModule_GetDetachedThreadSafeContext.expect("GetDetachedThreadSafeContext")(
            ctx.ctx,
        )
    };
    DETACHED.store(detached, Ordering::Relaxed);
}

/// The context kept by [`keep_detached_context`]; main thread only.
pub fn detached_context() -> Option<Context> {
    let ctx = DETACHED.load(Ordering::Relaxed);
    (!ctx.is_null()).then(|| Context::new(ctx))
}
