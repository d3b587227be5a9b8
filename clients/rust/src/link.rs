//! Where the sale logic meets a connection. Each operation is written once, as async code over
//! a [`Link`]; the sync API drives it with [`Blocking`], whose calls are done before their
//! future is first polled (so `block_on` never waits on anything but the server), and the async
//! API with [`Tokio`], over a `redis::aio` connection. Sleeps go through the link too: a thread
//! sleeps in the sync API, a task in the async one, so no async path ever blocks its runtime.

use crate::durability::Wait;
use crate::retry::MIN_CALL_BOUND;
use crate::retry::{RetryPolicy, is_retryable};
use crate::waiting::Wake;
use redis::{Cmd, ConnectionLike, FromRedisValue, Pipeline, RedisResult, Value};
use std::future::{Future, ready};
use std::time::Duration;

pub(crate) trait Link {
    fn query<T: FromRedisValue + Send>(
        &mut self,
        cmd: &Cmd,
    ) -> impl Future<Output = RedisResult<T>> + Send;

    /// `pipe`'s replies (one MULTI ... EXEC when it is atomic).
    fn query_pipe<T: FromRedisValue + Send>(
        &mut self,
        pipe: &Pipeline,
    ) -> impl Future<Output = RedisResult<T>> + Send;

    fn sleep(&mut self, wait: Duration) -> impl Future<Output = ()> + Send;

    /// Waits until `wake` moves past `seen`, or `timeout`: a thread in the sync API, a task
    /// in the async one.
    fn nap<'w>(
        &mut self,
        wake: &'w Wake,
        seen: u64,
        timeout: Duration,
    ) -> impl Future<Output = ()> + Send + 'w;

    /// The bound of one call without a budget of its own (the handle's deadline on the async
    /// links; a sync connection is bounded by its own read timeout).
    fn bound(&self) -> Duration {
        MIN_CALL_BOUND
    }

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

    /// `write`, kept: its reply, then the answer of `wait` (a `WAIT` or `WAITAOF` sent on its
    /// connection after it) when `changed` says the reply changed something, else `Nil`
    /// (nothing waited for). `budgets`: the write's, the wait's. One call after the other
    /// but on the crate's async cluster session, which writes one wait for every write
    /// answered in one read (`Tokio`'s).
    fn query_kept(
        &mut self,
        write: &Cmd,
        wait: &Wait,
        changed: fn(&Value) -> bool,
        budgets: (Duration, Duration),
    ) -> impl Future<Output = RedisResult<(Value, Value)>> + Send;
}

/// [`Link::query_kept`] as two calls: the write, then (when it changed something) the wait.
pub(crate) async fn one_then_the_other<L: Link + Send + ?Sized>(
    link: &mut L,
    write: &Cmd,
    wait: &Wait,
    changed: fn(&Value) -> bool,
    (write_budget, wait_budget): (Duration, Duration),
) -> RedisResult<(Value, Value)> {
    let reply: Value = link.query_within(write, write_budget).await?;
    if !changed(&reply) {
        return Ok((reply, Value::Nil));
    }
    let answer: Value = link
        .query_within(&wait.cmd, wait_budget)
        .await
        .map_err(after_answer)?;
    Ok((reply, answer))
}

/// A failure after a write answered (its wait's, its master's look): the write ran, so a
/// failure that says nothing was sent (a node marked down, a refused connect) is reported as
/// one that may have run (retryable still, never `Unavailable`).
pub(crate) fn after_answer(e: redis::RedisError) -> redis::RedisError {
    if crate::retry::may_have_run(&e) || !is_retryable(&e) {
        return e;
    }
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        format!("the write was answered, what followed failed: {e}"),
    )
    .into()
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

    fn query_pipe<T: FromRedisValue + Send>(
        &mut self,
        pipe: &Pipeline,
    ) -> impl Future<Output = RedisResult<T>> + Send {
        ready(pipe.query(self.0))
    }

    fn sleep(&mut self, wait: Duration) -> impl Future<Output = ()> + Send {
        std::thread::sleep(wait);
        ready(())
    }

    fn nap<'w>(
        &mut self,
        wake: &'w Wake,
        seen: u64,
        timeout: Duration,
    ) -> impl Future<Output = ()> + Send + 'w {
        wake.wait_blocking(seen, timeout);
        ready(())
    }

    fn query_kept(
        &mut self,
        write: &Cmd,
        wait: &Wait,
        changed: fn(&Value) -> bool,
        _: (Duration, Duration),
    ) -> impl Future<Output = RedisResult<(Value, Value)>> + Send {
        let reply = write.query::<Value>(self.0);
        ready(reply.and_then(|reply| {
            if !changed(&reply) {
                return Ok((reply, Value::Nil));
            }
            let answer = wait.cmd.query(self.0).map_err(after_answer)?;
            Ok((reply, answer))
        }))
    }
}

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

/// The crate's async cluster session, when `con` is one: its kept writes share their waits.
fn as_session<C: 'static>(con: &mut C) -> Option<&mut crate::aio::ClusterSession> {
    (con as &mut dyn std::any::Any).downcast_mut()
}

impl<C: redis::aio::ConnectionLike + Send + 'static> Link for Tokio<'_, C> {
    fn query<T: FromRedisValue + Send>(
        &mut self,
        cmd: &Cmd,
    ) -> impl Future<Output = RedisResult<T>> + Send {
        within(self.bound, cmd.query_async(self.con))
    }

    fn query_pipe<T: FromRedisValue + Send>(
        &mut self,
        pipe: &Pipeline,
    ) -> impl Future<Output = RedisResult<T>> + Send {
        within(self.bound, pipe.query_async(self.con))
    }

    fn sleep(&mut self, wait: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(wait)
    }

    fn nap<'w>(
        &mut self,
        wake: &'w Wake,
        seen: u64,
        timeout: Duration,
    ) -> impl Future<Output = ()> + Send + 'w {
        wake.wait(seen, timeout)
    }

    fn bounds_calls(&self) -> bool {
        true
    }

    fn bound(&self) -> Duration {
        self.bound
    }

    async fn query_kept(
        &mut self,
        write: &Cmd,
        wait: &Wait,
        changed: fn(&Value) -> bool,
        budgets: (Duration, Duration),
    ) -> RedisResult<(Value, Value)> {
        match as_session(self.con) {
            Some(session) => {
                // Boxed: the session's future is large, and a future is copied at each call
                // it is passed through (see `Sale::buy_on`). Bounded by the session, with its
                // own bound of the reply, under one timer.
                let budget = budgets.0 + budgets.1;
                let wait = (wait.packed.clone(), wait.timeout);
                Box::pin(session.kept(write, wait, changed, budget)).await
            }
            None => Box::pin(one_then_the_other(self, write, wait, changed, budgets)).await,
        }
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
        Err(_) => Err(no_answer(budget)),
    }
}

/// A call's timeout after `budget`: an I/O error, retryable, the call may have run.
pub(crate) fn no_answer(budget: Duration) -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {budget:?}"),
    )
    .into()
}

/// Runs an operation of the sync API to its end on this thread.
pub(crate) fn block_on<T>(operation: impl Future<Output = T>) -> T {
    pollster::block_on(operation)
}

/// The rest of a test's scripted [`Link`], whose scripts hold single commands: no pipelines,
/// naps that pass, a kept write sent as its write then its wait.
#[cfg(test)]
macro_rules! scripted_link_rest {
    () => {
        fn query_pipe<T: redis::FromRedisValue + Send>(
            &mut self,
            _: &redis::Pipeline,
        ) -> impl std::future::Future<Output = redis::RedisResult<T>> + Send {
            let none = (
                redis::ErrorKind::UnexpectedReturnType,
                "no pipeline in these scripts",
            );
            std::future::ready(Err(none.into()))
        }

        fn nap<'w>(
            &mut self,
            _: &'w crate::waiting::Wake,
            _: u64,
            _: std::time::Duration,
        ) -> impl std::future::Future<Output = ()> + Send + 'w {
            std::future::ready(())
        }

        fn query_kept(
            &mut self,
            write: &redis::Cmd,
            wait: &crate::durability::Wait,
            changed: fn(&redis::Value) -> bool,
            budgets: (std::time::Duration, std::time::Duration),
        ) -> impl std::future::Future<Output = redis::RedisResult<(redis::Value, redis::Value)>> + Send
        {
            crate::link::one_then_the_other(self, write, wait, changed, budgets)
        }
    };
}
#[cfg(test)]
pub(crate) use scripted_link_rest;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::error::Result;
    use crate::retry::{Retrier, io_error, may_have_run};
    use std::time::Instant;

    /// A link whose calls answer from a script, one entry per call, and whose sleeps pass.
    struct Scripted {
        answers: std::vec::IntoIter<redis::RedisResult<i64>>,
        calls: usize,
    }

    impl Scripted {
        fn new(answers: Vec<redis::RedisResult<i64>>) -> Scripted {
            Scripted {
                answers: answers.into_iter(),
                calls: 0,
            }
        }
    }

    impl Link for Scripted {
        fn query<T: redis::FromRedisValue + Send>(
            &mut self,
            _: &redis::Cmd,
        ) -> impl Future<Output = redis::RedisResult<T>> + Send {
            self.calls += 1;
            let answer = self.answers.next().unwrap_or_else(|| Err(io_error()));
            std::future::ready(answer.and_then(|v| Ok(T::from_redis_value(redis::Value::Int(v))?)))
        }

        fn sleep(&mut self, wait: Duration) -> impl Future<Output = ()> + Send {
            std::thread::sleep(wait);
            std::future::ready(())
        }

        scripted_link_rest!();
    }

    /// A write sent under `policy`, nothing waited for (the retries are what is tested).
    fn run(policy: &RetryPolicy, attempt: &str, link: &mut Scripted) -> Result<i64> {
        let mut retrier = Retrier::new("test", policy, attempt);
        let replicas = crate::durability::Replicas::default();
        let waits = crate::durability::Waits::default();
        let keeping = crate::durability::Keeping {
            keep: None,
            replicas: &replicas,
            waits: &waits,
        };
        let write = ("k", crate::durability::Change::Wrote);
        let ping = redis::cmd("PING");
        block_on(crate::keeping::retried_and_kept(
            link,
            &mut retrier,
            ping,
            write,
            keeping,
        ))
    }

    #[test]
    fn a_call_is_retried_until_it_answers_or_the_deadline_passes() {
        let policy = RetryPolicy {
            deadline: Duration::from_millis(200),
            first_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        };
        let mut link = Scripted::new(vec![Err(io_error()), Err(io_error()), Ok(7)]);
        assert_eq!((run(&policy, "a1", &mut link).unwrap(), link.calls), (7, 3));
        let started = Instant::now();
        match run(&policy, "a2", &mut Scripted::new(vec![])) {
            Err(Error::OutcomeUnknown { attempt_id, .. }) => assert_eq!(attempt_id, "a2"),
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() <= Duration::from_millis(400));
        let wrong = redis::make_extension_error("WRONGTYPE".to_string(), None);
        let mut link = Scripted::new(vec![Err(wrong), Ok(1)]);
        let refused = run(&policy, "a3", &mut link);
        assert!(
            matches!(refused, Err(Error::WrongType(_))) && link.calls == 1,
            "not retried"
        );
        match run(&RetryPolicy::none(), "a4", &mut Scripted::new(vec![])) {
            Err(Error::OutcomeUnknown { .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    fn refused() -> redis::RedisError {
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused").into()
    }

    #[test]
    fn a_call_never_sent_is_unavailable_one_that_may_have_run_is_unknown() {
        let policy = RetryPolicy {
            deadline: Duration::from_millis(50),
            first_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        };
        let not_sent = || {
            vec![
                Err(refused()),
                Err((redis::ErrorKind::ClusterConnectionNotFound, "no node").into()),
                Err(redis::make_extension_error("TRYAGAIN".into(), None)),
            ]
            .into_iter()
            .cycle()
            .take(10_000)
            .collect::<Vec<_>>()
        };
        match run(&policy, "n1", &mut Scripted::new(not_sent())) {
            Err(Error::Unavailable { attempt_id, .. }) => assert_eq!(attempt_id, "n1"),
            other => panic!("{other:?}"),
        }
        // One send that may have run among refusals: the outcome is unknown.
        let mut answers = vec![Err(io_error())];
        answers.extend(not_sent());
        match run(&policy, "n2", &mut Scripted::new(answers)) {
            Err(Error::OutcomeUnknown { .. }) => {}
            other => panic!("{other:?}"),
        }
        // A failure between sends (a borrow) ran nothing of the call.
        let mut retrier = Retrier::new("test", &policy, "n3");
        assert!(retrier.backoff_between(io_error()).is_ok());
        assert!(retrier.backoff(refused()).is_ok());
        std::thread::sleep(policy.deadline);
        assert!(matches!(
            retrier.backoff(refused()),
            Err(Error::Unavailable { .. })
        ));
        assert!(!may_have_run(&refused()) && may_have_run(&io_error()));
    }
}
