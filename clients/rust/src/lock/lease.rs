//! A lock's settings and its lease: pure, no connection. The clock is passed in (`now`), so
//! every branch is tested without a server or a sleep. The same rules as the Python
//! package's `seckill/_lock.py`.

use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// A lease the server grants and the client renews.
pub const DEFAULT_TTL_MS: u64 = 30_000;
/// How long a grant or a renewal waits for a replica to acknowledge it, at most.
pub const DEFAULT_REPLICA_TIMEOUT_MS: u64 = 1_000;

/// How a [`crate::Lock`] holds its lease; `..LockOptions::default()` for the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockOptions {
    /// The lease. The watchdog renews it while the guard is held, so a holder stuck in a slow
    /// call keeps the lock as long as its process lives; a dead holder's lock is free `ttl_ms`
    /// after its last renewal. At least 3.
    pub ttl_ms: u64,
    /// How often the watchdog renews (default: `ttl_ms / 3`).
    pub renew_ms: Option<u64>,
    /// No renewal past this much time after the grant (default: no cap).
    pub max_hold_ms: Option<u64>,
    /// How many replicas must acknowledge a grant or a renewal (`WAIT`). `None`: one when the
    /// master has any, else none; `Some(0)` turns it off.
    pub replicas: Option<u64>,
    pub replica_timeout_ms: u64,
    /// How much earlier than `ttl_ms` after a renewal's send the guard calls the lease lost,
    /// for the difference in rate between this machine's clock and the server's (default
    /// `ttl_ms / 100 + 2`, Redlock's drift allowance).
    pub margin_ms: Option<u64>,
}

impl Default for LockOptions {
    fn default() -> LockOptions {
        LockOptions {
            ttl_ms: DEFAULT_TTL_MS,
            renew_ms: None,
            max_hold_ms: None,
            replicas: None,
            replica_timeout_ms: DEFAULT_REPLICA_TIMEOUT_MS,
            margin_ms: None,
        }
    }
}

/// [`LockOptions`] checked, defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockSettings {
    pub name: String,
    pub ttl_ms: u64,
    pub renew_ms: u64,
    pub max_hold_ms: Option<u64>,
    pub replicas: Option<u64>,
    pub replica_timeout_ms: u64,
    pub margin_ms: u64,
}

fn invalid(message: String) -> Error {
    Error::InvalidArgument(message)
}

impl LockSettings {
    pub fn build(name: &str, options: &LockOptions) -> Result<LockSettings> {
        if name.is_empty() {
            return Err(invalid("a lock's name must be a non-empty string".into()));
        }
        let ttl = options.ttl_ms;
        if ttl < 3 {
            return Err(invalid(format!("ttl_ms must be at least 3, got {ttl}")));
        }
        let margin = options.margin_ms.unwrap_or(ttl / 100 + 2);
        if margin >= ttl {
            return Err(invalid(format!(
                "margin_ms ({margin}) must be less than ttl_ms ({ttl})"
            )));
        }
        let renew = options.renew_ms.unwrap_or((ttl / 3).max(1));
        if renew == 0 || renew >= ttl - margin {
            return Err(invalid(format!(
                "renew_ms ({renew}) must be at least 1 and less than ttl_ms - margin_ms ({}): \
                 the lease would run out before its renewal",
                ttl - margin
            )));
        }
        if options.max_hold_ms == Some(0) {
            return Err(invalid("max_hold_ms must be at least 1".into()));
        }
        if options.replica_timeout_ms == 0 {
            return Err(invalid("replica_timeout_ms must be at least 1".into()));
        }
        Ok(LockSettings {
            name: name.to_string(),
            ttl_ms: ttl,
            renew_ms: renew,
            max_hold_ms: options.max_hold_ms,
            replicas: options.replicas,
            replica_timeout_ms: options.replica_timeout_ms,
            margin_ms: margin,
        })
    }
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

/// What the holder knows of its lease. It is known held until `deadline`: the send time of
/// the last renewal the server (and the replicas asked for) acknowledged, plus `ttl_ms -
/// margin_ms`. The server expires it no earlier than `ttl_ms` after it ran that command,
/// which is after its send; so past the deadline the holder stops trusting it, no later than
/// the server could hand it on.
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    granted_at: Instant,
    pub deadline: Instant,
    next_renewal: Instant,
}

impl Lease {
    pub fn new(settings: &LockSettings, granted_sent: Instant) -> Lease {
        let mut lease = Lease {
            granted_at: granted_sent,
            deadline: granted_sent,
            next_renewal: granted_sent,
        };
        lease.renewed(settings, granted_sent, settings.ttl_ms);
        lease
    }

    /// A grant or a renewal sent at `sent` for `ttl_ms` was acknowledged.
    pub fn renewed(&mut self, settings: &LockSettings, sent: Instant, ttl_ms: u64) {
        self.deadline = self
            .deadline
            .max(sent + ms(ttl_ms.saturating_sub(settings.margin_ms)));
        self.next_renewal = sent + ms(settings.renew_ms);
    }

    /// A renewal got no definite answer: try again soon, within the deadline.
    pub fn failed(&mut self, settings: &LockSettings, now: Instant) {
        self.next_renewal = now + ms(settings.renew_ms / 4).min(ms(50));
    }

    pub fn expired(&self, now: Instant) -> bool {
        now >= self.deadline
    }

    /// The TTL the next renewal asks for: the lease, cut short at `max_hold_ms` after the
    /// grant; `None` when the cap is reached (the lease then runs out).
    pub fn renewal_ttl(&self, settings: &LockSettings, now: Instant) -> Option<u64> {
        let Some(cap) = settings.max_hold_ms else {
            return Some(settings.ttl_ms);
        };
        let end = self.granted_at + ms(cap);
        let left =
            u64::try_from(end.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX);
        let ttl = settings.ttl_ms.min(left);
        (ttl > settings.margin_ms).then_some(ttl)
    }

    /// How long until the watchdog has something to do: a renewal, or the deadline.
    pub fn delay(&self, settings: &LockSettings, now: Instant) -> Duration {
        let wake = if self.renewal_ttl(settings, now).is_none() {
            self.deadline
        } else {
            self.next_renewal.min(self.deadline)
        };
        wake.saturating_duration_since(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(options: LockOptions) -> Result<LockSettings> {
        LockSettings::build("k", &options)
    }

    fn three_seconds() -> LockOptions {
        LockOptions {
            ttl_ms: 3_000,
            ..LockOptions::default()
        }
    }

    #[test]
    fn defaults_renew_at_a_third_with_redlocks_drift_margin() {
        let s = settings(three_seconds()).unwrap();
        assert_eq!((s.renew_ms, s.margin_ms, s.replicas), (1_000, 32, None));
    }

    #[test]
    fn every_bad_setting_is_an_invalid_argument() {
        let bad = [
            LockOptions {
                ttl_ms: 2,
                ..three_seconds()
            },
            LockOptions {
                margin_ms: Some(3_000),
                ..three_seconds()
            },
            LockOptions {
                renew_ms: Some(0),
                ..three_seconds()
            },
            LockOptions {
                renew_ms: Some(2_968),
                ..three_seconds()
            },
            LockOptions {
                max_hold_ms: Some(0),
                ..three_seconds()
            },
            LockOptions {
                replica_timeout_ms: 0,
                ..three_seconds()
            },
        ];
        for options in bad {
            assert!(
                matches!(settings(options.clone()), Err(Error::InvalidArgument(_))),
                "{options:?}"
            );
        }
        assert!(matches!(
            LockSettings::build("", &three_seconds()),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn the_lease_runs_from_each_acknowledged_send_less_the_margin() {
        let s = settings(three_seconds()).unwrap();
        let t0 = Instant::now();
        let mut lease = Lease::new(&s, t0);
        assert_eq!(lease.deadline, t0 + ms(2_968));
        assert_eq!(lease.delay(&s, t0), ms(1_000));
        assert!(!lease.expired(t0 + ms(2_967)) && lease.expired(t0 + ms(2_968)));
        lease.renewed(&s, t0 + ms(1_000), 3_000);
        assert_eq!(lease.deadline, t0 + ms(3_968));
        lease.renewed(&s, t0 + ms(500), 3_000); // acknowledged late: never shortens the lease
        assert_eq!(lease.deadline, t0 + ms(3_968));
        lease.failed(&s, t0 + ms(2_000));
        assert_eq!(lease.delay(&s, t0 + ms(2_000)), ms(50));
        assert_eq!(lease.delay(&s, t0 + ms(9_000)), Duration::ZERO);
    }

    #[test]
    fn max_hold_cuts_the_renewals_short_then_stops_them() {
        let s = settings(LockOptions {
            max_hold_ms: Some(4_000),
            ..three_seconds()
        })
        .unwrap();
        let t0 = Instant::now();
        let lease = Lease::new(&s, t0);
        assert_eq!(lease.renewal_ttl(&s, t0 + ms(1_000)), Some(3_000));
        assert_eq!(lease.renewal_ttl(&s, t0 + ms(2_500)), Some(1_500));
        assert_eq!(lease.renewal_ttl(&s, t0 + ms(3_990)), None);
        // A cap shorter than the TTL: no renewal at all, the watchdog sleeps to the deadline.
        let s = settings(LockOptions {
            max_hold_ms: Some(1_000),
            ..three_seconds()
        })
        .unwrap();
        let short = Lease::new(&s, t0);
        assert_eq!(short.renewal_ttl(&s, t0 + ms(990)), None);
        assert_eq!(short.delay(&s, t0 + ms(990)), ms(1_978));
    }
}
