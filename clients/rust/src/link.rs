//! Where the sale logic meets a connection. Each operation is written once, as async code over
//! a [`Link`]; the sync API drives it with [`Blocking`], whose calls are done before their
//! future is first polled (so `block_on` never waits on anything but the server), and the async
//! API with [`Tokio`], over a `redis::aio` connection. Sleeps go through the link too: a thread
//! sleeps in the sync API, a task in the async one, so no async path ever blocks its runtime.

use crate::error::Result;
use crate::retry::{Retrier, is_retryable};
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

/// An async connection on tokio: `MultiplexedConnection`, `ConnectionManager`, the async
/// `ClusterConnection`.
pub(crate) struct Tokio<'a, C>(pub &'a mut C);

impl<C: redis::aio::ConnectionLike + Send> Link for Tokio<'_, C> {
    fn query<T: FromRedisValue + Send>(
        &mut self,
        cmd: &Cmd,
    ) -> impl Future<Output = RedisResult<T>> + Send {
        cmd.query_async(self.0)
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
        let call = cmd.query_async(self.0);
        async move {
            match tokio::time::timeout(budget, call).await {
                Ok(result) => result,
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {budget:?}"),
                )
                .into()),
            }
        }
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
        match link.query(cmd).await {
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
