//! The module's data types: each stored value with its Redis type and callbacks in one file
//! (RDB save and load, AOF rewrite, MEMORY USAGE, DEBUG DIGEST, COPY, unlink), as RedisJSON's
//! `redisjson.rs` and Redis's own `t_*.c` do. This layer uses only the encodings
//! (`crate::persist`), the core and the C-API wrappers; the commands use it.

pub mod lock;
pub mod sale;

use crate::persist::encoding::DecodeError;
use crate::stats;
use redis_module::raw;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};

/// Every callback unset; each type fills in the ones it implements.
pub(super) const NO_METHODS: raw::RedisModuleTypeMethods = raw::RedisModuleTypeMethods {
    version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
    rdb_load: None,
    rdb_save: None,
    aof_rewrite: None,
    mem_usage: None,
    digest: None,
    free: None,
    aux_load: None,
    aux_save: None,
    aux_save2: None,
    aux_save_triggers: 0,
    free_effort: None,
    unlink: None,
    copy: None,
    defrag: None,
    copy2: None,
    free_effort2: None,
    mem_usage2: None,
    unlink2: None,
};

pub(super) fn boxed<T>(value: T, gauge: &stats::Gauge) -> *mut c_void {
    gauge.up();
    Box::into_raw(Box::new(value)).cast()
}

pub(super) fn log_warning(message: &str) {
    redis_module::logging::log_warning(message);
}

/// Reads the one string that holds a value's encoding and decodes it; null tells Redis the
/// payload is bad (RESTORE then answers with an error instead of crashing).
pub(super) unsafe fn load_with<T>(
    rdb: *mut raw::RedisModuleIO,
    version: c_int,
    what: &str,
    decode: fn(&[u8], u32) -> Result<T, DecodeError>,
    gauge: &stats::Gauge,
) -> *mut c_void {
    let Ok(buffer) = raw::load_string_buffer(rdb) else {
        log_warning(&format!("seckill: short read loading a {what}"));
        return std::ptr::null_mut();
    };
    match decode(buffer.as_ref(), version as u32) {
        Ok(value) => boxed(value, gauge),
        Err(e) => {
            log_warning(&format!("seckill: refusing a corrupt {what}: {}", e.0));
            std::ptr::null_mut()
        }
    }
}

/// Writes `command key version payload` to the AOF, or, for a payload above
/// `seckill.aof-chunk-bytes`, `command key version CHUNK index count piece` for each piece
/// (which loading puts together, see `crate::persist::chunks`).
pub(super) unsafe fn emit_restore(
    aof: *mut raw::RedisModuleIO,
    command: &CStr,
    key: *mut raw::RedisModuleString,
    version: u32,
    payload: &[u8],
) {
    let emit = unsafe { raw::RedisModule_EmitAOF }.expect("RedisModule_EmitAOF");
    let chunk = crate::config::aof_chunk_bytes();
    if payload.len() <= chunk {
        unsafe {
            emit(
                aof,
                command.as_ptr(),
                c"slb".as_ptr(),
                key,
                i64::from(version),
                payload.as_ptr(),
                payload.len(),
            )
        };
        return;
    }
    let count = payload.len().div_ceil(chunk) as i64;
    for (index, piece) in payload.chunks(chunk).enumerate() {
        unsafe {
            emit(
                aof,
                command.as_ptr(),
                c"slcllb".as_ptr(),
                key,
                i64::from(version),
                c"CHUNK".as_ptr(),
                index as i64,
                count,
                piece.as_ptr(),
                piece.len(),
            )
        };
    }
}

pub(super) unsafe fn digest_bytes(md: *mut raw::RedisModuleDigest, bytes: &[u8]) {
    unsafe {
        raw::RedisModule_DigestAddStringBuffer.expect("DigestAddStringBuffer")(
            md,
            bytes.as_ptr().cast_mut().cast(),
            bytes.len(),
        );
        raw::RedisModule_DigestEndSequence.expect("DigestEndSequence")(md);
    }
}

pub(super) unsafe fn value<'a, T>(ptr: *const c_void) -> &'a T {
    unsafe { &*ptr.cast::<T>() }
}
