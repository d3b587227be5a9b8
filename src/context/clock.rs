//! The server's clock, the one every state machine is given as `now_ms`.

use redis_module::raw;
use std::sync::atomic::{AtomicU64, Ordering};

/// The server clock in unix milliseconds.
pub fn now_ms() -> u64 {
    let ms = unsafe { raw::RedisModule_Milliseconds.expect("RedisModule_Milliseconds")() };
    ms.max(0) as u64
}

/// The millisecond this server last started to take writes of its own: the module's load, or
/// its promotion from replica to master.
static MASTER_SINCE_MS: AtomicU64 = AtomicU64::new(0);

/// Records that this server takes writes of its own from now on (module load, promotion).
pub fn became_master() {
    MASTER_SINCE_MS.store(now_ms(), Ordering::Relaxed);
}

/// The first millisecond clock fences may come from. The master this server replaced (or the
/// process it restarted from) granted its last fences no later than the millisecond this
/// server took over, so fences from the next one on are above all of them, however fast the
/// failover was (a promotion within the lost grant's millisecond repeated its fence).
pub fn fences_from_ms() -> u64 {
    MASTER_SINCE_MS.load(Ordering::Relaxed).saturating_add(1)
}
