//! [`crate::Lock`] on tokio: the same settings, grant, lease and loss signal (`ops.rs`),
//! driven on the runtime; the watchdog is a task, [`LockGuard::lost`] a future and
//! [`LockGuard::run`] drops (cancels) the work the moment the lease is lost.

use super::Core;
use super::node::TokioNode;
use super::ops::{self, GuardState};
use crate::error::Result;
use crate::key::new_attempt_id;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::task::JoinHandle;

/// `seckill_client::Lock` on tokio. Clone it or share it between tasks.
#[derive(Clone)]
pub struct Lock {
    core: Arc<Core<TokioNode>>,
}

impl Lock {
    super::lock_constructors!();

    /// See [`crate::Lock::hold`]. Must run on a tokio runtime (the watchdog is a task).
    pub async fn hold(&self, wait_ms: u64) -> Result<LockGuard> {
        let core = &self.core;
        let token = new_attempt_id();
        let mut link = core.take(TokioNode::new);
        let granted = core.grant(&mut link, &token, wait_ms).await;
        core.give_back(link);
        let (fence, sent) = granted?;
        let state = Arc::new(GuardState::new(core.settings.clone(), token, fence, sent));
        let (watched, watching) = (Arc::clone(&state), Arc::clone(core));
        let watchdog = tokio::spawn(async move {
            let mut link = watching.take(TokioNode::new);
            ops::watch(&mut link, &watched, &watching.replicas).await;
            watching.give_back(link);
        });
        Ok(LockGuard {
            state,
            core: Arc::clone(core),
            watchdog: Some(watchdog),
        })
    }
}

/// `seckill_client::LockGuard` on tokio, with [`LockGuard::lost`] and [`LockGuard::run`].
/// Dropped unreleased, it stops its watchdog and releases from a task of its own.
pub struct LockGuard {
    state: Arc<GuardState>,
    core: Arc<Core<TokioNode>>,
    watchdog: Option<JoinHandle<()>>,
}

impl LockGuard {
    super::guard_accessors!();

    /// Resolves the moment the lease is known lost.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut lost = self.state.lost_tx.subscribe();
        async move {
            let _ = lost.wait_for(|lost| *lost).await;
        }
    }

    /// Awaits `work` and returns its output, unless the lease is lost first: then `work` is
    /// dropped (cancelled) and [`crate::Error::LockLost`] returned. The work does not poll.
    pub async fn run<T>(&self, work: impl Future<Output = T>) -> Result<T> {
        self.check()?;
        let mut work = pin!(work);
        let mut lost = pin!(self.lost());
        poll_fn(|cx| {
            if let Poll::Ready(output) = work.as_mut().poll(cx) {
                return Poll::Ready(Ok(output));
            }
            if lost.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(self.state.lost_error()));
            }
            Poll::Pending
        })
        .await
    }

    /// See [`crate::LockGuard::release`].
    pub async fn release(mut self) -> bool {
        let Some(watchdog) = self.watchdog.take() else {
            return false;
        };
        watchdog.abort();
        let _ = watchdog.await;
        release(&self.core, &self.state).await
    }
}

async fn release(core: &Core<TokioNode>, state: &GuardState) -> bool {
    let mut link = core.take(TokioNode::new);
    let released = core.release(&mut link, &state.token).await;
    core.give_back(link);
    released
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(watchdog) = self.watchdog.take() else {
            return;
        };
        watchdog.abort();
        // No runtime left (it is shutting down): the lease runs out by itself.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (core, state) = (Arc::clone(&self.core), Arc::clone(&self.state));
            runtime.spawn(async move { release(&core, &state).await });
        }
    }
}
