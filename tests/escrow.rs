//! Escrow transfers against a real server: LEND, ABSORB, SETTLE and TRANSFERS, a mover that
//! crashes half way, concurrent buyers while stock shuttles, replication and AOF.

use redis::Value;
use seckill_harness::{
    Server, dump, durable_master_and_replica, error, field, fields, int, ok, rewrite_aof, stream,
    wait_replicas,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

/// SECKILL.INFO as a map of its integer fields.
fn info(con: &mut redis::Connection, key: &str) -> HashMap<String, i64> {
    fields(con, &["SECKILL.INFO", key]).into_iter().collect()
}

/// The identity of one key: `remaining + held + sold == stock + restocked + absorbed - lent`.
fn assert_identity(con: &mut redis::Connection, key: &str) -> HashMap<String, i64> {
    let i = info(con, key);
    assert!(i["remaining"] >= 0 && i["held"] >= 0 && i["sold"] >= 0);
    assert_eq!(
        i["remaining"] + i["held"] + i["sold"],
        i["stock"] + i["restocked"] + i["absorbed"] - i["lent"],
        "{key}: {i:?}"
    );
    i
}

/// SECKILL.TRANSFERS as (id, n, dst, age_ms).
fn transfers(con: &mut redis::Connection, key: &str) -> Vec<(String, i64, String, i64)> {
    let flat: Vec<Value> = redis::cmd("SECKILL.TRANSFERS").arg(key).query(con).unwrap();
    flat.chunks(4)
        .map(|t| {
            (
                redis::from_redis_value(t[0].clone()).unwrap(),
                redis::from_redis_value(t[1].clone()).unwrap(),
                redis::from_redis_value(t[2].clone()).unwrap(),
                redis::from_redis_value(t[3].clone()).unwrap(),
            )
        })
        .collect()
}

/// What any client runs to finish the transfers a crashed mover left at `key`: ABSORB each
/// at its destination, then SETTLE it. Returns how many it finished.
fn recover(con: &mut redis::Connection, key: &str) -> usize {
    let pending = transfers(con, key);
    for (id, n, dst, _) in &pending {
        if *n > 0 {
            let n = n.to_string();
            int(con, &["SECKILL.ABSORB", dst, id, &n, "FROM", key]);
        }
        assert_eq!(int(con, &["SECKILL.SETTLE", key, id]), 1);
    }
    pending.len()
}

#[test]
fn lend_absorb_settle_and_transfers_contract() {
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "{a}", "10", "LIMIT", "2"]);
    ok(&mut con, &["SECKILL.INIT", "{b}", "0", "LIMIT", "2"]);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "{b}", "u"]), -1);

    assert_eq!(
        int(&mut con, &["SECKILL.LEND", "{a}", "t1", "4", "TO", "{b}"]),
        4
    );
    assert_eq!(
        int(&mut con, &["SECKILL.LEND", "{a}", "t1", "4", "to", "{b}"]),
        4,
        "the same id again: the same amount"
    );
    let a = assert_identity(&mut con, "{a}");
    assert_eq!((a["remaining"], a["lent"], a["pending_out"]), (6, 4, 4));
    let pending = transfers(&mut con, "{a}");
    assert_eq!(pending.len(), 1);
    let (id, n, dst, age) = &pending[0];
    assert_eq!((id.as_str(), *n, dst.as_str()), ("t1", 4, "{b}"));
    assert!((0..10_000).contains(age), "age {age}");

    assert_eq!(
        int(
            &mut con,
            &["SECKILL.ABSORB", "{b}", "t1", "4", "FROM", "{a}"]
        ),
        1
    );
    assert_eq!(
        int(
            &mut con,
            &["SECKILL.ABSORB", "{b}", "t1", "4", "FROM", "{a}"]
        ),
        0
    );
    assert_eq!(
        int(&mut con, &["SECKILL.TRY", "{b}", "u"]),
        3,
        "a sold-out sale that absorbs sells again"
    );
    assert_eq!(int(&mut con, &["SECKILL.SETTLE", "{a}", "t1"]), 1);
    assert_eq!(int(&mut con, &["SECKILL.SETTLE", "{a}", "t1"]), 0);
    assert_eq!(int(&mut con, &["SECKILL.SETTLE", "{a}", "never"]), 0);
    assert!(transfers(&mut con, "{a}").is_empty());
    // Repeats after SETTLE move nothing either.
    assert_eq!(
        int(
            &mut con,
            &["SECKILL.ABSORB", "{b}", "t1", "4", "FROM", "{a}"]
        ),
        0
    );
    assert_eq!(
        int(&mut con, &["SECKILL.LEND", "{a}", "t1", "4", "TO", "{b}"]),
        4
    );
    assert_eq!(field(&mut con, &["SECKILL.INFO", "{a}"], "remaining"), 6);

    // More than is left lends what is left: the lender is then sold out.
    assert_eq!(
        int(&mut con, &["SECKILL.LEND", "{a}", "t2", "100", "TO", "{b}"]),
        6
    );
    assert_eq!(field(&mut con, &["SECKILL.INFO", "{a}"], "sold_out"), 1);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "{a}", "v"]), -1);
    assert_eq!(
        int(&mut con, &["SECKILL.LEND", "{a}", "t3", "1", "TO", "{b}"]),
        0
    );
    assert_identity(&mut con, "{a}");
    assert_identity(&mut con, "{b}");

    // The ledger survives DEBUG RELOAD and DUMP/RESTORE.
    let before = (dump(&mut con, "{a}"), transfers(&mut con, "{a}").len());
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(
        (dump(&mut con, "{a}"), transfers(&mut con, "{a}").len()),
        before
    );
    let _: () = redis::cmd("RESTORE")
        .arg("{a}:copy")
        .arg(0)
        .arg(before.0.clone())
        .query(&mut con)
        .unwrap();
    assert_eq!(dump(&mut con, "{a}:copy"), before.0);
    assert_eq!(transfers(&mut con, "{a}:copy").len(), 2);
    assert_eq!(info(&mut con, "{a}:copy"), info(&mut con, "{a}"));
}

/// Issue 31, as filed: a settled id lent again to another key replied as a repeat, and that
/// key then absorbed units the source never gave (13 units from 10).
#[test]
fn a_settled_id_lent_again_elsewhere_is_refused_and_creates_nothing() {
    let server = Server::start();
    let mut con = server.con();
    for (key, stock) in [("a", "10"), ("b", "0"), ("c", "0")] {
        ok(&mut con, &["SECKILL.INIT", key, stock]);
    }
    assert_eq!(
        int(&mut con, &["SECKILL.LEND", "a", "t", "3", "TO", "b"]),
        3
    );
    let refused_elsewhere = "ERR transfer id already lent to another sale key";
    assert_eq!(
        error(&mut con, &["SECKILL.LEND", "a", "t", "3", "TO", "c"]),
        refused_elsewhere
    );
    assert_eq!(
        int(&mut con, &["SECKILL.ABSORB", "b", "t", "3", "FROM", "a"]),
        1
    );
    assert_eq!(int(&mut con, &["SECKILL.SETTLE", "a", "t"]), 1);
    let before = (dump(&mut con, "a"), dump(&mut con, "c"));
    assert_eq!(
        error(&mut con, &["SECKILL.LEND", "a", "t", "3", "TO", "c"]),
        refused_elsewhere,
        "settled, the id is still bound to b"
    );
    assert_eq!(
        error(&mut con, &["SECKILL.LEND", "a", "t", "4", "TO", "b"]),
        "ERR transfer id already lent with another n"
    );
    assert_eq!(
        int(&mut con, &["SECKILL.LEND", "a", "t", "3", "TO", "b"]),
        3,
        "the same LEND again replies what it moved"
    );
    assert_eq!((dump(&mut con, "a"), dump(&mut con, "c")), before);
    let total: i64 = ["a", "b", "c"]
        .iter()
        .map(|key| {
            let i = assert_identity(&mut con, key);
            i["remaining"] + i["held"] + i["sold"]
        })
        .sum();
    assert_eq!(total, 10, "10 units, not 13");
}

#[test]
fn transfer_errors_change_nothing() {
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "{a}", "10"]);
    ok(&mut con, &["SECKILL.INIT", "{b}", "0"]);
    assert_eq!(
        int(&mut con, &["SECKILL.LEND", "{a}", "t", "3", "TO", "{b}"]),
        3
    );
    assert_eq!(
        int(
            &mut con,
            &["SECKILL.ABSORB", "{b}", "t", "3", "FROM", "{a}"]
        ),
        1
    );
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let long = "x".repeat(129);
    let before = (dump(&mut con, "{a}"), dump(&mut con, "{b}"));
    let n_range = "ERR n must be an integer between 1 and 9223372036854775807";
    let id_range = "ERR transfer id must be 1 to 128 bytes";
    for (args, expected) in [
        (
            vec!["SECKILL.LEND", "missing", "t", "1", "TO", "{b}"],
            "NOSALE no sale at this key",
        ),
        (
            vec!["SECKILL.ABSORB", "missing", "t", "1", "FROM", "{b}"],
            "NOSALE no sale at this key",
        ),
        (
            vec!["SECKILL.SETTLE", "missing", "t"],
            "NOSALE no sale at this key",
        ),
        (
            vec!["SECKILL.TRANSFERS", "missing"],
            "NOSALE no sale at this key",
        ),
        (
            vec!["SECKILL.LEND", "str", "t", "1", "TO", "{b}"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (vec!["SECKILL.LEND", "{a}", "u", "0", "TO", "{b}"], n_range),
        (vec!["SECKILL.LEND", "{a}", "u", "-1", "TO", "{b}"], n_range),
        (
            vec!["SECKILL.LEND", "{a}", "u", "abc", "TO", "{b}"],
            n_range,
        ),
        (
            vec![
                "SECKILL.LEND",
                "{a}",
                "u",
                "9223372036854775808",
                "TO",
                "{b}",
            ],
            n_range,
        ),
        (
            vec!["SECKILL.ABSORB", "{b}", "u", "0", "FROM", "{a}"],
            n_range,
        ),
        (
            vec!["SECKILL.LEND", "{a}", &long, "1", "TO", "{b}"],
            id_range,
        ),
        (vec!["SECKILL.LEND", "{a}", "", "1", "TO", "{b}"], id_range),
        (
            vec!["SECKILL.ABSORB", "{b}", &long, "1", "FROM", "{a}"],
            id_range,
        ),
        (vec!["SECKILL.SETTLE", "{a}", &long], id_range),
        (
            vec!["SECKILL.LEND", "{a}", "u", "1", "TO", "{a}"],
            "ERR a transfer needs two different sale keys",
        ),
        (
            vec!["SECKILL.ABSORB", "{b}", "u", "1", "FROM", "{b}"],
            "ERR a transfer needs two different sale keys",
        ),
        (
            vec!["SECKILL.LEND", "{a}", "u", "1", "TO", ""],
            "ERR the other sale key must not be empty",
        ),
        (
            vec!["SECKILL.LEND", "{a}", "u", "1", "INTO", "{b}"],
            "ERR syntax error",
        ),
        (
            vec!["SECKILL.ABSORB", "{b}", "u", "1", "TO", "{a}"],
            "ERR syntax error",
        ),
        (
            vec!["SECKILL.ABSORB", "{b}", "t", "2", "FROM", "{a}"],
            "ERR transfer id already absorbed with another n",
        ),
        (
            vec!["SECKILL.ABSORB", "{b}", "t", "3", "FROM", "{c}"],
            "ERR transfer id already absorbed from another sale key",
        ),
        (
            vec!["SECKILL.LEND", "{a}", "t", "3", "TO", "{c}"],
            "ERR transfer id already lent to another sale key",
        ),
        (
            vec!["SECKILL.ABSORB", "{a}", "t", "3", "FROM", "{b}"],
            "ERR transfer id already lent from here",
        ),
        (
            vec!["SECKILL.LEND", "{b}", "t", "3", "TO", "{a}"],
            "ERR transfer id already absorbed here",
        ),
        (
            vec![
                "SECKILL.ABSORB",
                "{b}",
                "huge",
                "9223372036854775807",
                "FROM",
                "{a}",
            ],
            "ERR units would take the sale past 9223372036854775807 units",
        ),
        (
            vec!["SECKILL.LEND", "{a}", "t", "1", "TO"],
            "ERR wrong number of arguments for 'seckill.lend' command",
        ),
        (
            vec!["SECKILL.ABSORB", "{b}", "t", "1"],
            "ERR wrong number of arguments for 'seckill.absorb' command",
        ),
        (
            vec!["SECKILL.SETTLE", "{a}"],
            "ERR wrong number of arguments for 'seckill.settle' command",
        ),
        (
            vec!["SECKILL.TRANSFERS", "{a}", "x"],
            "ERR unknown option 'x'",
        ),
        (
            vec!["SECKILL.TRANSFERS", "{a}", "WITHASKED", "x"],
            "ERR wrong number of arguments for 'seckill.transfers' command",
        ),
    ] {
        assert_eq!(error(&mut con, &args), expected, "{args:?}");
    }
    assert_eq!((dump(&mut con, "{a}"), dump(&mut con, "{b}")), before);

    // After the sale's END no stock moves.
    ok(
        &mut con,
        &["SECKILL.INIT", "{e}", "5", "START", "1000", "END", "2000"],
    );
    assert_eq!(
        error(&mut con, &["SECKILL.LEND", "{e}", "t", "1", "TO", "{b}"]),
        "ERR the sale has ended: its stock no longer moves"
    );
    assert_eq!(
        error(
            &mut con,
            &["SECKILL.ABSORB", "{e}", "t", "1", "FROM", "{b}"]
        ),
        "ERR the sale has ended: its stock no longer moves"
    );
}

#[test]
fn an_interrupted_transfer_is_finished_by_another_client() {
    let server = Server::start();
    ok(&mut server.con(), &["SECKILL.INIT", "{a}", "10"]);
    ok(&mut server.con(), &["SECKILL.INIT", "{b}", "0"]);
    {
        // The mover lends, then dies before ABSORB.
        let mut mover = server.con();
        assert_eq!(
            int(
                &mut mover,
                &["SECKILL.LEND", "{a}", "m-1", "4", "TO", "{b}"]
            ),
            4
        );
        assert_eq!(
            int(
                &mut mover,
                &["SECKILL.LEND", "{a}", "m-2", "2", "TO", "{b}"]
            ),
            2
        );
        // ... and the second one even got absorbed, but not settled.
        assert_eq!(
            int(
                &mut mover,
                &["SECKILL.ABSORB", "{b}", "m-2", "2", "FROM", "{a}"]
            ),
            1
        );
    }
    let mut con = server.con();
    let a = info(&mut con, "{a}");
    let b = info(&mut con, "{b}");
    // Units in pending transfers not yet absorbed close the sum: 4 are in flight.
    assert_eq!(a["remaining"] + b["remaining"] + 4, 10);
    assert_eq!(recover(&mut con, "{a}"), 2);
    assert_eq!(
        recover(&mut con, "{a}"),
        0,
        "a second recovery has nothing to do"
    );
    let a = assert_identity(&mut con, "{a}");
    let b = assert_identity(&mut con, "{b}");
    assert_eq!((a["remaining"], b["remaining"]), (4, 6));
    assert_eq!((a["lent"], b["absorbed"], a["pending_out"]), (6, 6, 0));
}

#[test]
fn concurrent_buyers_and_a_shuttling_mover_keep_the_summed_identity() {
    const BUYERS: usize = 200;
    const STOCK: i64 = 150;
    let server = Server::start();
    const KEYS: [&str; 2] = ["{p0}", "{p1}"];
    let keys = KEYS;
    for key in keys {
        ok(
            &mut server.con(),
            &["SECKILL.INIT", key, &STOCK.to_string(), "LIMIT", "2"],
        );
    }
    // Every user belongs to one key (a hash of the id), as a partitioned sale routes them.
    let key_of = |user: usize| KEYS[user % 2];
    let buying = Arc::new(AtomicBool::new(true));
    let mover = {
        let buying = buying.clone();
        let mut con = server.con();
        std::thread::spawn(move || {
            let mut moves = 0;
            while buying.load(Ordering::Relaxed) {
                let (from, to) = if moves % 2 == 0 {
                    ("{p0}", "{p1}")
                } else {
                    ("{p1}", "{p0}")
                };
                let id = format!("move-{moves}");
                let lent = int(&mut con, &["SECKILL.LEND", from, &id, "7", "TO", to]);
                // Every identity holds mid-transfer too.
                assert_identity(&mut con, from);
                if lent > 0 {
                    let n = lent.to_string();
                    assert_eq!(
                        int(&mut con, &["SECKILL.ABSORB", to, &id, &n, "FROM", from]),
                        1
                    );
                }
                assert_eq!(int(&mut con, &["SECKILL.SETTLE", from, &id]), 1);
                moves += 1;
            }
            moves
        })
    };
    let start = Arc::new(Barrier::new(BUYERS));
    let buyers: Vec<_> = (0..BUYERS)
        .map(|user| {
            let mut con = server.con();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let name = format!("user{user}");
                let mut bought = 0;
                for attempt in 0..3 {
                    let qty = 1 + (user + attempt) % 2;
                    let left = int(
                        &mut con,
                        &["SECKILL.TRY", key_of(user), &name, &qty.to_string()],
                    );
                    if left >= 0 {
                        bought += qty as i64;
                    }
                }
                bought
            })
        })
        .collect();
    let bought: i64 = buyers.into_iter().map(|b| b.join().unwrap()).sum();
    buying.store(false, Ordering::Relaxed);
    let moves = mover.join().unwrap();
    let mut con = server.con();
    let mut sold = 0;
    let mut remaining = 0;
    let (mut lent, mut absorbed) = (0, 0);
    for key in keys {
        let i = assert_identity(&mut con, key);
        sold += i["sold"];
        remaining += i["remaining"];
        lent += i["lent"];
        absorbed += i["absorbed"];
        assert_eq!(i["pending_out"], 0);
        // No user over LIMIT: read every buyer.
        let (_, rows): (String, Vec<Value>) = redis::cmd("SECKILL.BUYERS")
            .arg(key)
            .arg(0)
            .arg("COUNT")
            .arg(10_000)
            .query(&mut con)
            .unwrap();
        for row in rows.chunks(3) {
            let qty: i64 = redis::from_redis_value(row[1].clone()).unwrap();
            assert!((1..=2).contains(&qty));
        }
    }
    println!("{moves} moves while {BUYERS} buyers bought {bought} units");
    assert!(moves > 0, "the mover ran");
    assert_eq!(lent, absorbed, "every transfer finished");
    assert_eq!(
        sold, bought,
        "every acknowledged purchase, and nothing else, is sold"
    );
    assert_eq!(sold + remaining, 2 * STOCK, "no unit lost or created");
}

/// DUMPs `keys` on the master (whose replica has caught up) and checks that the replica, an
/// AOF replay and a rewritten AOF hold them byte for byte; returns the dumps and a connection
/// to the master restarted from the rewritten AOF.
fn assert_replica_and_aof_reproduce(
    master: &mut Server,
    replica: &Server,
    keys: &[&str],
) -> (Vec<Vec<u8>>, redis::Connection) {
    let on_master: Vec<Vec<u8>> = keys.iter().map(|k| dump(&mut master.con(), k)).collect();
    let mut on_replica = replica.con();
    for (key, bytes) in keys.iter().zip(&on_master) {
        assert_eq!(&dump(&mut on_replica, key), bytes, "replica {key}");
    }
    master.kill_and_restart();
    let mut con = master.con();
    for (key, bytes) in keys.iter().zip(&on_master) {
        assert_eq!(&dump(&mut con, key), bytes, "AOF replay {key}");
    }
    rewrite_aof(&mut con);
    master.kill_and_restart();
    let mut con = master.con();
    for (key, bytes) in keys.iter().zip(&on_master) {
        assert_eq!(&dump(&mut con, key), bytes, "rewritten AOF {key}");
    }
    (on_master, con)
}

#[test]
fn a_replica_and_an_aof_replay_reproduce_both_keys_byte_for_byte() {
    let (mut master, replica) = durable_master_and_replica();
    let mut con = master.con();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "{s}",
            "20",
            "LIMIT",
            "2",
            "HOLD",
            "60000",
            "EVENTS",
            "{s}:ev",
        ],
    );
    ok(&mut con, &["SECKILL.INIT", "{t}", "0", "LIMIT", "2"]);
    int(&mut con, &["SECKILL.TRY", "{s}", "alice", "2"]);
    for (i, n) in [5, 3, 4].into_iter().enumerate() {
        let id = format!("x{i}");
        let n = n.to_string();
        let lent = int(&mut con, &["SECKILL.LEND", "{s}", &id, &n, "TO", "{t}"]);
        int(
            &mut con,
            &[
                "SECKILL.ABSORB",
                "{t}",
                &id,
                &lent.to_string(),
                "FROM",
                "{s}",
            ],
        );
        if i != 2 {
            int(&mut con, &["SECKILL.SETTLE", "{s}", &id]);
        }
    }
    int(&mut con, &["SECKILL.TRY", "{t}", "bob"]);
    int(&mut con, &["SECKILL.LEND", "{t}", "back", "2", "TO", "{s}"]);
    int(
        &mut con,
        &["SECKILL.ABSORB", "{s}", "back", "2", "FROM", "{t}"],
    );
    wait_replicas(&mut con, 1);
    assert_eq!(transfers(&mut replica.con(), "{s}").len(), 1);
    let (_, mut con) =
        assert_replica_and_aof_reproduce(&mut master, &replica, &["{s}", "{t}", "{s}:ev"]);
    assert_identity(&mut con, "{s}");
    assert_identity(&mut con, "{t}");
}

#[test]
fn the_event_stream_gets_one_entry_per_lend_and_absorb() {
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "{s}", "10", "EVENTS", "{s}:ev"]);
    ok(&mut con, &["SECKILL.INIT", "{o}", "10"]);
    int(&mut con, &["SECKILL.LEND", "{s}", "out", "3", "TO", "{o}"]);
    int(&mut con, &["SECKILL.LEND", "{s}", "out", "3", "TO", "{o}"]);
    int(&mut con, &["SECKILL.SETTLE", "{s}", "out"]);
    int(&mut con, &["SECKILL.LEND", "{o}", "in", "5", "TO", "{s}"]);
    int(
        &mut con,
        &["SECKILL.ABSORB", "{s}", "in", "5", "FROM", "{o}"],
    );
    int(
        &mut con,
        &["SECKILL.ABSORB", "{s}", "in", "5", "FROM", "{o}"],
    );
    let events = stream(&mut con, "{s}:ev");
    let seen: Vec<(&str, &str, &str, &str, &str)> = events
        .iter()
        .map(|e| {
            (
                e.get("event"),
                e.get("qty"),
                e.get("remaining"),
                e.get("transfer"),
                e.get("peer"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("lend", "3", "7", "out", "{o}"),
            ("absorb", "5", "12", "in", "{o}"),
        ]
    );
    assert_eq!(seckill_harness::info_counter(&mut con, "lends"), 2);
    assert_eq!(seckill_harness::info_counter(&mut con, "absorbs"), 1);
}

/// A partition's seal (and what it is a partition of) reach the replica and come back from the
/// AOF, its rewrite and the RDB: a restarted server still answers -1, not -5.
#[test]
fn a_sealed_partition_is_kept_by_the_replica_the_aof_and_the_rdb() {
    let (mut master, replica) = durable_master_and_replica();
    let mut con = master.con();
    for (key, stock, index) in [("{p/0}", "1", "0"), ("{p/1}", "0", "1")] {
        ok(
            &mut con,
            &[
                "SECKILL.INIT",
                key,
                stock,
                "PARTITION",
                index,
                "PARTITIONS",
                "2",
                "MANIFEST",
                "sale:p",
            ],
        );
    }
    assert_eq!(int(&mut con, &["SECKILL.TRY", "{p/0}", "u"]), 0);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "{p/0}", "v"]), -5);
    assert_eq!(int(&mut con, &["SECKILL.SEAL", "{p/0}", "3600000"]), 1);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "{p/0}", "v"]), -1);
    assert_eq!(
        seckill_harness::info_counter(&mut con, "drained_rejections"),
        1
    );
    assert_eq!(seckill_harness::info_counter(&mut con, "seals"), 1);
    assert_eq!(
        seckill_harness::info_counter(&mut con, "sold_out_rejections"),
        1
    );
    wait_replicas(&mut con, 1);
    assert_eq!(info(&mut replica.con(), "{p/0}")["sealed"], 1);
    let (on_master, mut con) =
        assert_replica_and_aof_reproduce(&mut master, &replica, &["{p/0}", "{p/1}"]);
    ok(&mut con, &["DEBUG", "RELOAD"]);
    assert_eq!(dump(&mut con, "{p/0}"), on_master[0], "RDB");
    let fields = info(&mut con, "{p/0}");
    assert_eq!(
        (fields["sealed"], fields["partition"], fields["partitions"]),
        (1, 0, 2)
    );
    assert_eq!(int(&mut con, &["SECKILL.TRY", "{p/0}", "v"]), -1);
    // The seal lifts when stock comes back.
    assert_eq!(int(&mut con, &["SECKILL.CANCEL", "{p/0}", "u"]), 1);
    assert_eq!(info(&mut con, "{p/0}")["sealed"], 0);
}
