//! Locks on the module's `LOCK.*` commands: fenced, renewed by a watchdog while held, and the
//! holder told the moment it lost the lock. [`Lock`] here is sync (the watchdog is a thread);
//! [`crate::aio::Lock`] is the same on tokio (the watchdog is a task).
//!
//! ```no_run
//! use seckill_client::{Lock, Error};
//!
//! fn refill(stock: &mut impl FnMut(u64) -> Result<(), Error>) -> Result<(), Error> {
//!     let lock = Lock::new(redis::Client::open("redis://127.0.0.1/")?, "lock:stock", 30_000)?;
//!     let guard = lock.hold(5_000)?;        // Error::LockTimeout when not granted in 5 s
//!     // ... a slow call: the watchdog keeps the lease meanwhile ...
//!     guard.check()?;                       // Error::LockLost if the lease is gone
//!     stock(guard.fence())?;                // the write refuses fences older than its last
//!     guard.release();                      // (dropping the guard releases too)
//!     Ok(())
//! }
//! ```
//!
//! Waiting is the server's (`LOCK.ACQUIRE ... WAIT`, FIFO, handed over at release or expiry).
//! Give the lock a client for a server, or for any node of a cluster: its own connections
//! follow MOVED to the master of the key.

mod lease;
mod node;
mod ops;
pub(crate) mod tokio;

pub use lease::{DEFAULT_REPLICA_TIMEOUT_MS, DEFAULT_TTL_MS, LockOptions};

use crate::error::Result;
use crate::key::new_attempt_id;
use crate::link::block_on;
use crate::observe;
use lease::LockSettings;
use node::{BlockingNode, Target};
use ops::{GuardState, ReplicaCount};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a lock and its guards share: the settings, where to connect, the replicas to ask
/// for, and idle connections of the lock's own (`L`: sync or tokio).
pub(crate) struct Core<L> {
    pub settings: LockSettings,
    pub target: Target,
    pub replicas: ReplicaCount,
    idle: Mutex<Vec<L>>,
}

impl<L> Core<L> {
    pub fn new(client: redis::Client, name: &str, options: &LockOptions) -> Result<Core<L>> {
        let settings = LockSettings::build(name, options)?;
        Ok(Core {
            replicas: ReplicaCount::new(settings.replicas),
            settings,
            target: Target::new(client),
            idle: Mutex::new(Vec::new()),
        })
    }

    pub fn take(&self, make: impl FnOnce(Target) -> L) -> L {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        idle.unwrap_or_else(|| make(self.target.clone()))
    }

    pub fn give_back(&self, link: L) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(link);
    }
}

impl<L: ops::NodeLink> Core<L> {
    /// The lock granted to `token` within `wait_ms` on `link`: its fence and when the grant
    /// was sent; counted as `lock_hold` in the client metrics.
    pub async fn grant(&self, link: &mut L, token: &str, wait_ms: u64) -> Result<(u64, Instant)> {
        let wait = Duration::from_millis(wait_ms);
        let hold = ops::hold(link, &self.settings, &self.replicas, token, wait);
        observe::observed("lock_hold", hold).await
    }

    /// `token`'s release on `link`: whether it still held the lock; counted as `lock_release`.
    pub async fn release(&self, link: &mut L, token: &str) -> bool {
        observe::observed_release(ops::release(link, &self.settings, token)).await
    }
}

/// A lock named `name` (see [`LockOptions`]); every argument is checked before anything is
/// sent ([`crate::Error::InvalidArgument`]). Clone it or share it between threads: each
/// [`Lock::hold`] is a guard of its own, with its own token.
#[derive(Clone)]
pub struct Lock {
    core: Arc<Core<BlockingNode>>,
}

impl Lock {
    lock_constructors!();

    /// The lock, granted within `wait_ms` (0: try once), as a guard that releases it when
    /// dropped; [`crate::Error::LockTimeout`] when not granted in time.
    pub fn hold(&self, wait_ms: u64) -> Result<LockGuard> {
        let core = &self.core;
        let token = new_attempt_id();
        let mut link = core.take(BlockingNode::new);
        let granted = block_on(core.grant(&mut link, &token, wait_ms));
        core.give_back(link);
        let (fence, sent) = granted?;
        let state = Arc::new(GuardState::new(core.settings.clone(), token, fence, sent));
        let (stop, stopped) = std::sync::mpsc::channel();
        let mut watchdog_link = core.take(BlockingNode::new);
        watchdog_link.stop = Some(stopped);
        let (watched, watching) = (Arc::clone(&state), Arc::clone(core));
        let watchdog = std::thread::Builder::new()
            .name(format!("seckill-lock:{}", core.settings.name))
            .spawn(move || {
                block_on(ops::watch(&mut watchdog_link, &watched, &watching.replicas));
                watchdog_link.stop = None;
                watching.give_back(watchdog_link);
            })
            .map_err(redis::RedisError::from)?;
        Ok(LockGuard {
            state,
            core: Arc::clone(core),
            watchdog: Some((stop, watchdog)),
        })
    }
}

/// A granted lock: [`LockGuard::fence`] (send it with every write the lock protects),
/// [`LockGuard::check`] before each side effect. A watchdog thread renews the lease until
/// the guard is released or dropped.
pub struct LockGuard {
    state: Arc<GuardState>,
    core: Arc<Core<BlockingNode>>,
    watchdog: Option<(Sender<()>, JoinHandle<()>)>,
}

/// The constructors of a sync and an async lock (each a `core` of its own kind of link).
macro_rules! lock_constructors {
    () => {
        /// A lock with a `ttl_ms` lease and the other options' defaults.
        pub fn new(client: redis::Client, name: &str, ttl_ms: u64) -> $crate::error::Result<Lock> {
            let options = $crate::lock::LockOptions {
                ttl_ms,
                ..$crate::lock::LockOptions::default()
            };
            Lock::with_options(client, name, options)
        }

        pub fn with_options(
            client: redis::Client,
            name: &str,
            options: $crate::lock::LockOptions,
        ) -> $crate::error::Result<Lock> {
            Ok(Lock {
                core: std::sync::Arc::new($crate::lock::Core::new(client, name, &options)?),
            })
        }

        pub fn name(&self) -> &str {
            &self.core.settings.name
        }
    };
}
pub(crate) use lock_constructors;

/// What a sync and an async guard both answer from their shared `state`.
macro_rules! guard_accessors {
    () => {
        /// The fencing token: greater than every earlier grant's of this lock, across
        /// failovers.
        pub fn fence(&self) -> u64 {
            self.state.fence
        }

        pub fn token(&self) -> &str {
            &self.state.token
        }

        /// Whether the lease is known lost (set once, never cleared). It reads the clock
        /// itself: a process frozen past its deadline knows at once on waking.
        pub fn is_lost(&self) -> bool {
            self.state.is_lost()
        }

        /// [`crate::Error::LockLost`] unless the lease is still known held.
        pub fn check(&self) -> $crate::error::Result<()> {
            if self.is_lost() {
                return Err(self.state.lost_error());
            }
            Ok(())
        }
    };
}
pub(crate) use guard_accessors;

impl LockGuard {
    guard_accessors!();

    /// Stops the watchdog and releases the lock (it goes to the next waiter at once); whether
    /// this guard still held it. Never fails: a server that is gone lets the lease run out.
    pub fn release(mut self) -> bool {
        self.release_now()
    }

    fn release_now(&mut self) -> bool {
        let Some((stop, watchdog)) = self.watchdog.take() else {
            return false;
        };
        drop(stop); // the watchdog's pause answers "stopped"
        let _ = watchdog.join();
        let mut link = self.core.take(BlockingNode::new);
        let released = block_on(self.core.release(&mut link, &self.state.token));
        self.core.give_back(link);
        released
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.release_now();
    }
}
