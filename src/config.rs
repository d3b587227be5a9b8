//! Module configs: `CONFIG GET/SET seckill.<name>`, and `--loadmodule libseckill.so <name>
//! <value>` at start-up.

use crate::core::lock::FenceMode;
use redis_module::enum_configuration;
use std::sync::Mutex;

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
