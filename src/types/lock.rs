//! A lock key's value: the core `Lock` and its handoff timer, with its Redis type `seckill-L`,
//! the type's callbacks, and the registry of clients blocked waiting on a lock.

use super::{NO_METHODS, boxed, digest_bytes, emit_restore, load_with, value};
use crate::context::blocked::{self, WaiterId};
use crate::context::keyspace::{KeyLocation, in_db, readable_value};
use crate::context::timer::KeyTimer;
use crate::logic::lock::{Lock, Waiter};
use crate::persist::encoding::{self, LOCK_VERSION};
use crate::stats;
use redis_module::key::RedisKeyWritable;
use redis_module::native_types::RedisType;
use redis_module::{Context, RedisError, raw};
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;

/// What a lock key holds: the core state plus its handoff timer.
pub struct LockValue {
    pub lock: Lock,
    pub timer: KeyTimer,
}

impl LockValue {
    pub fn new(lock: Lock) -> LockValue {
        LockValue {
            lock,
            timer: KeyTimer::default(),
        }
    }

    /// The persistent part only (COPY): waiters stay with the key they wait on.
    pub fn copy_state(&self) -> LockValue {
        let lock = Lock::from_parts(self.lock.last_fence(), self.lock.stored_holder().cloned())
            .expect("a live lock is always restorable");
        LockValue::new(lock)
    }

    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<LockValue>()
            + self.lock.stored_holder().map_or(0, |h| h.token.capacity())
            + self.lock.waiter_count() * (std::mem::size_of::<Waiter>() + 32)
    }
}

/// Where each blocked waiter's lock lives, to find it again when the waiter leaves.
static WAITERS: Mutex<Option<HashMap<WaiterId, KeyLocation>>> = Mutex::new(None);

fn with_waiters<R>(f: impl FnOnce(&mut HashMap<WaiterId, KeyLocation>) -> R) -> R {
    let mut guard = WAITERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// Records that waiter `id` is blocked on the lock at `location`.
pub fn register_waiter(id: WaiterId, location: KeyLocation) {
    with_waiters(|waiters| waiters.insert(id, location));
}

/// Forgets waiter `id` (granted, timed out, gone); where its lock was, if it was registered.
pub fn forget_waiter(id: WaiterId) -> Option<KeyLocation> {
    with_waiters(|waiters| waiters.remove(&id))
}

/// Answers every waiter of a lock that is leaving the keyspace with nil.
pub fn abandon_waiters(value: &mut LockValue) {
    for waiter in value.lock.take_waiters() {
        if forget_waiter(waiter.id).is_some() {
            blocked::wake(waiter.id, None);
        }
    }
}

/// Clients blocked in `LOCK.ACQUIRE ... WAIT` right now.
pub fn waiting_clients() -> usize {
    with_waiters(|waiters| waiters.len())
}

/// After FLUSHDB/FLUSHALL (which drop keys without the unlink hook), answers nil to every
/// waiter whose lock is gone, instead of leaving it blocked on nothing.
pub fn release_orphaned_waiters(ctx: &Context) {
    let waiting: Vec<(WaiterId, i32, Vec<u8>)> = with_waiters(|waiters| {
        waiters
            .iter()
            .map(|(id, at)| (*id, at.db(), at.key.clone()))
            .collect()
    });
    for (id, db, key) in waiting {
        let still_queued = in_db(ctx, db, || {
            let key_name = ctx.create_string(key);
            let key = ctx.open_key(&key_name);
            readable_value::<LockValue>(&key, &LOCK_TYPE)
                .ok()
                .flatten()
                .is_some_and(|value| value.lock.has_waiter(id))
        });
        if !still_queued && forget_waiter(id).is_some() {
            blocked::wake(id, None);
        }
    }
}

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

/// Stores a lock at an open key (replacing what is there) and counts it.
pub fn set_lock(key: &RedisKeyWritable, value: LockValue) -> Result<(), RedisError> {
    key.set_value(&LOCK_TYPE, value)?;
    stats::LOCKS.up();
    Ok(())
}

fn decode_lock_value(bytes: &[u8], version: u32) -> Result<LockValue, encoding::DecodeError> {
    encoding::decode_lock(bytes, version).map(LockValue::new)
}

unsafe extern "C" fn lock_rdb_load(rdb: *mut raw::RedisModuleIO, version: c_int) -> *mut c_void {
    unsafe { load_with(rdb, version, "lock", decode_lock_value, &stats::LOCKS) }
}

unsafe extern "C" fn lock_rdb_save(rdb: *mut raw::RedisModuleIO, ptr: *mut c_void) {
    raw::save_slice(
        rdb,
        &encoding::encode_lock(&unsafe { value::<LockValue>(ptr) }.lock),
    );
}

unsafe extern "C" fn lock_aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    ptr: *mut c_void,
) {
    let payload = encoding::encode_lock(&unsafe { value::<LockValue>(ptr) }.lock);
    unsafe { emit_restore(aof, c"LOCK._RESTORE", key, LOCK_VERSION, &payload) };
}

unsafe extern "C" fn lock_free(ptr: *mut c_void) {
    drop(unsafe { Box::from_raw(ptr.cast::<LockValue>()) });
    stats::LOCKS.down();
}

unsafe extern "C" fn lock_mem_usage(ptr: *const c_void) -> usize {
    unsafe { value::<LockValue>(ptr) }.memory_bytes()
}

unsafe extern "C" fn lock_digest(md: *mut raw::RedisModuleDigest, ptr: *mut c_void) {
    unsafe { digest_bytes(md, &encoding::encode_lock(&value::<LockValue>(ptr).lock)) };
}

unsafe extern "C" fn lock_copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    ptr: *const c_void,
) -> *mut c_void {
    boxed(
        unsafe { value::<LockValue>(ptr) }.copy_state(),
        &stats::LOCKS,
    )
}

/// Called on the main thread when a lock key leaves the keyspace (DEL, RENAME, eviction):
/// its waiters get nil instead of blocking on a key that no longer exists.
unsafe extern "C" fn lock_unlink(_key: *mut raw::RedisModuleString, ptr: *const c_void) {
    let value = unsafe { &mut *ptr.cast::<LockValue>().cast_mut() };
    abandon_waiters(value);
}
