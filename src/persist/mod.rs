//! The module data types and their persistence callbacks: RDB save/load, AOF rewrite,
//! MEMORY USAGE, DEBUG DIGEST, COPY, and the lock's unlink hook.

pub mod encoding;

use crate::commands::lock::{LockEntry, abandon_waiters};
use crate::commands::sale::{SaleEntry, arm_loaded};
use crate::stats;
use encoding::{LOCK_VERSION, SALE_VERSION};
use redis_module::key::RedisKeyWritable;
use redis_module::native_types::RedisType;
use redis_module::{RedisError, raw};
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};

/// Every callback unset; each type fills in the ones it implements.
const NO_METHODS: raw::RedisModuleTypeMethods = raw::RedisModuleTypeMethods {
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

pub static SALE_TYPE: RedisType = RedisType::new(
    "seckill-S",
    SALE_VERSION as i32,
    raw::RedisModuleTypeMethods {
        rdb_load: Some(sale_rdb_load),
        rdb_save: Some(sale_rdb_save),
        aof_rewrite: Some(sale_aof_rewrite),
        mem_usage: Some(sale_mem_usage),
        digest: Some(sale_digest),
        free: Some(sale_free),
        copy: Some(sale_copy),
        ..NO_METHODS
    },
);

pub static LOCK_TYPE: RedisType = RedisType::new(
    "seckill-L",
    LOCK_VERSION as i32,
    raw::RedisModuleTypeMethods {
        rdb_load: Some(lock_rdb_load),
        rdb_save: Some(lock_rdb_save),
        aof_rewrite: Some(lock_aof_rewrite),
        mem_usage: Some(lock_mem_usage),
        digest: Some(lock_digest),
        free: Some(lock_free),
        copy: Some(lock_copy),
        unlink: Some(lock_unlink),
        ..NO_METHODS
    },
);

/// Stores a sale at an open key (replacing what is there) and counts it.
pub fn set_sale(key: &RedisKeyWritable, entry: SaleEntry) -> Result<(), RedisError> {
    key.set_value(&SALE_TYPE, entry)?;
    stats::SALES.up();
    Ok(())
}

/// Stores a lock at an open key (replacing what is there) and counts it.
pub fn set_lock(key: &RedisKeyWritable, entry: LockEntry) -> Result<(), RedisError> {
    key.set_value(&LOCK_TYPE, entry)?;
    stats::LOCKS.up();
    Ok(())
}

fn boxed<T>(value: T, gauge: &stats::Gauge) -> *mut c_void {
    gauge.up();
    Box::into_raw(Box::new(value)).cast()
}

fn log_warning(message: &str) {
    redis_module::logging::log_warning(message);
}

/// Reads the one string that holds a value's encoding and decodes it; null tells Redis the
/// payload is bad (RESTORE then answers with an error instead of crashing).
unsafe fn load_with<T>(
    rdb: *mut raw::RedisModuleIO,
    version: c_int,
    what: &str,
    decode: fn(&[u8], u32) -> Result<T, encoding::DecodeError>,
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
/// (which loading puts together, see `crate::chunks`).
unsafe fn emit_restore(
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

unsafe fn digest_bytes(md: *mut raw::RedisModuleDigest, bytes: &[u8]) {
    unsafe {
        raw::RedisModule_DigestAddStringBuffer.expect("DigestAddStringBuffer")(
            md,
            bytes.as_ptr().cast_mut().cast(),
            bytes.len(),
        );
        raw::RedisModule_DigestEndSequence.expect("DigestEndSequence")(md);
    }
}

unsafe fn value<'a, T>(ptr: *const c_void) -> &'a T {
    unsafe { &*ptr.cast::<T>() }
}

fn decode_sale_entry(bytes: &[u8], version: u32) -> Result<SaleEntry, encoding::DecodeError> {
    encoding::decode_sale(bytes, version).map(SaleEntry::new)
}

unsafe extern "C" fn sale_rdb_load(rdb: *mut raw::RedisModuleIO, version: c_int) -> *mut c_void {
    let ptr = unsafe { load_with(rdb, version, "sale", decode_sale_entry, &stats::SALES) };
    if !ptr.is_null() {
        // No command runs for a loaded value (RDB, DEBUG RELOAD, RESTORE, full sync), so its
        // holds need their expiry timer armed here.
        let entry = unsafe { &mut *ptr.cast::<SaleEntry>() };
        if entry.sale.next_expiry().is_some()
            && let Some(ctx) = crate::commands::detached_context()
        {
            let name = unsafe { raw::RedisModule_GetKeyNameFromIO.expect("GetKeyNameFromIO")(rdb) };
            let db = unsafe { raw::RedisModule_GetDbIdFromIO.expect("GetDbIdFromIO")(rdb) };
            if !name.is_null() && db >= 0 {
                let key = unsafe { crate::commands::string_bytes(name.cast_mut()) };
                arm_loaded(&ctx, db, key, entry);
            }
        }
    }
    ptr
}

unsafe extern "C" fn sale_rdb_save(rdb: *mut raw::RedisModuleIO, ptr: *mut c_void) {
    raw::save_slice(
        rdb,
        &encoding::encode_sale(&unsafe { value::<SaleEntry>(ptr) }.sale),
    );
}

unsafe extern "C" fn sale_aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    ptr: *mut c_void,
) {
    let payload = encoding::encode_sale(&unsafe { value::<SaleEntry>(ptr) }.sale);
    unsafe { emit_restore(aof, c"SECKILL._RESTORE", key, SALE_VERSION, &payload) };
}

unsafe extern "C" fn sale_free(ptr: *mut c_void) {
    drop(unsafe { Box::from_raw(ptr.cast::<SaleEntry>()) });
    stats::SALES.down();
}

unsafe extern "C" fn sale_mem_usage(ptr: *const c_void) -> usize {
    unsafe { value::<SaleEntry>(ptr) }.memory_bytes()
}

unsafe extern "C" fn sale_digest(md: *mut raw::RedisModuleDigest, ptr: *mut c_void) {
    unsafe { digest_bytes(md, &encoding::encode_sale(&value::<SaleEntry>(ptr).sale)) };
}

unsafe extern "C" fn sale_copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    ptr: *const c_void,
) -> *mut c_void {
    boxed(
        unsafe { value::<SaleEntry>(ptr) }.copy_state(),
        &stats::SALES,
    )
}

fn decode_lock_entry(bytes: &[u8], version: u32) -> Result<LockEntry, encoding::DecodeError> {
    encoding::decode_lock(bytes, version).map(LockEntry::new)
}

unsafe extern "C" fn lock_rdb_load(rdb: *mut raw::RedisModuleIO, version: c_int) -> *mut c_void {
    unsafe { load_with(rdb, version, "lock", decode_lock_entry, &stats::LOCKS) }
}

unsafe extern "C" fn lock_rdb_save(rdb: *mut raw::RedisModuleIO, ptr: *mut c_void) {
    raw::save_slice(
        rdb,
        &encoding::encode_lock(&unsafe { value::<LockEntry>(ptr) }.lock),
    );
}

unsafe extern "C" fn lock_aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    ptr: *mut c_void,
) {
    let payload = encoding::encode_lock(&unsafe { value::<LockEntry>(ptr) }.lock);
    unsafe { emit_restore(aof, c"LOCK._RESTORE", key, LOCK_VERSION, &payload) };
}

unsafe extern "C" fn lock_free(ptr: *mut c_void) {
    drop(unsafe { Box::from_raw(ptr.cast::<LockEntry>()) });
    stats::LOCKS.down();
}

unsafe extern "C" fn lock_mem_usage(ptr: *const c_void) -> usize {
    unsafe { value::<LockEntry>(ptr) }.memory_bytes()
}

unsafe extern "C" fn lock_digest(md: *mut raw::RedisModuleDigest, ptr: *mut c_void) {
    unsafe { digest_bytes(md, &encoding::encode_lock(&value::<LockEntry>(ptr).lock)) };
}

unsafe extern "C" fn lock_copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    ptr: *const c_void,
) -> *mut c_void {
    boxed(
        unsafe { value::<LockEntry>(ptr) }.copy_state(),
        &stats::LOCKS,
    )
}

/// Called on the main thread when a lock key leaves the keyspace (DEL, RENAME, eviction):
/// its waiters get nil instead of blocking on a key that no longer exists.
unsafe extern "C" fn lock_unlink(_key: *mut raw::RedisModuleString, ptr: *const c_void) {
    let entry = unsafe { &mut *ptr.cast::<LockEntry>().cast_mut() };
    abandon_waiters(entry);
}
