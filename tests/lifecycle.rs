//! The order lifecycle against a real server: holds that expire, confirm, cancel/refund,
//! restock, the sale window, the event stream, the buyer scan, and their replication.

use redis::Value;
use seckill_harness::{
    Server, StreamsReply, command_calls, dump, durable_master_and_replica, error, field, fields,
    info_counter, int, next_event, ok, parse_entries, replicate, rewrite_aof, server_now_ms,
    stream, wait_replicas, wait_until,
};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Every buyer through the cursor, as (user, qty, state).
fn all_buyers(con: &mut redis::Connection, key: &str, count: u64) -> Vec<(String, i64, String)> {
    let mut out = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, page): (String, Vec<Value>) = redis::cmd("SECKILL.BUYERS")
            .arg(key)
            .arg(&cursor)
            .arg("COUNT")
            .arg(count)
            .query(con)
            .unwrap();
        for triple in page.chunks(3) {
            out.push((
                redis::from_redis_value(triple[0].clone()).unwrap(),
                redis::from_redis_value(triple[1].clone()).unwrap(),
                redis::from_redis_value(triple[2].clone()).unwrap(),
            ));
        }
        if next == "0" {
            return out;
        }
        cursor = next;
    }
}

/// The documented identity, the limit, and the buyer scan agreeing with INFO, read in one
/// MULTI so that concurrent clients cannot change the sale between the reads. The clock still
/// runs inside a MULTI: a hold that comes due between INFO and BUYERS makes them disagree, so
/// INFO is read on both sides and the reads are taken again until the two INFOs agree.
fn assert_invariants(con: &mut redis::Connection, key: &str) {
    let mut attempts = 0;
    let (info, (next, page)) = loop {
        let (before, scan, after): (Vec<Value>, (String, Vec<Value>), Vec<Value>) = redis::pipe()
            .atomic()
            .cmd("SECKILL.INFO")
            .arg(key)
            .cmd("SECKILL.BUYERS")
            .arg(key)
            .arg(0)
            .arg("COUNT")
            .arg(1_000_000)
            .cmd("SECKILL.INFO")
            .arg(key)
            .query(con)
            .unwrap();
        attempts += 1;
        if before == after {
            break (before, scan);
        }
        assert!(attempts < 20, "INFO never stood still across one MULTI");
    };
    assert_eq!(next, "0", "one page holds every buyer here");
    let info: HashMap<String, i64> = info
        .chunks(2)
        .filter_map(|pair| {
            let name: String = redis::from_redis_value(pair[0].clone()).ok()?;
            Some((name, redis::from_redis_value(pair[1].clone()).ok()?))
        })
        .collect();
    let n = |name: &str| info[name];
    assert!(n("remaining") >= 0 && n("held") >= 0 && n("sold") >= 0);
    assert_eq!(
        n("remaining") + n("held") + n("sold"),
        n("stock") + n("restocked"),
        "remaining + held + sold == stock + restocked: {info:?}"
    );
    let buyers: Vec<(String, i64)> = page
        .chunks(3)
        .map(|t| {
            (
                redis::from_redis_value(t[0].clone()).unwrap(),
                redis::from_redis_value(t[1].clone()).unwrap(),
            )
        })
        .collect();
    assert!(
        buyers
            .iter()
            .all(|(_, qty)| *qty >= 1 && *qty <= n("limit"))
    );
    assert_eq!(buyers.len() as i64, n("buyers"));
    let owned: i64 = buyers.iter().map(|(_, qty)| qty).sum();
    assert_eq!(owned, n("held") + n("sold"));
    let unique: HashSet<&String> = buyers.iter().map(|(u, _)| u).collect();
    assert_eq!(unique.len(), buyers.len(), "every buyer once");
}

#[test]
fn a_hold_expires_by_timer_and_its_units_go_to_someone_else() {
    let server = Server::start();
    let mut con = server.con();
    let mut watcher = server.con();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "s",
            "1",
            "HOLD",
            "200",
            "EVENTS",
            "s:events",
        ],
    );
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "alice"]), 0);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "bob"]), -1);
    let bought = next_event(&mut watcher, "s:events", "0");
    assert_eq!(bought.get("event"), "purchase");
    // Nobody touches the sale: only the timer can write this entry.
    let expired = next_event(&mut watcher, "s:events", &bought.id);
    assert_eq!(expired.get("event"), "expire");
    assert_eq!(expired.get("user"), "alice");
    assert_eq!(expired.get("order"), bought.get("order"));
    assert_eq!(expired.get("remaining"), "1");
    assert_eq!(info_counter(&mut con, "expiries"), 1);

    assert_eq!(
        int(&mut con, &["SECKILL.CONFIRM", "s", "alice"]),
        0,
        "expired"
    );
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "bob"]), 0);
    assert_eq!(int(&mut con, &["SECKILL.CONFIRM", "s", "bob"]), 1);
    assert_eq!(
        int(&mut con, &["SECKILL.CONFIRM", "s", "bob"]),
        0,
        "already final"
    );
    assert_eq!(
        int(&mut con, &["SECKILL.CONFIRM", "s", "carol"]),
        0,
        "never held"
    );
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "s", "alice"]), 0);
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "s", "bob"]), 1);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "s"], "sold"), 1);
    assert_eq!(info_counter(&mut con, "holds"), 2);
    assert_eq!(info_counter(&mut con, "confirms"), 1);
    assert_invariants(&mut con, "s");
}

#[test]
fn holds_loaded_from_rdb_still_expire_by_timer() {
    let server = Server::start();
    let mut con = server.con();
    let mut watcher = server.con();
    ok(
        &mut con,
        &["SECKILL.INIT", "s", "5", "HOLD", "400", "EVENTS", "{s}:ev"],
    );
    int(&mut con, &["SECKILL.TRY", "s", "alice"]);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let bought = next_event(&mut watcher, "{s}:ev", "0");
    let expired = next_event(&mut watcher, "{s}:ev", &bought.id);
    assert_eq!(
        (expired.get("event"), expired.get("user")),
        ("expire", "alice")
    );
}

#[test]
fn renamed_moved_and_copied_sales_keep_expiring_holds_by_timer() {
    for (name, args) in [
        ("renamed", &["RENAME", "{s}", "{s}:renamed"][..]),
        ("moved", &["MOVE", "{s}", "1"]),
        ("copied", &["COPY", "{s}", "{s}:copy"]),
    ] {
        let server = Server::start();
        let mut con = server.con();
        let stream = format!("{{s}}:events-{name}");
        ok(
            &mut con,
            &["SECKILL.INIT", "{s}", "5", "HOLD", "300", "EVENTS", &stream],
        );
        int(&mut con, &["SECKILL.TRY", "{s}", "alice"]);
        if name == "copied" {
            // Only the copy's timer can expire the hold: drop the original.
            let _: () = redis::cmd("COPY")
                .arg("{s}")
                .arg("{s}:copy")
                .query(&mut con)
                .unwrap();
            let _: () = redis::cmd("DEL").arg("{s}").query(&mut con).unwrap();
        } else {
            let _: () = seckill_harness::command(args).query(&mut con).unwrap();
        }
        // Nobody writes to the sale again: only a timer armed for its new name (or db) can
        // write the expiry, to the stream of that name in the sale's db.
        let mut watcher = server.con();
        if name == "moved" {
            let _: () = redis::cmd("SELECT").arg(1).query(&mut watcher).unwrap();
        }
        let mut last = "0".to_string();
        let expired = loop {
            let event = next_event(&mut watcher, &stream, &last);
            if event.get("event") == "expire" {
                break event;
            }
            last = event.id;
        };
        assert_eq!(
            (expired.get("event"), expired.get("user")),
            ("expire", "alice"),
            "{name}"
        );
    }
}

#[test]
fn the_window_replies_before_start_and_after_end() {
    let server = Server::start();
    let mut con = server.con();
    let now = server_now_ms(&mut con);
    let later = (now + 3_600_000).to_string();
    let earlier = (now - 3_600_000).to_string();
    let long_ago = (now - 7_200_000).to_string();
    ok(&mut con, &["SECKILL.INIT", "soon", "5", "START", &later]);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "soon", "alice"]), -3);
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "over",
            "5",
            "START",
            &long_ago,
            "END",
            &earlier,
        ],
    );
    assert_eq!(int(&mut con, &["SECKILL.TRY", "over", "alice"]), -4);
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "open",
            "5",
            "START",
            &earlier,
            "END",
            &later,
        ],
    );
    assert_eq!(int(&mut con, &["SECKILL.TRY", "open", "alice"]), 4);
    let info: HashMap<String, i64> = fields(&mut con, &["SECKILL.INFO", "open"])
        .into_iter()
        .collect();
    assert_eq!(info["start"].to_string(), earlier);
    assert_eq!(info["end"].to_string(), later);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "soon"], "sold"), 0);
    assert_eq!(info_counter(&mut con, "window_rejections"), 2);
    // Confirm, cancel and restock are not bound to the window.
    assert_eq!(int(&mut con, &["SECKILL.RESTOCK", "over", "2"]), 7);
    assert_eq!(int(&mut con, &["SECKILL.CANCEL", "open", "alice"]), 1);
}

#[test]
fn cancel_refund_and_restock_replies() {
    let server = Server::start();
    let mut con = server.con();
    ok(
        &mut con,
        &["SECKILL.INIT", "s", "3", "LIMIT", "3", "HOLD", "60000"],
    );
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "alice", "2"]), 1);
    assert_eq!(int(&mut con, &["SECKILL.CONFIRM", "s", "alice"]), 1);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "alice", "1"]), 0);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "s"], "sold_out"), 1);
    assert_eq!(
        all_buyers(&mut con, "s", 10),
        vec![("alice".to_string(), 3, "held".to_string())]
    );
    // Held units go back first, then final ones are refunded.
    assert_eq!(int(&mut con, &["SECKILL.CANCEL", "s", "alice", "2"]), 2);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "s"], "sold_out"), 0);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "s"], "refunded"), 1);
    assert_eq!(
        all_buyers(&mut con, "s", 10),
        vec![("alice".to_string(), 1, "final".to_string())]
    );
    assert_eq!(int(&mut con, &["SECKILL.CANCEL", "s", "alice", "3"]), 1);
    assert_eq!(int(&mut con, &["SECKILL.CANCEL", "s", "alice"]), 0);
    assert_eq!(int(&mut con, &["SECKILL.CANCEL", "s", "nobody"]), 0);
    assert_eq!(int(&mut con, &["SECKILL.RESTOCK", "s", "4"]), 7);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "s"], "restocked"), 4);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "s"], "buyers"), 0);
    assert_eq!(info_counter(&mut con, "cancels"), 2);
    assert_eq!(info_counter(&mut con, "restocks"), 1);
    assert_invariants(&mut con, "s");
}

#[test]
fn lifecycle_errors_change_nothing() {
    let server = Server::start();
    let mut con = server.con();
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut con)
        .unwrap();
    for (args, expected) in [
        (
            &["SECKILL.CONFIRM", "none", "u"][..],
            "NOSALE no sale at this key",
        ),
        (
            &["SECKILL.CANCEL", "none", "u"],
            "NOSALE no sale at this key",
        ),
        (
            &["SECKILL.RESTOCK", "none", "1"],
            "NOSALE no sale at this key",
        ),
        (
            &["SECKILL.BUYERS", "none", "0"],
            "NOSALE no sale at this key",
        ),
        (
            &["SECKILL.CONFIRM", "str", "u"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["SECKILL.INIT", "s", "1", "EVENTS", "str"],
            "WRONGTYPE the sale's EVENTS key holds a value that is not a stream",
        ),
        (
            &["SECKILL.INIT", "s", "1", "EVENTS", "s"],
            "ERR the EVENTS stream must be another key than the sale",
        ),
    ] {
        assert_eq!(error(&mut con, args), expected, "{args:?}");
    }
    ok(&mut con, &["SECKILL.INIT", "s", "2", "EVENTS", "ev"]);
    let before = dump(&mut con, "s");
    // The stream key turned into something else: the purchase and its entry both fail.
    let _: () = redis::cmd("SET")
        .arg("ev")
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        error(&mut con, &["SECKILL.TRY", "s", "alice"]),
        "WRONGTYPE the sale's EVENTS key holds a value that is not a stream"
    );
    assert_eq!(
        error(&mut con, &["SECKILL.RESTOCK", "s", "9223372036854775806"]),
        "WRONGTYPE the sale's EVENTS key holds a value that is not a stream"
    );
    let _: () = redis::cmd("DEL").arg("ev").query(&mut con).unwrap();
    assert_eq!(
        error(&mut con, &["SECKILL.RESTOCK", "s", "9223372036854775806"]),
        "ERR units would take the sale past 9223372036854775807 units"
    );
    assert_eq!(dump(&mut con, "s"), before);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "alice"]), 1);
    // A refusal changes nothing and writes no entry, so it does not look at the stream.
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "bob"]), 0);
    let _: () = redis::cmd("SET")
        .arg("ev")
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "carol"]), -1);
    assert_eq!(
        error(&mut con, &["SECKILL.RESTOCK", "s", "1"]),
        "WRONGTYPE the sale's EVENTS key holds a value that is not a stream"
    );
}

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
    assert_invariants(&mut con, "{sale}");
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
        assert_invariants(&mut con, "{s}");
    }
    let client_changes: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_invariants(&mut con, "{s}");
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
    assert_invariants(&mut con, "{s}");
}

#[test]
fn a_replica_and_an_aof_replay_match_the_master_byte_for_byte() {
    let (mut master, replica) = durable_master_and_replica();
    let mut con = master.con();
    let mut watcher = master.con();
    let now = server_now_ms(&mut con);
    let end = (now + 3_600_000).to_string();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "{s}",
            "6",
            "LIMIT",
            "2",
            "HOLD",
            "150",
            "END",
            &end,
            "EVENTS",
            "{s}:ev",
        ],
    );
    for user in ["a", "b", "c", "d"] {
        int(&mut con, &["SECKILL.TRY", "{s}", user]);
    }
    int(&mut con, &["SECKILL.CONFIRM", "{s}", "a"]);
    int(&mut con, &["SECKILL.CONFIRM", "{s}", "b"]);
    int(&mut con, &["SECKILL.CANCEL", "{s}", "b"]);
    int(&mut con, &["SECKILL.RESTOCK", "{s}", "3"]);
    // c and d expire by the master's timer: wait for both entries.
    let mut last = "0".to_string();
    let mut expired = 0;
    while expired < 2 {
        let event = next_event(&mut watcher, "{s}:ev", &last);
        expired += usize::from(event.get("event") == "expire");
        last = event.id;
    }
    assert_eq!(int(&mut con, &["SECKILL.TRY", "{s}", "e", "2"]), 6);
    int(&mut con, &["SECKILL.CONFIRM", "{s}", "e"]);
    // A sale without HOLD, window or stream replicates its commands verbatim.
    ok(&mut con, &["SECKILL.INIT", "plain", "3", "LIMIT", "2"]);
    int(&mut con, &["SECKILL.TRY", "plain", "a", "2"]);
    int(&mut con, &["SECKILL.CANCEL", "plain", "a", "1"]);
    int(&mut con, &["SECKILL.RESTOCK", "plain", "4"]);
    int(&mut con, &["SECKILL.TRY", "plain", "b"]);
    let plain = dump(&mut con, "plain");
    wait_replicas(&mut con, 1);

    let mut on_replica = replica.con();
    let sale = dump(&mut con, "{s}");
    let events = stream(&mut con, "{s}:ev");
    assert_eq!(events.len(), 12);
    assert_eq!(dump(&mut on_replica, "{s}"), sale, "replica sale");
    assert_eq!(dump(&mut on_replica, "plain"), plain, "replica plain sale");
    assert_eq!(stream(&mut on_replica, "{s}:ev"), events, "replica stream");
    assert_eq!(
        dump(&mut on_replica, "{s}:ev"),
        dump(&mut con, "{s}:ev"),
        "replica stream bytes"
    );

    master.kill_and_restart();
    let mut con = master.con();
    assert_eq!(dump(&mut con, "{s}"), sale, "AOF replay sale");
    assert_eq!(dump(&mut con, "plain"), plain, "AOF replay plain sale");
    assert_eq!(stream(&mut con, "{s}:ev"), events, "AOF replay stream");

    // And after an AOF rewrite (the sale as one _RESTORE) and another restart.
    rewrite_aof(&mut con);
    master.kill_and_restart();
    let mut con = master.con();
    assert_eq!(dump(&mut con, "{s}"), sale, "rewritten AOF sale");
    assert_eq!(stream(&mut con, "{s}:ev"), events, "rewritten AOF stream");
}

/// Pipelined changes of every kind that depends on the clock on `key`, hundreds a ms; with
/// `foreign_stream`, other writers add entries to it meanwhile, one with an ID far ahead.
/// Returns how many changes it made.
fn clocked_changes(con: &mut redis::Connection, key: &str, foreign_stream: Option<&str>) -> i64 {
    let mut pipe = redis::pipe();
    let mut changes = 0;
    for i in 0..1000 {
        let user = format!("u{i}");
        pipe.cmd("SECKILL.TRY").arg(key).arg(&user).ignore();
        pipe.cmd("SECKILL.TRY").arg(key).arg(&user).ignore();
        changes += 2;
        if i % 2 == 0 {
            pipe.cmd("SECKILL.CONFIRM").arg(key).arg(&user).ignore();
            changes += 1;
        }
        if i % 3 == 0 {
            pipe.cmd("SECKILL.CANCEL")
                .arg(key)
                .arg(&user)
                .arg(1)
                .ignore();
            changes += 1;
        }
        if i % 100 == 0 {
            pipe.cmd("SECKILL.RESTOCK").arg(key).arg(1).ignore();
            changes += 1;
        }
        if let Some(stream) = foreign_stream {
            if i % 50 == 0 {
                pipe.cmd("XADD")
                    .arg(stream)
                    .arg("*")
                    .arg("foreign")
                    .arg(i)
                    .ignore();
            }
            if i == 500 {
                let ahead = format!("{}-0", server_now_ms(con) + 5_000);
                pipe.cmd("XADD")
                    .arg(stream)
                    .arg(ahead)
                    .arg("foreign")
                    .arg("ahead")
                    .ignore();
            }
        }
    }
    let () = pipe.query(con).unwrap();
    changes
}

/// (bare, with the clock): how many of a key's changes the replica ran as the client's own
/// command and how many as `SECKILL._REPLAY`, since its last call.
fn replayed_forms(con: &mut redis::Connection, before: &mut (i64, i64)) -> (i64, i64) {
    let bare = ["try", "confirm", "cancel", "restock"]
        .iter()
        .map(|c| command_calls(con, &format!("seckill.{c}")))
        .sum::<i64>();
    let with_clock = command_calls(con, "seckill._replay");
    let forms = (bare - before.0, with_clock - before.1);
    *before = (bare, with_clock);
    forms
}

#[test]
fn changes_in_the_same_ms_replicate_bare_and_replay_at_the_masters_clock() {
    let (mut master, replica) = durable_master_and_replica();
    let mut con = master.con();
    let mut on_replica = replica.con();
    let mut seen = (0, 0);
    let end = (server_now_ms(&mut con) + 3_600_000).to_string();
    let sales: [(&str, Vec<&str>, Option<&str>); 3] = [
        ("{h}", vec!["HOLD", "600000", "END", &end], None),
        (
            "{e}",
            vec!["HOLD", "600000", "EVENTS", "{e}:ev"],
            Some("{e}:ev"),
        ),
        (
            "{m}",
            vec!["HOLD", "600000", "EVENTS", "{m}:ev", "MAXLEN", "100"],
            None,
        ),
    ];
    for (key, options, foreign) in &sales {
        let mut init = vec!["SECKILL.INIT", key, "2000", "LIMIT", "2"];
        init.extend(options);
        ok(&mut con, &init);
        replayed_forms(&mut on_replica, &mut seen);
        let changes = clocked_changes(&mut con, key, *foreign);
        wait_replicas(&mut con, 1);
        let (bare, with_clock) = replayed_forms(&mut on_replica, &mut seen);
        assert_eq!(bare + with_clock, changes, "{key}: one command per change");
        if options.contains(&"MAXLEN") {
            assert_eq!(
                bare, 0,
                "{key}: a trimmed stream's length comes with every change"
            );
        } else {
            assert!(
                bare > with_clock,
                "{key}: most changes share the ms of the one before: {bare} bare, \
                 {with_clock} with a clock"
            );
        }
    }
    let keys = ["{h}", "{e}", "{e}:ev", "{m}", "{m}:ev"];
    let on_master: Vec<Vec<u8>> = keys.iter().map(|k| dump(&mut con, k)).collect();
    let foreign = stream(&mut con, "{e}:ev")
        .iter()
        .filter(|e| e.fields.contains_key("foreign"))
        .count();
    assert_eq!(
        foreign, 21,
        "the other writers' entries are kept among the sale's"
    );
    let check = |con: &mut redis::Connection, what: &str| {
        for (key, bytes) in keys.iter().zip(&on_master) {
            assert_eq!(&dump(con, key), bytes, "{what}: {key}");
        }
    };
    check(&mut on_replica, "replica");
    master.kill_and_restart();
    check(&mut master.con(), "AOF replay");
    rewrite_aof(&mut master.con());
    master.kill_and_restart();
    check(&mut master.con(), "rewritten AOF");
}

#[test]
fn a_replica_never_expires_holds_until_promoted() {
    let mut master = Server::start();
    let replica = Server::start();
    replicate(&replica, &master);
    let mut con = master.con();
    ok(
        &mut con,
        &["SECKILL.INIT", "s", "1", "HOLD", "100", "EVENTS", "ev"],
    );
    int(&mut con, &["SECKILL.TRY", "s", "alice"]);
    wait_replicas(&mut con, 1);
    let mut on_replica = replica.con();
    let held = dump(&mut on_replica, "s");
    master.kill();
    let deadline = server_now_ms(&mut on_replica) + 100;
    wait_until(Duration::from_secs(5), "the hold's deadline", || {
        server_now_ms(&mut on_replica) > deadline + 50
    });
    // Reads already see the hold as gone, but the replica's stored sale is unchanged.
    assert_eq!(
        field(&mut on_replica, &["SECKILL.INFO", "s"], "remaining"),
        1
    );
    assert_eq!(dump(&mut on_replica, "s"), held);
    assert_eq!(stream(&mut on_replica, "ev").len(), 1);

    seckill_harness::promote(&mut on_replica);
    let mut watcher = replica.con();
    let first = stream(&mut on_replica, "ev")[0].id.clone();
    let expired = next_event(&mut watcher, "ev", &first);
    assert_eq!(
        (expired.get("event"), expired.get("user")),
        ("expire", "alice")
    );
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

/// SWAPDB takes a sale's hold-expiry timer along: the hold expires by timer in the database
/// the sale went to, with nobody touching the key.
#[test]
fn swapdb_moves_a_sale_with_its_expiry_timer() {
    let server = Server::start();
    let mut con = server.con();
    let _: () = redis::cmd("SELECT").arg(2).query(&mut con).unwrap();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "{x}",
            "3",
            "HOLD",
            "200",
            "EVENTS",
            "{x}:ev",
        ],
    );
    int(&mut con, &["SECKILL.TRY", "{x}", "alice"]);
    let _: () = redis::cmd("SWAPDB").arg(2).arg(3).query(&mut con).unwrap();
    assert_eq!(int(&mut con, &["EXISTS", "{x}"]), 0, "the sale left db 2");
    let _: () = redis::cmd("SELECT").arg(3).query(&mut con).unwrap();
    let purchase = stream(&mut con, "{x}:ev").pop().unwrap();
    let expired = next_event(&mut con, "{x}:ev", &purchase.id);
    assert_eq!(
        (expired.get("event"), expired.get("user")),
        ("expire", "alice")
    );
}
