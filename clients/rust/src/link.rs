//! Where the sale logic meets a connection. Each operation is written once, as async code over
//! a [`Link`]; the sync API drives it with [`Blocking`], whose calls are done before their
//! future is first polled (so `block_on` never waits on anything but the server), and the async
//! API with [`Tokio`], over a `redis::aio` connection. Sleeps go through the link too: a thread
//! sleeps in the sync API, a task in the async one, so no async path ever blocks its runtime.

use crate::error::Result;
use crate::retry::{Retrier, RetryPolicy, is_retryable};
use redis::{Cmd, ConnectionLike, FromRedisValue, RedisResult};
use std::future::{Future, ready};
use std::time::Duration;

pub(crate) trait Link {
    fn query<T: FromRedisValue + Send>(
        &mut self,
        cmd: &Cmd,
    ) -> impl Future<Output = RedisResult<T>> + Send;

    fn sleep(&mut self, wait: Duration) -> impl Future<Output = ()> + Send;

    /// Whether [`Link::query_within`] bounds a call by its budget (the async links), or only
    /// by the connection's own read timeout (a sync connection).
    fn bounds_calls(&self) -> bool {
        false
    }

    /// `cmd`, failing with a timeout after `budget` where the link can bound one call: the
    /// async links can; a sync connection is bounded by its own read timeout only.
    fn query_within<T: FromRedisValue + Send>(
        &mut self,
        cmd: &Cmd,
        budget: Duration,
    ) -> impl Future<Output = RedisResult<T>> + Send {
        let _ = budget;
        self.query(cmd)
    }
}

/// A sync connection: each call is made when it is asked for.
pub(crate) struct Blocking<'a, C>(pub &'a mut C);

impl<C: ConnectionLike> Link for Blocking<'_, C> {
    fn query<T: FromRedisValue + Send>(
        &mut self,
        cmd: &Cmd,
    ) -> impl Future<Output = RedisResult<T>> + Send {
        ready(cmd.query(self.0))
    }

    fn sleep(&mut self, wait: Duration) -> impl Future<Output = ()> + Send {
        std::thread::sleep(wait);
        ready(())
    }
}

/// The least time one call is given, however little its deadline leaves: a policy without
/// retries (deadline zero) still gets its one answer.
pub(crate) const MIN_CALL_BOUND: Duration = Duration::from_secs(1);

/// An async connection on tokio: the crate's `aio::ClusterSession`, `MultiplexedConnection`,
/// `ConnectionManager`, the async `ClusterConnection`. Every call is bounded by a tokio timeout
/// (`bound`, the caller's deadline, at least MIN_CALL_BOUND), whatever the connection does
/// underneath: a `cluster_async` connection that stays stuck through a topology change fails
/// the call at its deadline instead of hanging it.
pub(crate) struct Tokio<'a, C> {
    con: &'a mut C,
    bound: Duration,
}

impl<'a, C> Tokio<'a, C> {
    /// Calls bounded by the default policy's deadline (an operation without a sale handle:
    /// open, create, delete).
    pub fn new(con: &'a mut C) -> Tokio<'a, C> {
        Tokio::within(con, RetryPolicy::default().deadline)
    }

    /// Calls bounded by `deadline` (a sale handle's policy).
    pub fn within(con: &'a mut C, deadline: Duration) -> Tokio<'a, C> {
        Tokio {
            con,
            bound: deadline.max(MIN_CALL_BOUND),
        }
    }
}

impl<C: redis::aio::ConnectionLike + Send> Link for Tokio<'_, C> {
    fn query<T: FromRedisValue + Send>(
        &mut self,
        cmd: &Cmd,
    ) -> impl Future<Output = RedisResult<T>> + Send {
        within(self.bound, cmd.query_async(self.con))
    }

    fn sleep(&mut self, wait: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(wait)
    }

    fn bounds_calls(&self) -> bool {
        true
    }

    fn query_within<T: FromRedisValue + Send>(
        &mut self,
        cmd: &Cmd,
        budget: Duration,
    ) -> impl Future<Output = RedisResult<T>> + Send {
        within(budget, cmd.query_async(self.con))
    }
}

/// `call`, failing with a timeout (an I/O error: retryable, may have run) after `budget`.
pub(crate) async fn within<T>(
    budget: Duration,
    call: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(budget, call).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {budget:?}"),
        )
        .into()),
    }
}

/// `cmd` under `retrier`: a retryable failure is sent again after a backoff while the
/// retrier's deadline allows, then becomes `Error::OutcomeUnknown`.
pub(crate) async fn query_retried<L: Link, T: FromRedisValue + Send>(
    link: &mut L,
    retrier: &mut Retrier<'_>,
    cmd: &Cmd,
) -> Result<T> {
    loop {
        match link.query_within(cmd, retrier.send_budget()).await {
            Ok(value) => return Ok(value),
            Err(e) if is_retryable(&e) => {
                let wait = retrier.backoff(e)?;
                link.sleep(wait).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs an operation of the sync API to its end on this thread.
pub(crate) fn block_on<T>(operation: impl Future<Output = T>) -> T {
    pollster::block_on(operation)
}
