//! Retries of the calls an attempt id makes safe to send again. A purchase or a cancel whose
//! answer was lost (a timeout, a dropped connection, a failover in progress) is sent again
//! with the same attempt id until a definite answer, with jittered exponential backoff, for
//! as long as the caller allows; then the caller gets [`Error::OutcomeUnknown`] with the id,
//! and can ask `bought` what happened, or [`Error::Unavailable`] when no send of it may have
//! run (then it did not happen).

use crate::error::{Error, Result};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

/// How long and how often a call with an attempt id is tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// From the first send: past it, the call ends with [`Error::OutcomeUnknown`].
    pub deadline: Duration,
    /// The wait before the first retry; each later one doubles, up to `max_backoff`.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 40 s in all, waits from 10 ms to 1 s: long enough for a replica's promotion after a
    /// master died on a cluster with Redis's default `cluster-node-timeout` of 15 s (about
    /// 19 s measured; size it as twice the node timeout plus 10 s: docs/clients.md,
    /// "Retries").
    fn default() -> RetryPolicy {
        RetryPolicy {
            deadline: Duration::from_secs(40),
            first_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// No retries: the first failure is the answer ([`Error::OutcomeUnknown`] when a write's
    /// outcome is unknown).
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            deadline: Duration::ZERO,
            ..RetryPolicy::default()
        }
    }
}

/// Whether the call may have run or not, and sending it again may get an answer: the
/// connection failed or timed out, or the cluster is moving a slot or electing a master.
/// MOVED and ASK are the underlying client's to follow; one that reaches the caller (the
/// async cluster client's own retries ran out while a replica was promoted) ran nothing, and
/// the next send goes where the client has learned since; so did one a cluster connection had
/// no connection to send on (a master killed, before its replica's promotion is learned).
pub fn is_retryable(e: &redis::RedisError) -> bool {
    e.is_timeout()
        || turned_replica(e)
        || e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || matches!(
            server_code(e).as_deref(),
            Some(
                "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "LOADING"
                    | "READONLY"
                    | "MASTERDOWN"
                    // A master under min-replicas-to-write without its replicas (after a
                    // failover, until one resynchronises) refused the write: nothing ran.
                    | "NOREPLICAS"
                    // A blocked call (a lock's wait, a WAIT) let go without its answer, as a
                    // master turning replica in a failover does.
                    | "UNBLOCKED"
                    | "MOVED"
                    | "ASK"
            )
        )
}

/// The error code of `e`'s server error, or of the first command's of a pipeline's failure (the
/// lock's calls are pipelines, whose failure has no code of its own).
pub fn server_code(e: &redis::RedisError) -> Option<String> {
    if let Some(code) = e.code() {
        return Some(code.to_string());
    }
    let errors = e.clone().into_server_errors()?;
    errors.first().map(|(_, error)| error.code().to_string())
}

/// Whether a call that failed with `e` may have run: it was written to a connection that then
/// failed or timed out. One refused by the server without running (TRYAGAIN, MOVED, ...: an
/// error reply), one whose connection was refused, or one a cluster connection had no
/// connection to send on, did not.
pub fn may_have_run(e: &redis::RedisError) -> bool {
    turned_replica(e)
        || (e.code().is_none()
            && !e.is_connection_refusal()
            && e.kind() != redis::ErrorKind::ClusterConnectionNotFound)
}

/// A `WAIT` (or `WAITAOF`) refused because its node turned replica after the write it follows
/// answered (a failover between the two: Redis and Valkey answer `ERR WAIT cannot be used with
/// replica instances`): the write ran, and whether the new master has it, the same write sent
/// again under its attempt id tells.
fn turned_replica(e: &redis::RedisError) -> bool {
    e.code().is_some()
        && e.detail()
            .is_some_and(|detail| detail.contains("cannot be used with replica instances"))
}

/// The waits between tries: exponential, capped, each a random time in its upper half (so
/// clients that failed together do not all come back together).
pub struct Backoff {
    next: Duration,
    max: Duration,
    random: RandomState,
    count: u64,
}

impl Backoff {
    pub fn new(policy: &RetryPolicy) -> Backoff {
        Backoff {
            next: policy.first_backoff,
            max: policy.max_backoff,
            random: RandomState::new(),
            count: 0,
        }
    }

    /// The next wait.
    pub fn wait(&mut self) -> Duration {
        let ceiling = self.next;
        self.next = (self.next * 2).min(self.max);
        self.count += 1;
        let mut hasher = self.random.build_hasher();
        hasher.write_u64(self.count);
        let half = ceiling / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
        half + Duration::from_nanos(hasher.finish() % nanos)
    }
}

/// The least time one call is given, however little its deadline leaves: a policy without
/// retries (deadline zero) still gets its one answer.
pub(crate) const MIN_CALL_BOUND: Duration = Duration::from_secs(1);

/// The retries of one call under one attempt id, all within one deadline.
pub struct Retrier<'a> {
    /// The call's name in the client metrics (`crate::observe`): "try_buy", "cancel".
    operation: &'static str,
    policy: &'a RetryPolicy,
    attempt_id: &'a str,
    start: Instant,
    backoff: Backoff,
    may_have_run: bool,
}

impl<'a> Retrier<'a> {
    pub fn new(
        operation: &'static str,
        policy: &'a RetryPolicy,
        attempt_id: &'a str,
    ) -> Retrier<'a> {
        Retrier {
            operation,
            policy,
            attempt_id,
            start: Instant::now(),
            backoff: Backoff::new(policy),
            may_have_run: false,
        }
    }

    /// How long the next send may wait for its answer (where the link can bound one): the
    /// time left before the deadline, and for the first send at least MIN_CALL_BOUND.
    pub fn send_budget(&self) -> Duration {
        let left = self.policy.deadline.saturating_sub(self.start.elapsed());
        if self.retried() {
            left.max(Duration::from_millis(1))
        } else {
            left.max(MIN_CALL_BOUND)
        }
    }

    /// Whether a call had to be sent again (or waited out) at least once.
    pub fn retried(&self) -> bool {
        self.backoff.count > 0
    }

    /// The wait before trying again after `failure` of the call's own send, or, past the
    /// deadline, the end: [`Error::OutcomeUnknown`] with `failure`, or [`Error::Unavailable`]
    /// when no send of the call may have run.
    pub fn backoff(&mut self, failure: redis::RedisError) -> Result<Duration> {
        self.may_have_run |= may_have_run(&failure);
        self.backoff_between(failure)
    }

    pub fn attempt_id(&self) -> &str {
        self.attempt_id
    }

    /// [`Retrier::backoff`] after a failure between two sends (a borrow), which ran nothing
    /// of the call.
    pub fn backoff_between(&mut self, failure: redis::RedisError) -> Result<Duration> {
        let wait = self.backoff.wait();
        if self.start.elapsed() + wait > self.policy.deadline {
            let attempt_id = self.attempt_id.to_string();
            return Err(if self.may_have_run {
                Error::OutcomeUnknown {
                    attempt_id,
                    last_error: failure,
                }
            } else {
                Error::Unavailable {
                    attempt_id,
                    last_error: failure,
                }
            });
        }
        crate::observe::retried(self.operation);
        Ok(wait)
    }
}

/// A lost connection, for tests.
#[cfg(test)]
pub(crate) fn io_error() -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failovers_and_lost_connections_are_retried_other_errors_are_not() {
        assert!(is_retryable(&io_error()));
        let no_connection = (redis::ErrorKind::ClusterConnectionNotFound, "no node").into();
        assert!(is_retryable(&no_connection));
        for code in [
            "TRYAGAIN",
            "CLUSTERDOWN",
            "LOADING",
            "READONLY",
            "MASTERDOWN",
            "NOREPLICAS",
            "UNBLOCKED",
            "MOVED",
            "ASK",
        ] {
            let e = redis::make_extension_error(code.to_string(), Some("x".to_string()));
            assert!(is_retryable(&e), "{code}");
        }
        let wrong = redis::make_extension_error("WRONGTYPE".to_string(), None);
        assert!(!is_retryable(&wrong));
    }

    #[test]
    fn a_wait_refused_by_a_master_turned_replica_is_retried_and_may_have_run() {
        let server_error = |reply: &[u8]| match redis::parse_redis_value(reply) {
            Ok(redis::Value::ServerError(e)) => redis::RedisError::from(e),
            other => panic!("{other:?}"),
        };
        // As the servers word them (Redis 7.0's WAIT, Redis 7.2+'s and Valkey's WAITAOF).
        for reply in [
            &b"-ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.\r\n"[..],
            b"-ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just local and are not propagated.\r\n",
        ] {
            let refused = server_error(reply);
            assert!(is_retryable(&refused), "{refused}");
            assert!(may_have_run(&refused), "the write before it ran: {refused}");
        }
        let other = server_error(b"-ERR syntax error\r\n");
        assert!(!is_retryable(&other) && !may_have_run(&other));
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter_in_the_upper_half() {
        let policy = RetryPolicy {
            deadline: Duration::from_secs(1),
            first_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(40),
        };
        let mut backoff = Backoff::new(&policy);
        let ceilings = [10, 20, 40, 40, 40];
        for ceiling in ceilings {
            let wait = backoff.wait();
            let ceiling = Duration::from_millis(ceiling);
            assert!(
                wait >= ceiling / 2 && wait <= ceiling,
                "{wait:?} for {ceiling:?}"
            );
        }
    }
}
