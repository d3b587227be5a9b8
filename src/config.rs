//! Module configs: `CONFIG GET/SET seckill.<name>`, and `--loadmodule libseckill.so <name>
//! <value>` at start-up.

use crate::logic::lock::FenceMode;
use redis_module::enum_configuration;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

enum_configuration! {
    /// `seckill.fences`: how LOCK.ACQUIRE chooses fencing tokens.
    #[allow(non_camel_case_types)]
    #[derive(Debug, PartialEq, Eq)]
    pub enum Fences {
        /// The default: a hybrid logical clock that survives asynchronous failover.
        clock = 0,
        /// Opt-in plain counter: small numbers, unsafe across failover.
        counter = 1,
    }
}

pub static FENCES: Mutex<Fences> = Mutex::new(Fences::clock);

/// The fence mode configured now.
pub fn fence_mode() -> FenceMode {
    match *FENCES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
    {
        Fences::clock => FenceMode::Clock,
        Fences::counter => FenceMode::Counter,
    }
}

/// `seckill.aof-chunk-bytes`: the largest piece of a value's payload AOF rewrite writes in one
/// command (a sale with many buyers becomes several), far below `proto-max-bulk-len`.
pub static AOF_CHUNK_BYTES: AtomicI64 = AtomicI64::new(DEFAULT_AOF_CHUNK_BYTES);
pub const DEFAULT_AOF_CHUNK_BYTES: i64 = 4 << 20;

pub fn aof_chunk_bytes() -> usize {
    AOF_CHUNK_BYTES.load(Ordering::Relaxed).max(1) as usize
}

/// `seckill.max-user-bytes`: the longest user id SECKILL.TRY takes from a client (each
/// buyer's id is kept for the whole sale, in memory and in every RDB and AOF).
pub static MAX_USER_BYTES: AtomicI64 = AtomicI64::new(DEFAULT_MAX_USER_BYTES);
pub const DEFAULT_MAX_USER_BYTES: i64 = 512;

pub fn max_user_bytes() -> u64 {
    MAX_USER_BYTES.load(Ordering::Relaxed).max(1) as u64
}

/// `seckill.events-maxlen`: the MAXLEN a sale's EVENTS stream gets when INIT names none
/// (0: the stream is not trimmed).
pub static EVENTS_MAXLEN: AtomicI64 = AtomicI64::new(0);

pub fn events_maxlen() -> Option<u64> {
    Some(EVENTS_MAXLEN.load(Ordering::Relaxed) as u64).filter(|&n| n > 0)
}
