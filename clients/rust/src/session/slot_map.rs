//! Which master serves each hash slot, as the async cluster session knows it: read whole from
//! `CLUSTER SLOTS`, and one slot at a time from the MOVED replies met between two readings.
//! Pure: no connection, no clock.

use crate::routing::slot_ranges;
use redis::Value;
use std::sync::Arc;

pub(crate) const SLOTS: usize = 16_384;

#[derive(Clone)]
pub(crate) struct SlotMap {
    /// Each slot's master, `host:port` (`None`: no master known for it).
    masters: Vec<Option<Arc<str>>>,
    /// Each slot's first replica, as the last `CLUSTER SLOTS` listed it (`None`: none, or the
    /// slot moved since).
    replicas: Vec<Option<Arc<str>>>,
}

impl SlotMap {
    /// Every slot served by `node`: a server that is no cluster.
    pub fn single(node: &str) -> SlotMap {
        SlotMap {
            masters: vec![Some(Arc::from(node)); SLOTS],
            replicas: vec![None; SLOTS],
        }
    }

    /// The map a `CLUSTER SLOTS` reply gives, or `None` when it gives none (no range parses).
    pub fn from_cluster_slots(reply: &Value) -> Option<SlotMap> {
        let ranges = slot_ranges(reply);
        if ranges.is_empty() {
            return None;
        }
        let mut masters = vec![None; SLOTS];
        let mut replicas = vec![None; SLOTS];
        for range in ranges {
            let node: Arc<str> = Arc::from(range.master);
            let replica: Option<Arc<str>> = range.replicas.into_iter().next().map(Arc::from);
            let (first, last) = (usize::from(range.first), usize::from(range.last));
            for slot in first..=last.min(SLOTS - 1) {
                masters[slot] = Some(node.clone());
                replicas[slot] = replica.clone();
            }
        }
        Some(SlotMap { masters, replicas })
    }

    pub fn master(&self, slot: u16) -> Option<Arc<str>> {
        self.masters.get(usize::from(slot)).cloned().flatten()
    }

    /// A replica of `slot`'s master, if the map lists one.
    pub fn replica(&self, slot: u16) -> Option<Arc<str>> {
        self.replicas.get(usize::from(slot)).cloned().flatten()
    }

    /// A MOVED named `node` for `slot` (whose replicas are not known until the next reading).
    pub fn moved(&mut self, slot: u16, node: &str) {
        if let Some(entry) = self.masters.get_mut(usize::from(slot)) {
            *entry = Some(Arc::from(node));
            self.replicas[usize::from(slot)] = None;
        }
    }

    /// The masters, each once, in slot order.
    pub fn masters(&self) -> Vec<Arc<str>> {
        let mut seen: Vec<Arc<str>> = Vec::new();
        for node in self.masters.iter().flatten() {
            if !seen.contains(node) {
                seen.push(node.clone());
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    fn range(first: i64, last: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![Value::Int(first), Value::Int(last), node(host, port)])
    }

    #[test]
    fn each_slot_knows_its_first_replica_until_it_moves() {
        let with_replicas = |first, last, port| {
            let Value::Array(mut items) = range(first, last, "10.0.0.1", port) else {
                unreachable!()
            };
            items.push(node("10.0.0.2", port + 100));
            items.push(node("10.0.0.3", port + 200));
            Value::Array(items)
        };
        let reply = Value::Array(vec![
            with_replicas(0, 99, 7000),
            range(100, 16383, "10.0.0.1", 7001),
        ]);
        let mut map = SlotMap::from_cluster_slots(&reply).expect("a map");
        assert_eq!(map.replica(0).as_deref(), Some("10.0.0.2:7100"));
        assert_eq!(map.replica(99).as_deref(), Some("10.0.0.2:7100"));
        assert_eq!(map.replica(100), None, "a range without replicas");
        assert_eq!(map.replica(20_000), None);
        map.moved(5, "10.0.0.9:7000");
        assert_eq!(
            map.replica(5),
            None,
            "a moved slot's replicas are not known"
        );
        assert_eq!(map.replica(6).as_deref(), Some("10.0.0.2:7100"));
        assert_eq!(SlotMap::single("127.0.0.1:6379").replica(0), None);
    }

    #[test]
    fn slots_are_mapped_from_cluster_slots_and_moved_one_by_one() {
        let reply = Value::Array(vec![
            range(0, 5460, "10.0.0.1", 7000),
            range(5461, 10922, "10.0.0.2", 7001),
            range(10923, 16383, "10.0.0.3", 7002),
        ]);
        let mut map = SlotMap::from_cluster_slots(&reply).expect("a map");
        assert_eq!(map.master(0).as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(map.master(5460).as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(map.master(5461).as_deref(), Some("10.0.0.2:7001"));
        assert_eq!(map.master(16383).as_deref(), Some("10.0.0.3:7002"));
        assert_eq!(map.master(16384), None, "no such slot");
        assert_eq!(map.masters().len(), 3);
        map.moved(5460, "10.0.0.2:7001");
        assert_eq!(map.master(5460).as_deref(), Some("10.0.0.2:7001"));
        assert_eq!(map.master(5459).as_deref(), Some("10.0.0.1:7000"));
        map.moved(20_000, "10.0.0.9:1");
        assert_eq!(
            map.masters().len(),
            3,
            "a slot past the last changes nothing"
        );

        let gap = Value::Array(vec![range(0, 99, "10.0.0.1", 7000)]);
        let partial = SlotMap::from_cluster_slots(&gap).expect("a map");
        assert_eq!(partial.master(100), None, "an unserved slot has no master");
        assert!(SlotMap::from_cluster_slots(&Value::Nil).is_none());
        assert!(SlotMap::from_cluster_slots(&Value::Array(vec![])).is_none());
        let single = SlotMap::single("127.0.0.1:6379");
        assert_eq!(single.master(9999).as_deref(), Some("127.0.0.1:6379"));
        assert_eq!(single.masters().len(), 1);
    }
}
