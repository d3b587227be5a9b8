//! The metric families of one scrape, built from what it read (pure: unit-tested on readings).
//! Names follow Prometheus's conventions: a `seckill_` prefix, `_total` on counters, base units.

use std::collections::HashSet;

use crate::exposition::{Family, Kind, label_text};
use crate::reading::{NodeReading, SaleReading};

/// `INFO seckill` counters exported as Prometheus counters: (INFO field, family, help).
const COUNTERS: &[(&str, &str, &str)] = &[
    ("seckill_tries", "seckill_tries", "SECKILL.TRY calls."),
    (
        "seckill_purchases",
        "seckill_purchases",
        "Purchases made (holds included).",
    ),
    (
        "seckill_holds",
        "seckill_holds",
        "Purchases made as holds (sales with HOLD).",
    ),
    ("seckill_confirms", "seckill_confirms", "Holds confirmed."),
    (
        "seckill_expiries",
        "seckill_hold_expiries",
        "Holds that expired and went back to stock.",
    ),
    ("seckill_cancels", "seckill_cancels", "Purchases cancelled."),
    (
        "seckill_restocks",
        "seckill_restocks",
        "SECKILL.RESTOCK calls that added units.",
    ),
    (
        "seckill_lends",
        "seckill_lends",
        "Units lent by a partition to another.",
    ),
    (
        "seckill_absorbs",
        "seckill_absorbs",
        "Units absorbed by a partition from another.",
    ),
    (
        "seckill_seals",
        "seckill_seals",
        "Partitions sealed after finding no stock anywhere.",
    ),
    (
        "seckill_admissions",
        "seckill_admissions",
        "Users admitted from waiting rooms.",
    ),
    (
        "seckill_room_draws",
        "seckill_room_draws",
        "Waiting rooms' cohorts drawn at START.",
    ),
    (
        "seckill_room_lapses",
        "seckill_room_lapses",
        "Admitted users whose window closed.",
    ),
    (
        "seckill_room_leaves",
        "seckill_room_leaves",
        "Users who left a waiting room.",
    ),
    (
        "seckill_room_drops",
        "seckill_room_drops",
        "Absent users dropped in their turn.",
    ),
    (
        "seckill_events_failed",
        "seckill_events_failed",
        "Event stream entries that could not be written.",
    ),
    (
        "seckill_lock_acquired",
        "seckill_lock_grants",
        "Locks granted.",
    ),
    (
        "seckill_lock_contended",
        "seckill_lock_contentions",
        "Acquires that found the lock held.",
    ),
    (
        "seckill_lock_waited",
        "seckill_lock_waits",
        "Acquires that waited in the server.",
    ),
    (
        "seckill_lock_timed_out",
        "seckill_lock_timeouts",
        "Waits that ended without the lock.",
    ),
    (
        "seckill_lock_expired",
        "seckill_lock_expiries",
        "Locks that expired while held.",
    ),
];

/// Refusals by reason: (INFO field, `reason` label).
const REJECTIONS: &[(&str, &str)] = &[
    ("seckill_sold_out_rejections", "sold_out"),
    ("seckill_limit_rejections", "over_limit"),
    ("seckill_window_rejections", "window"),
    ("seckill_queue_rejections", "not_admitted"),
    ("seckill_drained_rejections", "drained"),
];

/// `INFO seckill` values exported as gauges: (INFO field, family, help).
const GAUGES: &[(&str, &str, &str)] = &[
    ("seckill_sales", "seckill_sales", "Sale keys on the node."),
    ("seckill_locks", "seckill_locks", "Lock keys on the node."),
    (
        "seckill_lock_waiting_clients",
        "seckill_lock_waiting_clients",
        "Clients waiting in the server for a lock.",
    ),
];

/// Per sale key: (family, help, value).
type SaleGauge = (&'static str, &'static str, fn(&SaleReading) -> Option<i64>);
const SALE_GAUGES: &[SaleGauge] = &[
    (
        "seckill_sale_stock",
        "Units the sale was made with (restocks included).",
        |s| Some(s.stock),
    ),
    ("seckill_sale_remaining", "Units left to sell.", |s| {
        Some(s.remaining)
    }),
    ("seckill_sale_sold", "Units sold and final.", |s| {
        Some(s.sold)
    }),
    (
        "seckill_sale_held",
        "Units held, waiting for a confirm.",
        |s| Some(s.held),
    ),
    ("seckill_sale_buyers", "Users owning units.", |s| {
        Some(s.buyers)
    }),
    (
        "seckill_sale_sold_out",
        "1 once the sale is sold out.",
        |s| Some(i64::from(s.sold_out)),
    ),
    ("seckill_sale_waiting", "Users in the waiting room.", |s| {
        s.room.map(|r| r.waiting)
    }),
    (
        "seckill_sale_admitted",
        "Admitted users who have not bought, their window open.",
        |s| s.room.map(|r| r.admitted),
    ),
];

/// A sale key's `sale` and `partition` labels: a partition is named by its sale (the
/// manifest), so `sum by (sale)` adds the partitions up.
pub fn sale_labels(sale: &SaleReading) -> (String, String) {
    match &sale.partition {
        Some((name, index)) => (label_text(name), index.to_string()),
        None => (label_text(&sale.key), String::new()),
    }
}

/// Every family of one scrape that took `seconds`.
pub fn families(nodes: &[NodeReading], seconds: f64) -> Vec<Family> {
    let mut out = Vec::new();
    let mut up = Family::new(
        "seckill_up",
        Kind::Gauge,
        "1 when the node was read, 0 when not.",
    );
    for node in nodes {
        up.sample(
            vec![("instance", node.instance.clone())],
            if node.failure.is_none() { 1.0 } else { 0.0 },
        );
    }
    out.push(up);
    let read: Vec<&NodeReading> = nodes.iter().filter(|n| n.failure.is_none()).collect();
    let mut build = Family::new(
        "seckill_module_version",
        Kind::Gauge,
        "The module's version number (1200 is 0.12.0).",
    );
    for node in &read {
        if let Some(version) = node.counters.get("seckill_version") {
            build.sample(vec![("instance", node.instance.clone())], *version as f64);
        }
    }
    out.push(build);
    for (field, name, help) in COUNTERS {
        out.push(node_family(&read, name, Kind::Counter, help, field));
    }
    let mut rejections = Family::new(
        "seckill_rejections",
        Kind::Counter,
        "Purchases refused, by reason.",
    );
    for node in &read {
        for (field, reason) in REJECTIONS {
            if let Some(value) = node.counters.get(*field) {
                rejections.sample(
                    vec![
                        ("instance", node.instance.clone()),
                        ("reason", reason.to_string()),
                    ],
                    *value as f64,
                );
            }
        }
    }
    out.push(rejections);
    for (field, name, help) in GAUGES {
        out.push(node_family(&read, name, Kind::Gauge, help, field));
    }
    // Each sale's label text made once, not once per family; a key
    // seen on two nodes (a slot moving while the scrape ran) is exported once.
    let mut seen = HashSet::new();
    let sales: Vec<(&SaleReading, (String, String))> = read
        .iter()
        .flat_map(|n| &n.sales)
        .map(|s| (s, sale_labels(s)))
        .filter(|(_, labels)| seen.insert(labels.clone()))
        .collect();
    for (name, help, value) in SALE_GAUGES {
        let mut family = Family::new(name, Kind::Gauge, help);
        for (sale, (sale_label, partition)) in &sales {
            if let Some(v) = value(sale) {
                family.sample(
                    vec![
                        ("sale", sale_label.clone()),
                        ("partition", partition.clone()),
                    ],
                    v as f64,
                );
            }
        }
        out.push(family);
    }
    let mut took = Family::new(
        "seckill_scrape_duration_seconds",
        Kind::Gauge,
        "How long the exporter took to read every node.",
    )
    .unit("seconds");
    took.sample(vec![], seconds);
    out.push(took);
    out
}

fn node_family(
    nodes: &[&NodeReading],
    name: &'static str,
    kind: Kind,
    help: &'static str,
    field: &str,
) -> Family {
    let mut family = Family::new(name, kind, help);
    for node in nodes {
        if let Some(value) = node.counters.get(field) {
            family.sample(vec![("instance", node.instance.clone())], *value as f64);
        }
    }
    family
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::Sample;
    use crate::reading::RoomReading;
    use std::collections::HashMap;

    fn sale(key: &str, partition: Option<(&str, i64)>, remaining: i64) -> SaleReading {
        SaleReading {
            key: key.as_bytes().to_vec(),
            stock: 10,
            remaining,
            sold: 10 - remaining,
            held: 0,
            buyers: 10 - remaining,
            sold_out: remaining == 0,
            partition: partition.map(|(n, i)| (n.as_bytes().to_vec(), i)),
            room: None,
        }
    }

    fn node(instance: &str, counters: &[(&str, i64)], sales: Vec<SaleReading>) -> NodeReading {
        NodeReading {
            instance: instance.into(),
            failure: None,
            counters: counters
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<HashMap<_, _>>(),
            sales,
            locks: Vec::new(),
        }
    }

    fn family<'a>(families: &'a [Family], name: &str) -> &'a Family {
        families.iter().find(|f| f.name == name).unwrap()
    }

    fn labels(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn a_dead_node_is_up_0_and_exports_nothing_else() {
        let nodes = vec![
            node("a:1", &[("seckill_tries", 5)], vec![sale("s", None, 3)]),
            NodeReading::failed("b:2", "refused".into()),
        ];
        let fams = families(&nodes, 0.01);
        assert_eq!(
            family(&fams, "seckill_up").samples,
            vec![
                Sample {
                    labels: labels(&[("instance", "a:1")]),
                    value: 1.0
                },
                Sample {
                    labels: labels(&[("instance", "b:2")]),
                    value: 0.0
                },
            ]
        );
        assert_eq!(family(&fams, "seckill_tries").samples.len(), 1);
    }

    #[test]
    fn partitions_are_labelled_by_their_sale_and_index_and_plain_sales_by_key() {
        let nodes = vec![
            node(
                "a:1",
                &[],
                vec![sale("{s}:p0", Some(("shoes", 0)), 2), sale("hats", None, 4)],
            ),
            node("b:2", &[], vec![sale("{s}:p1", Some(("shoes", 1)), 3)]),
        ];
        let fams = families(&nodes, 0.0);
        assert_eq!(
            family(&fams, "seckill_sale_remaining").samples,
            vec![
                Sample {
                    labels: labels(&[("sale", "shoes"), ("partition", "0")]),
                    value: 2.0
                },
                Sample {
                    labels: labels(&[("sale", "hats"), ("partition", "")]),
                    value: 4.0
                },
                Sample {
                    labels: labels(&[("sale", "shoes"), ("partition", "1")]),
                    value: 3.0
                },
            ]
        );
    }

    #[test]
    fn a_key_seen_on_two_nodes_is_exported_once() {
        let nodes = vec![
            node("a:1", &[], vec![sale("s", None, 3)]),
            node("b:2", &[], vec![sale("s", None, 3)]),
        ];
        assert_eq!(
            family(&families(&nodes, 0.0), "seckill_sale_sold")
                .samples
                .len(),
            1
        );
    }

    #[test]
    fn rejections_carry_their_reason_and_room_gauges_only_rooms() {
        let mut roomy = sale("r", None, 5);
        roomy.room = Some(RoomReading {
            waiting: 7,
            admitted: 2,
        });
        let nodes = vec![node(
            "a:1",
            &[
                ("seckill_sold_out_rejections", 4),
                ("seckill_queue_rejections", 1),
            ],
            vec![roomy, sale("plain", None, 1)],
        )];
        let fams = families(&nodes, 0.0);
        let rejections = &family(&fams, "seckill_rejections").samples;
        assert_eq!(rejections.len(), 2);
        assert!(rejections.contains(&Sample {
            labels: labels(&[("instance", "a:1"), ("reason", "not_admitted")]),
            value: 1.0
        }));
        assert_eq!(family(&fams, "seckill_sale_waiting").samples.len(), 1);
        assert_eq!(family(&fams, "seckill_sale_admitted").samples[0].value, 2.0);
        assert_eq!(family(&fams, "seckill_sale_buyers").samples.len(), 2);
    }

    #[test]
    fn every_info_counter_maps_to_one_family() {
        let names: HashSet<&str> = COUNTERS.iter().map(|(_, n, _)| *n).collect();
        assert_eq!(names.len(), COUNTERS.len());
        for (field, _, _) in COUNTERS.iter().chain(GAUGES) {
            assert!(field.starts_with("seckill_"));
        }
    }
}
