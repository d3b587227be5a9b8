//! What each call of a sale handle did, for the application's metrics: with the `metrics`
//! feature, every call of [`crate::FlashSale`] and [`crate::aio::FlashSale`] counts in
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
        "Calls of seckill sale handles, by operation and outcome."
    );
    metrics::describe_histogram!(
        DURATION,
        metrics::Unit::Seconds,
        "Time a call of a seckill sale handle took, retries and replica acknowledgement included."
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
        let labels = [("operation", operation), ("outcome", outcome)];
        metrics::counter!(CALLS, &labels).increment(1);
        metrics::histogram!(DURATION, &labels).record(started.elapsed().as_secs_f64());
    }
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
        outcomes.extend([LOCAL_REFUSAL, OK]);
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
        assert_eq!(error_outcome(&Error::Redis(io())), "unavailable");
    }
}
