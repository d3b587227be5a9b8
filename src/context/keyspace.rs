//! Keys: their values of a module type, what tells Redis a key changed (WATCH, client-side
//! caching, keyspace notifications), the selected database, and where a key lives for a
//! callback that runs later (a timer, a blocked client), across SWAPDB.

use redis_module::native_types::RedisType;
use redis_module::{Context, RedisError, RedisString, raw};
use std::ffi::CStr;

/// `Some(value)` if the key holds a value of `ty`, `None` if it is empty, WRONGTYPE otherwise.
pub fn writable_value<'k, T>(
    key: &'k redis_module::key::RedisKeyWritable,
    ty: &RedisType,
) -> Result<Option<&'k mut T>, RedisError> {
    key.get_value::<T>(ty).map_err(|_| RedisError::WrongType)
}

/// Read-only twin of [`writable_value`].
pub fn readable_value<'k, T>(
    key: &'k redis_module::key::RedisKey,
    ty: &RedisType,
) -> Result<Option<&'k T>, RedisError> {
    key.get_value::<T>(ty).map_err(|_| RedisError::WrongType)
}

/// Tells Redis that a key changed as a user sees it: WATCH aborts, client-side caches are
/// invalidated. The module asks Redis not to do it for every key it opened to write
/// (`NO_IMPLICIT_SIGNAL_MODIFIED`), because most calls open their key to write and then
/// change nothing: a sold-out TRY, a contended LOCK.ACQUIRE, a replica's hold recheck.
///
/// # Safety
/// `key` must be a valid module string.
pub unsafe fn signal_modified(ctx: &Context, key: *mut raw::RedisModuleString) {
    unsafe { raw::RedisModule_SignalModifiedKey.expect("SignalModifiedKey")(ctx.ctx, key) };
}

/// A keyspace notification with a static event name.
///
/// # Safety
/// `key` must be a valid module string.
pub unsafe fn notify(
    ctx: &Context,
    class: raw::NotifyEvent,
    event: &CStr,
    key: *mut raw::RedisModuleString,
) {
    unsafe {
        raw::RedisModule_NotifyKeyspaceEvent.expect("NotifyKeyspaceEvent")(
            ctx.ctx,
            class.bits(),
            event.as_ptr(),
            key,
        )
    };
}

/// Where a key lives, to find it again from a timer or a blocked client's callback. The
/// database is held by a name that follows its data through SWAPDB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLocation {
    data_id: i32,
    pub key: Vec<u8>,
}

impl KeyLocation {
    pub fn new(db: i32, key: &[u8]) -> KeyLocation {
        KeyLocation {
            data_id: databases::data_id_in(db),
            key: key.to_vec(),
        }
    }

    pub fn of(ctx: &Context, key_name: &RedisString) -> KeyLocation {
        KeyLocation::new(selected_db(ctx), key_name.as_slice())
    }

    /// The database that holds the key's data now.
    pub fn db(&self) -> i32 {
        databases::db_holding(self.data_id)
    }
}

/// Which database holds which data: SWAPDB exchanges two databases' contents, and whatever
/// waits on a key there (a timer, a blocked client) must look for it in the other one.
pub mod databases {
    use std::sync::Mutex;

    /// `DB_OF[data]` is the database holding the data first seen in database `data`; past the
    /// end, each database still holds its own.
    static DB_OF: Mutex<Vec<i32>> = Mutex::new(Vec::new());

    fn with<R>(f: impl FnOnce(&mut Vec<i32>) -> R) -> R {
        f(&mut DB_OF
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// The name of the data database `db` holds now.
    pub fn data_id_in(db: i32) -> i32 {
        with(|map| map.iter().position(|&d| d == db).map_or(db, |i| i as i32))
    }

    pub fn db_holding(data: i32) -> i32 {
        with(|map| map.get(data as usize).copied().unwrap_or(data))
    }

    /// SWAPDB `a` `b` happened.
    pub fn swapped(a: i32, b: i32) {
        let (data_a, data_b) = (data_id_in(a), data_id_in(b));
        with(|map| {
            let needed = (data_a.max(data_b) + 1) as usize;
            if map.len() < needed {
                let start = map.len() as i32;
                map.extend(start..needed as i32);
            }
            map.swap(data_a as usize, data_b as usize);
        });
    }

    #[cfg(test)]
    pub fn reset() {
        with(Vec::clear);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn data_follows_swaps() {
            reset();
            assert_eq!((data_id_in(3), db_holding(3)), (3, 3));
            swapped(0, 5);
            assert_eq!((db_holding(0), db_holding(5)), (5, 0));
            assert_eq!((data_id_in(5), data_id_in(0)), (0, 5));
            swapped(5, 2);
            // The data first in 0 went to 5, then to 2; 2's went to 5.
            assert_eq!((db_holding(0), db_holding(2), db_holding(5)), (2, 5, 0));
            assert_eq!(db_holding(9), 9);
            swapped(2, 2);
            assert_eq!(db_holding(0), 2);
            reset();
        }
    }
}

pub fn selected_db(ctx: &Context) -> i32 {
    unsafe { raw::RedisModule_GetSelectedDb.expect("GetSelectedDb")(ctx.ctx) }
}

/// Runs `f` with `db` selected, restoring the context's database afterwards.
pub fn in_db<R>(ctx: &Context, db: i32, f: impl FnOnce() -> R) -> R {
    let select = |id: i32| unsafe { raw::RedisModule_SelectDb.expect("SelectDb")(ctx.ctx, id) };
    let previous = selected_db(ctx);
    if previous != db {
        select(db);
    }
    let out = f();
    if previous != db {
        select(previous);
    }
    out
}
