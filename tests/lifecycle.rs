//! The order lifecycle against a real server: holds that expire, confirm, cancel/refund,
//! restock, the sale window, the buyer scan, and their replication (the event stream:
//! tests/events.rs).

use redis::Value;
use seckill_harness::{
    Server, command_calls, dump, durable_master_and_replica, error, field, fields, info_counter,
    int, next_event, ok, replicate, rewrite_aof, server_now_ms, stream, wait_replicas, wait_until,
};
use std::collections::HashMap;
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
    seckill_harness::invariants::assert_sale_invariants(&mut con, "s");
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
    seckill_harness::invariants::assert_sale_invariants(&mut con, "s");
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
