//! The server's clock, the one every state machine is given as `now_ms`.

use redis_module::raw;

/// The server clock in unix milliseconds.
pub fn now_ms() -> u64 {
    let ms = unsafe { raw::RedisModule_Milliseconds.expect("RedisModule_Milliseconds")() };
    ms.max(0) as u64
}
