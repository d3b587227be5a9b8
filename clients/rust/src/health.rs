//! Which partitions of a sale could not be read lately, so that a borrow does not wait for a
//! failed master again and again: the rules of the Python package's `_health.py`, kept per
//! partition (the crate talks to a cluster through the application's connection, which does
//! not say which node serves a key).
//!
//! A partition whose read failed or did not answer within the borrow's read timeout is
//! *down*: borrows skip it without sending anything until its next probe time; then one read
//! is let through as the probe, and its answer says whether it is back. Probes come 100 ms
//! after the failure, then twice as far apart, 1 s at most. Pure: the time is passed in.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The first probe after a failure, and the longest wait between two probes.
pub const FIRST_PROBE: Duration = Duration::from_millis(100);
pub const MAX_PROBE: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq)]
struct Down {
    probe_at: Instant,
    interval: Duration,
    probing: bool,
}

/// The down partitions of one sale handle.
pub(crate) struct Health {
    down: Mutex<Vec<Option<Down>>>,
}

impl Health {
    pub fn new(partitions: usize) -> Health {
        Health {
            down: Mutex::new(vec![None; partitions]),
        }
    }

    fn down(&self) -> std::sync::MutexGuard<'_, Vec<Option<Down>>> {
        self.down.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a read of `partition` may be sent now: it is up, or this read is its probe.
    pub fn may_read(&self, partition: usize, now: Instant) -> bool {
        let mut down = self.down();
        match &mut down[partition] {
            None => true,
            Some(state) if state.probing || now < state.probe_at => false,
            Some(state) => {
                state.probing = true;
                true
            }
        }
    }

    /// A read of `partition` failed or timed out: down until its next probe.
    pub fn failed(&self, partition: usize, now: Instant) {
        let mut down = self.down();
        let interval = match down[partition] {
            None => FIRST_PROBE,
            Some(state) => (state.interval * 2).min(MAX_PROBE),
        };
        down[partition] = Some(Down {
            probe_at: now + interval,
            interval,
            probing: false,
        });
    }

    /// `partition` answered: up.
    pub fn answered(&self, partition: usize) {
        self.down()[partition] = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_partition_is_skipped_until_one_probe_and_probes_back_off() {
        let health = Health::new(2);
        let t0 = Instant::now();
        assert!(health.may_read(0, t0), "up at first");
        health.failed(0, t0);
        assert!(!health.may_read(0, t0), "down right after");
        assert!(health.may_read(1, t0), "the others stay up");
        assert!(!health.may_read(0, t0 + FIRST_PROBE / 2));
        assert!(health.may_read(0, t0 + FIRST_PROBE), "the probe");
        assert!(!health.may_read(0, t0 + FIRST_PROBE), "one probe at a time");
        let t1 = t0 + FIRST_PROBE;
        health.failed(0, t1);
        assert!(
            !health.may_read(0, t1 + FIRST_PROBE),
            "the next probe waits twice as long"
        );
        assert!(health.may_read(0, t1 + FIRST_PROBE * 2));
        let mut t = t1 + FIRST_PROBE * 2;
        for _ in 0..10 {
            health.failed(0, t);
            t += MAX_PROBE;
        }
        assert!(health.may_read(0, t), "capped at MAX_PROBE");
        health.answered(0);
        assert!(health.may_read(0, t) && health.may_read(0, t), "up again");
    }
}
