//! The sale's event stream against a real server: one entry per change, a consumer group,
//! hundreds of clients, blocked readers woken, MAXLEN alike on master, replica and AOF, the
//! stream's slot in cluster mode, and an AOF of module 0.3 replayed once.

use redis::Value;
use seckill_harness::invariants::assert_sale_invariants;
use seckill_harness::{
    Server, StreamsReply, dump, durable_master_and_replica, error, field, int, ok, parse_entries,
    server_now_ms, stream, wait_replicas, wait_until,
};
use std::sync::{Arc, Barrier};
use std::time::Duration;

#[test]
fn the_stream_has_one_entry_per_change_and_feeds_a_consumer_group() {
    let server = Server::start();
    let mut con = server.con();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "{sale}",
            "10",
            "LIMIT",
            "2",
            "HOLD",
            "60000",
            "EVENTS",
            "{sale}:events",
        ],
    );
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("{sale}:events")
        .arg("orders")
        .arg("$")
        .arg("MKSTREAM")
        .query(&mut con)
        .unwrap();
    let changes: [(&[&str], i64); 9] = [
        (&["SECKILL.TRY", "{sale}", "alice"], 9),
        (&["SECKILL.TRY", "{sale}", "bob", "2"], 7),
        (&["SECKILL.TRY", "{sale}", "bob"], -2), // no change, no entry
        (&["SECKILL.CONFIRM", "{sale}", "alice"], 1),
        (&["SECKILL.CONFIRM", "{sale}", "alice"], 0), // no change, no entry
        (&["SECKILL.CANCEL", "{sale}", "bob", "1"], 1),
        (&["SECKILL.CANCEL", "{sale}", "carol"], 0), // no change, no entry
        (&["SECKILL.RESTOCK", "{sale}", "5"], 13),
        (&["SECKILL.CANCEL", "{sale}", "alice"], 1),
    ];
    for (args, reply) in changes {
        assert_eq!(int(&mut con, args), reply, "{args:?}");
    }
    // The consumer sees exactly the changes, in order, with the remaining after each.
    let read: StreamsReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("orders")
        .arg("worker-1")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg("{sale}:events")
        .arg(">")
        .query(&mut con)
        .unwrap();
    let events = parse_entries(read.into_iter().next().unwrap().1);
    let summary: Vec<(&str, &str, &str, &str)> = events
        .iter()
        .map(|e| {
            (
                e.get("event"),
                e.get("user"),
                e.get("qty"),
                e.get("remaining"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("purchase", "alice", "1", "9"),
            ("purchase", "bob", "2", "7"),
            ("confirm", "alice", "1", "7"),
            ("cancel", "bob", "1", "8"),
            ("restock", "", "5", "13"),
            ("cancel", "alice", "1", "14"),
        ]
    );
    let order = |i: usize| events[i].get("order");
    assert_eq!(order(0), order(2), "one order UUID across its events");
    assert_eq!(order(0), order(5));
    assert_eq!(order(1), order(3));
    assert_ne!(order(0), order(1));
    assert_eq!(order(0).len(), 36);
    assert_eq!(order(4), "", "a restock belongs to no order");
    let acked: i64 = redis::cmd("XACK")
        .arg("{sale}:events")
        .arg("orders")
        .arg(events.iter().map(|e| e.id.clone()).collect::<Vec<_>>())
        .query(&mut con)
        .unwrap();
    assert_eq!(acked, 6);
    assert_sale_invariants(&mut con, "{sale}");
}

#[test]
fn hundreds_of_clients_keep_the_invariant_and_one_entry_per_change() {
    const CLIENTS: usize = 200;
    const ROUNDS: usize = 40;
    let server = Arc::new(Server::start());
    let mut con = server.con();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "{s}",
            "50",
            "LIMIT",
            "3",
            "HOLD",
            "30",
            "EVENTS",
            "{s}:ev",
        ],
    );
    let barrier = Arc::new(Barrier::new(CLIENTS + 1));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (server, barrier) = (Arc::clone(&server), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let mut con = server.con();
                let user = format!("user{}", i % 120);
                let mut changes = 0;
                barrier.wait();
                for round in 0..ROUNDS {
                    let step = (i + round) % 6;
                    let (args, changed): (Vec<String>, fn(i64) -> bool) = match step {
                        0 | 1 => (
                            vec!["SECKILL.TRY".into(), "{s}".into(), user.clone()],
                            |r| r >= 0,
                        ),
                        2 => (
                            vec!["SECKILL.CONFIRM".into(), "{s}".into(), user.clone()],
                            |r| r == 1,
                        ),
                        3 => (
                            vec![
                                "SECKILL.CANCEL".into(),
                                "{s}".into(),
                                user.clone(),
                                "1".into(),
                            ],
                            |r| r > 0,
                        ),
                        4 => (
                            vec!["SECKILL.TRY".into(), "{s}".into(), user.clone(), "2".into()],
                            |r| r >= 0,
                        ),
                        _ => (
                            vec!["SECKILL.RESTOCK".into(), "{s}".into(), "1".into()],
                            |_| true,
                        ),
                    };
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    if changed(int(&mut con, &args)) {
                        changes += 1;
                    }
                }
                changes
            })
        })
        .collect();
    barrier.wait();
    // Check the identity while the clients run, not only at the end.
    for _ in 0..20 {
        assert_sale_invariants(&mut con, "{s}");
    }
    let client_changes: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_sale_invariants(&mut con, "{s}");
    let events = stream(&mut con, "{s}:ev");
    let expiries = events.iter().filter(|e| e.get("event") == "expire").count();
    assert_eq!(
        events.len(),
        client_changes + expiries,
        "one entry per change: every acknowledged change plus every expiry"
    );
    // Once every hold is gone (the timer writes their expiries), the stream is a complete
    // ledger: replaying its changes from the initial stock gives the sale's remaining units.
    wait_until(Duration::from_secs(10), "every hold settled", || {
        let events = stream(&mut con, "{s}:ev");
        let remaining = field(&mut con, &["SECKILL.INFO", "{s}"], "remaining");
        field(&mut con, &["SECKILL.INFO", "{s}"], "held") == 0
            && events.last().unwrap().get("remaining") == remaining.to_string()
    });
    let mut replayed = 50i64;
    for event in stream(&mut con, "{s}:ev") {
        let qty: i64 = event.get("qty").parse().unwrap();
        replayed += match event.get("event") {
            "purchase" => -qty,
            "confirm" => 0,
            "cancel" | "expire" | "restock" => qty,
            other => panic!("unknown event {other}"),
        };
        assert_eq!(event.get("remaining"), replayed.to_string());
    }
    assert_eq!(
        replayed,
        field(&mut con, &["SECKILL.INFO", "{s}"], "remaining")
    );
    assert_sale_invariants(&mut con, "{s}");
}

#[test]
fn cluster_mode_requires_the_stream_in_the_sale_slot() {
    let server = Server::start_with(&["--cluster-enabled", "yes"]);
    let mut con = server.con();
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut con)
        .unwrap();
    wait_until(Duration::from_secs(20), "cluster_state:ok", || {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
        info.contains("cluster_state:ok")
    });
    // The stream is a declared key of INIT (its key spec): a server that checks slots by key
    // specs refuses it as CROSSSLOT, and the module itself refuses it on any server.
    let refused = error(
        &mut con,
        &["SECKILL.INIT", "sale:1", "5", "EVENTS", "sale:1:events"],
    );
    assert!(
        refused.starts_with("CROSSSLOT")
            || refused
                == "ERR the EVENTS stream must hash to the sale's slot: give both keys the same hash tag, e.g. {sale:1} and {sale:1}:events",
        "{refused}"
    );
    ok(
        &mut con,
        &["SECKILL.INIT", "{sale:1}", "5", "EVENTS", "{sale:1}:events"],
    );
    assert_eq!(int(&mut con, &["SECKILL.TRY", "{sale:1}", "alice"]), 4);
    assert_eq!(stream(&mut con, "{sale:1}:events").len(), 1);
}

/// Entries are written through the module stream API: readers blocked on the stream wake up,
/// and the `xadd` keyspace notification fires as for XADD.
#[test]
fn stream_entries_wake_blocked_readers_and_notify() {
    let server = Server::start_with(&["--notify-keyspace-events", "KEA"]);
    let mut con = server.con();
    ok(
        &mut con,
        &["SECKILL.INIT", "{w}", "5", "EVENTS", "{w}:events"],
    );
    let mut reader = server.con();
    let blocked = std::thread::spawn(move || {
        let reply: Value = redis::cmd("XREAD")
            .arg("BLOCK")
            .arg(20_000)
            .arg("STREAMS")
            .arg("{w}:events")
            .arg("$")
            .query(&mut reader)
            .unwrap();
        reply
    });
    seckill_harness::wait_until(Duration::from_secs(10), "the reader blocks", || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut con).unwrap();
        info.contains("blocked_clients:1")
    });
    let mut subscriber = server.con();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__keyevent@*__:xadd").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(int(&mut con, &["SECKILL.TRY", "{w}", "alice"]), 4);
    let woke = blocked.join().unwrap();
    assert!(format!("{woke:?}").contains("alice"), "{woke:?}");
    let message = pubsub.get_message().unwrap();
    assert_eq!(message.get_channel_name(), "__keyevent@0__:xadd");
    assert_eq!(message.get_payload::<String>().unwrap(), "{w}:events");
}

/// `EVENTS stream MAXLEN n` keeps the stream near n entries (whole nodes trimmed, as
/// `XADD MAXLEN ~`), and the replica and the AOF trim to exactly the length the master left.
#[test]
fn maxlen_trims_the_stream_alike_on_master_replica_and_aof() {
    let (mut master, replica) = durable_master_and_replica();
    let mut con = master.con();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "{m}",
            "10000",
            "HOLD",
            "60000",
            "EVENTS",
            "{m}:ev",
            "MAXLEN",
            "50",
        ],
    );
    assert_eq!(field(&mut con, &["SECKILL.INFO", "{m}"], "maxlen"), 50);
    let mut pipe = redis::pipe();
    for user in 0..1_000 {
        pipe.cmd("SECKILL.TRY").arg("{m}").arg(format!("u{user}"));
    }
    let _: Vec<i64> = pipe.query(&mut con).unwrap();
    let length = int(&mut con, &["XLEN", "{m}:ev"]);
    // At least MAXLEN, and less than one node (stream-node-max-entries, 100) above it.
    assert!((50..150).contains(&length), "XLEN {length}");
    let last = stream(&mut con, "{m}:ev").pop().unwrap();
    assert_eq!(last.get("user"), "u999", "the newest entries are kept");
    wait_replicas(&mut con, 1);
    let mut on_replica = replica.con();
    assert_eq!(
        int(&mut on_replica, &["SECKILL.BOUGHT", "{m}", "u999"]),
        1,
        "{}",
        replica.log()
    );
    assert_eq!(
        stream(&mut on_replica, "{m}:ev"),
        stream(&mut con, "{m}:ev"),
        "{}",
        replica.log()
    );
    assert_eq!(dump(&mut on_replica, "{m}:ev"), dump(&mut con, "{m}:ev"));
    let events = stream(&mut con, "{m}:ev");
    master.kill_and_restart();
    let mut con = master.con();
    assert_eq!(stream(&mut con, "{m}:ev"), events, "AOF replay");
    assert_eq!(field(&mut con, &["SECKILL.INFO", "{m}"], "maxlen"), 50);
    assert!(
        seckill_harness::error(&mut con, &["SECKILL.INIT", "x", "1", "MAXLEN", "5"])
            .contains("EVENTS")
    );
    // seckill.events-maxlen: the MAXLEN of a stream INIT names none for.
    ok(&mut con, &["CONFIG", "SET", "seckill.events-maxlen", "7"]);
    ok(&mut con, &["SECKILL.INIT", "{d}", "1", "EVENTS", "{d}:ev"]);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "{d}"], "maxlen"), 7);
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "{d}",
            "1",
            "EVENTS",
            "{d}:ev",
            "MAXLEN",
            "3",
            "REPLACE",
        ],
    );
    assert_eq!(field(&mut con, &["SECKILL.INFO", "{d}"], "maxlen"), 3);
    ok(&mut con, &["SECKILL.INIT", "{e}", "1"]);
    assert_eq!(
        field(&mut con, &["SECKILL.INFO", "{e}"], "maxlen"),
        0,
        "no stream"
    );
    assert!(
        seckill_harness::error(&mut con, &["CONFIG", "SET", "seckill.events-maxlen", "-1"])
            .starts_with("ERR")
    );
}

/// Module 0.3 replicated a change as `_REPLAY` followed by its own XADD with the ID: such an
/// AOF still loads to one entry per change, not two.
#[test]
fn an_aof_of_module_0_3_replays_its_stream_entries_once() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.con();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "{o}",
            "5",
            "HOLD",
            "60000",
            "EVENTS",
            "{o}:ev",
        ],
    );
    let now = server_now_ms(&mut con).to_string();
    let id = format!("{now}-0");
    let order = "30313233-3435-8637-8839-616263646566";
    let old_form: Vec<Vec<Vec<u8>>> = [
        vec!["SECKILL._REPLAY", "{o}", &now, "TRY", "alice"],
        vec![
            "XADD",
            "{o}:ev",
            &id,
            "event",
            "purchase",
            "user",
            "alice",
            "qty",
            "1",
            "order",
            order,
            "remaining",
            "4",
        ],
    ]
    .iter()
    .map(|argv| argv.iter().map(|a| a.as_bytes().to_vec()).collect())
    .collect();
    server.crash_and_append_to_aof(&old_form);
    let mut con = server.con();
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "{o}", "alice"]), 1);
    let events = stream(&mut con, "{o}:ev");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].id.as_str(), events[0].get("user")),
        (id.as_str(), "alice")
    );
}
