//! What each call of a sale handle or a lock did, for the application's metrics: with the
//! `metrics` feature, every call of [`crate::FlashSale`] and [`crate::aio::FlashSale`], and
//! each hold and release of a [`crate::Lock`] and a [`crate::aio::Lock`], counts in
//! `seckill_client_calls_total{operation, outcome}` and times itself in
//! `seckill_client_call_duration_seconds{operation, outcome}` (seconds), and every resend of
//! a purchase or a cancel counts in `seckill_client_retries_total{operation}`, on the
//! [`metrics`](https://docs.rs/metrics) facade: the application installs the recorder it
//! exports with (`metrics-exporter-prometheus`, ...). The names are the Python package's
//! (`seckill.metrics`), checked against `clients/metrics.txt`. Without the feature this
//! module records nothing and costs nothing.

use crate::error::{Error, Result};
use crate::reply::TryReply;
use std::future::Future;
use std::time::Instant;

// Without the feature only the tests read the names.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const CALLS: &str = "seckill_client_calls_total";
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const DURATION: &str = "seckill_client_call_duration_seconds";
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const RETRIES: &str = "seckill_client_retries_total";

/// Gives the installed recorder the client metrics' help text and units (the Python
/// package's): call it once, after installing the recorder, for an exposition that says what
/// each metric is.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    metrics::describe_counter!(
        CALLS,
        "Calls of seckill sale handles and locks, by operation and outcome."
    );
    metrics::describe_histogram!(
        DURATION,
        metrics::Unit::Seconds,
        "Time a call of a seckill sale handle or lock took, retries and replica acknowledgement included."
    );
    metrics::describe_counter!(
        RETRIES,
        "Sends of a purchase or a cancel made again after a lost answer."
    );
}

/// The outcome of a call that answered without an error and is not a purchase.
pub(crate) const OK: &str = "ok";
/// A call whose outcome its caller did not learn.
const UNKNOWN: &str = "unknown";
/// A purchase the sold-out cache refused with nothing sent.
pub(crate) const LOCAL_REFUSAL: &str = "local_refusal";
/// A lock not granted within its wait ([`Error::LockTimeout`]).
const NOT_GRANTED: &str = "not_granted";
/// A lock's release that found its lease gone (expired, or taken by another holder since).
const LOST: &str = "lost";

/// A purchase's answer, as its outcome label.
pub(crate) fn purchase_outcome(reply: &TryReply) -> &'static str {
    match reply {
        TryReply::Bought { .. } => "bought",
        TryReply::SoldOut => "sold_out",
        TryReply::OverLimit => "over_limit",
        TryReply::NotStarted => "not_started",
        TryReply::Ended => "ended",
        TryReply::NotAdmitted => "not_admitted",
    }
}

/// An error, as its outcome label: what the caller does about it (tell the buyer
/// "confirming", "try again", or look into it).
pub(crate) fn error_outcome(error: &Error) -> &'static str {
    match error {
        Error::NotReplicated { .. } => "not_replicated",
        Error::OutcomeUnknown { .. } => UNKNOWN,
        Error::Unavailable { .. } => "unavailable",
        Error::LockTimeout { .. } => NOT_GRANTED,
        Error::Redis(error)
            if error.is_io_error() || error.is_timeout() || error.is_connection_dropped() =>
        {
            "unavailable"
        }
        _ => "error",
    }
}

/// One call being made: recorded once, by [`Observation::finish`], or as "unknown" when the
/// call's future is dropped before its end (a task cancelled, a timeout around it: it did not
/// learn its outcome), as the Python package records a cancelled call.
pub(crate) struct Observation {
    operation: &'static str,
    started: Instant,
    finished: bool,
}

impl Observation {
    pub(crate) fn start(operation: &'static str) -> Observation {
        Observation {
            operation,
            started: Instant::now(),
            finished: false,
        }
    }

    pub(crate) fn finish(mut self, outcome: &'static str) {
        self.finished = true;
        record(self.operation, outcome, self.started);
    }
}

impl Drop for Observation {
    fn drop(&mut self) {
        if !self.finished {
            record(self.operation, UNKNOWN, self.started);
        }
    }
}

/// Counts and times one call that started at `started`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
fn record(operation: &'static str, outcome: &'static str, started: Instant) {
    #[cfg(feature = "metrics")]
    {
        let seconds = started.elapsed().as_secs_f64();
        match keys(operation, outcome) {
            Some((calls, duration)) => metrics::with_recorder(|recorder| {
                recorder.register_counter(calls, &METADATA).increment(1);
                recorder
                    .register_histogram(duration, &METADATA)
                    .record(seconds);
            }),
            None => {
                let labels = [("operation", operation), ("outcome", outcome)];
                metrics::counter!(CALLS, &labels).increment(1);
                metrics::histogram!(DURATION, &labels).record(seconds);
            }
        }
    }
}

/// The operations and the outcomes of `clients/metrics.txt`, in its order.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const OPERATIONS: [&str; 13] = [
    "try_buy",
    "confirm",
    "cancel",
    "restock",
    "join",
    "leave",
    "position",
    "place",
    "admit",
    "bought",
    "info",
    "lock_hold",
    "lock_release",
];
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
const OUTCOMES: [&str; 14] = [
    "bought",
    "sold_out",
    "over_limit",
    "not_started",
    "ended",
    "not_admitted",
    LOCAL_REFUSAL,
    NOT_GRANTED,
    LOST,
    OK,
    UNKNOWN,
    "not_replicated",
    "unavailable",
    "error",
];

/// What the `metrics` macros give a call site's metric.
#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The calls' and the durations' keys of `operation` and `outcome`, made once: a key made per
/// call allocates its labels, twice per call (most of what the metrics cost a purchase,
/// `make bench`, "Durability"). `None` for a pair outside the tables.
#[cfg(feature = "metrics")]
fn keys(
    operation: &'static str,
    outcome: &'static str,
) -> Option<&'static (metrics::Key, metrics::Key)> {
    use std::sync::OnceLock;
    static KEYS: [OnceLock<(metrics::Key, metrics::Key)>; OPERATIONS.len() * OUTCOMES.len()] =
        [const { OnceLock::new() }; OPERATIONS.len() * OUTCOMES.len()];
    let row = OPERATIONS.iter().position(|&name| name == operation)?;
    let column = OUTCOMES.iter().position(|&name| name == outcome)?;
    Some(KEYS[row * OUTCOMES.len() + column].get_or_init(|| {
        let labels = [("operation", operation), ("outcome", outcome)];
        let key = |name| metrics::Key::from_parts(name, &labels);
        (key(CALLS), key(DURATION))
    }))
}

/// Counts one resend of a call of `operation`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn retried(operation: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(RETRIES, "operation" => operation).increment(1);
}

/// Runs `call`, a call of `operation` that is not a purchase, and records it: outcome "ok" or
/// its error's.
pub(crate) async fn observed<T>(
    operation: &'static str,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    let observation = Observation::start(operation);
    let result = call.await;
    observation.finish(result.as_ref().map_or_else(error_outcome, |_| OK));
    result
}

/// Runs `call`, a lock's release, and records it as `lock_release`: "ok" when this holder
/// still held the lock, "lost" when its lease was gone, or its error's. A release never fails
/// its caller: a failure answers `false` (the lease runs out by itself).
pub(crate) async fn observed_release(call: impl Future<Output = redis::RedisResult<bool>>) -> bool {
    let observation = Observation::start("lock_release");
    let released = call.await;
    observation.finish(match &released {
        Ok(true) => OK,
        Ok(false) => LOST,
        Err(e) => error_outcome(&Error::Redis(e.clone())),
    });
    released.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names and labels here are the shared table's (`clients/metrics.txt`), which the
    /// Python package's tests read too.
    #[test]
    fn names_and_outcomes_are_the_shared_tables() {
        let table = include_str!("../../metrics.txt");
        let rows: Vec<Vec<&str>> = table
            .lines()
            .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
            .map(|line| line.split_whitespace().collect())
            .collect();
        let of_kind = |kind: &str| -> Vec<&str> {
            rows.iter()
                .filter(|row| row[0] == kind)
                .map(|row| row[1])
                .collect()
        };
        assert_eq!(of_kind("counter"), [CALLS, RETRIES]);
        assert_eq!(of_kind("histogram"), [DURATION]);
        let replies = [
            TryReply::Bought { remaining: 0 },
            TryReply::SoldOut,
            TryReply::OverLimit,
            TryReply::NotStarted,
            TryReply::Ended,
            TryReply::NotAdmitted,
        ];
        let mut outcomes: Vec<&str> = replies.iter().map(purchase_outcome).collect();
        let not_granted = Error::LockTimeout {
            name: "l".into(),
            reason: "held".into(),
        };
        outcomes.extend([LOCAL_REFUSAL, error_outcome(&not_granted), LOST, OK]);
        let io = || redis::RedisError::from(std::io::Error::other("down"));
        let errors = [
            Error::OutcomeUnknown {
                attempt_id: "a".into(),
                last_error: io(),
            },
            Error::NotReplicated {
                reply: 0,
                attempt_id: None,
            },
            Error::Unavailable {
                attempt_id: "a".into(),
                last_error: io(),
            },
            Error::NoHolds,
        ];
        outcomes.extend(errors.iter().map(error_outcome));
        assert_eq!(outcomes, of_kind("outcome"));
        assert_eq!(OUTCOMES.to_vec(), of_kind("outcome"));
        assert_eq!(OPERATIONS.to_vec(), of_kind("operation"));
        assert_eq!(error_outcome(&Error::Redis(io())), "unavailable");
    }
}
