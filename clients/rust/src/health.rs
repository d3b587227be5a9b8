//! Which masters of a sale could not be read lately, so that a borrow does not wait for a
//! failed master again and again: the rules of the Python package's `_health.py`.
//!
//! A master whose read failed or did not answer within the borrow's read timeout is *down*:
//! borrows skip its partitions without sending anything until its next probe time; then one
//! read is let through as the probe, and its answer says whether it is back (so does any
//! purchase in one of its partitions). Probes come 100 ms after the failure, then twice as far
//! apart, 1 s at most; on a link that cannot bound one call (the sync API, where a read of a
//! frozen master waits the connection's response timeout, and a `ClusterSession` then connects
//! anew, which waits on it too), 5 s after the last failure. Which master serves which
//! partition is [`Placement`]'s to say (the crate talks to a cluster through the application's
//! connection, which does not tell). Pure: the time is passed in.

use crate::routing::{key_slot, slot_ranges};
use redis::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The first probe after a failure, and the longest wait between two probes.
pub const FIRST_PROBE: Duration = Duration::from_millis(100);
pub const MAX_PROBE: Duration = Duration::from_secs(1);
/// The probe of a link that cannot bound one call: rare, as each costs a timeout.
pub const SLOW_PROBE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq)]
struct Down {
    failed_at: Instant,
    probe_at: Instant,
    interval: Duration,
    probing: bool,
}

/// The down masters of one sale handle, by node name.
#[derive(Default)]
pub(crate) struct Health {
    down: Mutex<HashMap<String, Down>>,
    /// Whether any is down: the healthy case takes no lock.
    any_down: AtomicBool,
}

impl Health {
    pub fn any_down(&self) -> bool {
        self.any_down.load(Ordering::Relaxed)
    }

    fn down(&self) -> std::sync::MutexGuard<'_, HashMap<String, Down>> {
        self.down.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a read of `node` may be sent now: it is up, or this read is its probe (with
    /// `bounded` false, the link cannot bound the read: SLOW_PROBE after the last failure).
    pub fn may_read(&self, node: &str, now: Instant, bounded: bool) -> bool {
        let mut down = self.down();
        match down.get_mut(node) {
            None => true,
            Some(state) if state.probing => false,
            Some(state) if bounded && now < state.probe_at => false,
            Some(state) if !bounded && now < state.failed_at + SLOW_PROBE => false,
            Some(state) => {
                state.probing = true;
                true
            }
        }
    }

    /// Whether `node` is down, and its probe is due and not on its way (nothing claimed: the
    /// read that is sent claims it with [`Health::may_read`]).
    pub fn probe_due(&self, node: &str, now: Instant) -> Option<bool> {
        if !self.any_down() {
            return None;
        }
        let down = self.down();
        let state = down.get(node)?;
        Some(!state.probing && now >= state.probe_at)
    }

    /// A read of `node` failed or timed out: down until its next probe.
    pub fn failed(&self, node: &str, now: Instant) {
        let mut down = self.down();
        let interval = match down.get(node) {
            None => FIRST_PROBE,
            Some(state) => (state.interval * 2).min(MAX_PROBE),
        };
        self.any_down.store(true, Ordering::Relaxed);
        down.insert(
            node.to_string(),
            Down {
                failed_at: now,
                probe_at: now + interval,
                interval,
                probing: false,
            },
        );
    }

    /// `node` answered: up.
    pub fn answered(&self, node: &str) {
        if !self.any_down() {
            return;
        }
        let mut down = self.down();
        down.remove(node);
        self.any_down.store(!down.is_empty(), Ordering::Relaxed);
    }
}

/// How often the placement is read again at the most, when a read failed.
const PLACEMENT_EVERY: Duration = Duration::from_secs(1);

/// Which master serves each partition of a sale, as `CLUSTER SLOTS` said when the sale first
/// scanned, and again after a read failed (once a second at the most). Until it is known, and
/// on a server that is no cluster, each partition stands for itself.
pub(crate) struct Placement {
    /// Each partition's hash slot (its key is one hash tag: `{name/i}`).
    slots: Vec<u16>,
    state: Mutex<Placed>,
}

struct Placed {
    /// Each partition's node.
    nodes: Vec<String>,
    /// When they were read (`None`: never).
    read: Option<Instant>,
    /// A read failed since: read them again once PLACEMENT_EVERY has passed.
    stale: bool,
}

impl Placement {
    pub fn new(keys: &[String]) -> Placement {
        Placement {
            slots: keys.iter().map(|key| key_slot(key.as_bytes())).collect(),
            state: Mutex::new(Placed {
                nodes: (0..keys.len()).map(|i| format!("partition {i}")).collect(),
                read: None,
                stale: false,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Placed> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The node serving `partition`, by name.
    pub fn node(&self, partition: usize) -> String {
        self.state().nodes[partition].clone()
    }

    /// Whether the placement should be read (again) now.
    pub fn due(&self, now: Instant) -> bool {
        let state = self.state();
        state
            .read
            .is_none_or(|read| state.stale && now >= read + PLACEMENT_EVERY)
    }

    /// A read failed: the placement may have changed (a failover).
    pub fn stale(&self) {
        self.state().stale = true;
    }

    /// The reply to `CLUSTER SLOTS` read at `now`, or its failure (`None`: what was known is
    /// kept, and the next reading is due in a second). A reply that is no slot map (a server
    /// that is no cluster) leaves each partition standing for itself.
    pub fn learn(&self, reply: Option<&Value>, now: Instant) {
        let mut state = self.state();
        state.read = Some(now);
        state.stale = reply.is_none();
        let Some(reply) = reply else {
            return;
        };
        let ranges = slot_ranges(reply);
        for (partition, slot) in self.slots.iter().enumerate() {
            state.nodes[partition] = ranges
                .iter()
                .find(|range| (range.first..=range.last).contains(slot))
                .map_or_else(
                    || format!("partition {partition}"),
                    |range| range.master.clone(),
                );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_node_is_skipped_until_one_probe_and_probes_back_off() {
        let health = Health::default();
        let t0 = Instant::now();
        assert!(health.may_read("a", t0, true), "up at first");
        health.failed("a", t0);
        assert!(!health.may_read("a", t0, true), "down right after");
        assert!(health.may_read("b", t0, true), "the others stay up");
        assert!(!health.may_read("a", t0 + FIRST_PROBE / 2, true));
        assert!(health.may_read("a", t0 + FIRST_PROBE, true), "the probe");
        assert!(
            !health.may_read("a", t0 + FIRST_PROBE, true),
            "one probe at a time"
        );
        let t1 = t0 + FIRST_PROBE;
        health.failed("a", t1);
        assert!(
            !health.may_read("a", t1 + FIRST_PROBE, true),
            "the next probe waits twice as long"
        );
        assert!(health.may_read("a", t1 + FIRST_PROBE * 2, true));
        let mut t = t1 + FIRST_PROBE * 2;
        for _ in 0..10 {
            health.failed("a", t);
            t += MAX_PROBE;
        }
        assert!(health.may_read("a", t, true), "capped at MAX_PROBE");
        health.answered("a");
        assert!(
            health.may_read("a", t, true) && health.may_read("a", t, true),
            "up again"
        );
        health.failed("a", t);
        assert!(
            !health.may_read("a", t + MAX_PROBE, false),
            "unbounded: no quick probe"
        );
        assert!(
            health.may_read("a", t + SLOW_PROBE, false),
            "but one after SLOW_PROBE"
        );
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn partitions_are_placed_on_the_masters_cluster_slots_names() {
        let keys: Vec<String> = (0..4).map(|i| format!("{{sale/{i}}}")).collect();
        let placement = Placement::new(&keys);
        let t0 = Instant::now();
        assert!(placement.due(t0), "due before the first reading");
        assert_eq!(placement.node(1), "partition 1", "each its own until read");
        let slots = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8191),
                node("10.0.0.1", 7000),
                node("10.0.0.2", 7001),
            ]),
            Value::Array(vec![
                Value::Int(8192),
                Value::Int(16383),
                node("10.0.0.3", 7002),
            ]),
        ]);
        placement.learn(Some(&slots), t0);
        for (partition, key) in keys.iter().enumerate() {
            let want = if key_slot(key.as_bytes()) <= 8191 {
                "10.0.0.1:7000"
            } else {
                "10.0.0.3:7002"
            };
            assert_eq!(placement.node(partition), want, "{key}");
        }
        assert!(
            !placement.due(t0 + PLACEMENT_EVERY),
            "read again only after a failure"
        );
        placement.stale();
        assert!(!placement.due(t0), "once a second at the most");
        assert!(placement.due(t0 + PLACEMENT_EVERY));
        let kept = placement.node(0);
        placement.learn(None, t0);
        assert_eq!(
            placement.node(0),
            kept,
            "a failed reading keeps what was known"
        );
        assert!(
            placement.due(t0 + PLACEMENT_EVERY),
            "tried again in a second"
        );
        placement.learn(Some(&Value::Nil), t0);
        assert_eq!(placement.node(0), "partition 0", "no cluster: each its own");
    }
}
