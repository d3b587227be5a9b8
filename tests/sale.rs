//! SECKILL.* against a real server: the contract, concurrency, persistence, replication.

use redis::Value;
use seckill_harness::{
    Server, call, error, field, fields, info_counter, int, ok, replicate, wait_replicas, wait_until,
};
use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn info(con: &mut redis::Connection, key: &str) -> Vec<(String, i64)> {
    fields(con, &["SECKILL.INFO", key])
}

fn expected_info(stock: i64, remaining: i64, buyers: i64, limit: i64) -> Vec<(String, i64)> {
    [
        ("stock", stock),
        ("remaining", remaining),
        ("sold", stock - remaining),
        ("buyers", buyers),
        ("limit", limit),
        ("sold_out", i64::from(remaining == 0)),
        // A sale without lifecycle options: nothing held, no window, no HOLD, no stream (nil).
        ("held", 0),
        ("start", 0),
        ("end", 0),
        ("hold", 0),
        ("restocked", 0),
        ("refunded", 0),
        ("events", -999),
        // No transfers.
        ("lent", 0),
        ("absorbed", 0),
        ("pending_out", 0),
        ("maxlen", 0),
        // Not a partition of a larger sale.
        ("manifest", -999),
        ("partition", -999),
        ("partitions", 0),
        ("sealed", 0),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), *v))
    .collect()
}

#[test]
fn init_contract() {
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "s", "5"]);
    assert_eq!(info(&mut con, "s"), expected_info(5, 5, 0, 1));
    assert_eq!(
        error(&mut con, &["SECKILL.INIT", "s", "7"]),
        "ERR a sale already exists at this key (use REPLACE to reset it)"
    );
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "u1"]), 4);
    ok(
        &mut con,
        &["SECKILL.INIT", "s", "7", "LIMIT", "3", "REPLACE"],
    );
    assert_eq!(info(&mut con, "s"), expected_info(7, 7, 0, 3));
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "s", "u1"]), 0);
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "max",
            "9223372036854775807",
            "LIMIT",
            "9223372036854775807",
        ],
    );
    ok(&mut con, &["SECKILL.INIT", "zero", "0"]);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "zero"], "sold_out"), 1);

    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut con)
        .unwrap();
    for args in [
        &["SECKILL.INIT", "str", "5"][..],
        &["SECKILL.INIT", "str", "5", "REPLACE"],
    ] {
        assert!(error(&mut con, args).starts_with("WRONGTYPE"), "{args:?}");
    }
    let cases: [(&[&str], &str); 8] = [
        (
            &["SECKILL.INIT", "n", "-1"],
            "ERR stock must be an integer between 0 and 9223372036854775807",
        ),
        (
            &["SECKILL.INIT", "n", "9223372036854775808"],
            "ERR stock must be an integer between 0 and 9223372036854775807",
        ),
        (
            &["SECKILL.INIT", "n", "ten"],
            "ERR stock must be an integer between 0 and 9223372036854775807",
        ),
        (
            &["SECKILL.INIT", "n", "5", "LIMIT", "0"],
            "ERR LIMIT must be an integer between 1 and 9223372036854775807",
        ),
        (
            &["SECKILL.INIT", "n", "5", "LIMIT"],
            "ERR LIMIT needs a value",
        ),
        (
            &["SECKILL.INIT", "n", "5", "BOGUS"],
            "ERR unknown option 'BOGUS'",
        ),
        (
            &["SECKILL.INIT", "n"],
            "ERR wrong number of arguments for 'seckill.init' command",
        ),
        (
            &["SECKILL.INIT", "s", "1", "LIMIT", "x", "REPLACE"],
            "ERR LIMIT must be an integer between 1 and 9223372036854775807",
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(error(&mut con, args), expected, "{args:?}");
    }
    let exists: i64 = redis::cmd("EXISTS").arg("n").query(&mut con).unwrap();
    assert_eq!(exists, 0, "a failed INIT creates nothing");
    assert_eq!(
        info(&mut con, "s"),
        expected_info(7, 7, 0, 3),
        "a failed INIT changes nothing"
    );
    let kind: String = redis::cmd("TYPE").arg("s").query(&mut con).unwrap();
    assert_eq!(kind, "seckill-S");
}

#[test]
fn try_contract() {
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "s", "4", "LIMIT", "2"]);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "alice"]), 3);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "alice", "2"]), -2);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "alice", "1"]), 2);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "alice"]), -2);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "bob", "2"]), 0);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "s", "carol"]), -1);
    assert_eq!(
        int(&mut con, &["SECKILL.TRY", "s", "alice"]),
        -1,
        "sold out comes before the limit"
    );
    assert_eq!(info(&mut con, "s"), expected_info(4, 0, 2, 2));
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "s", "alice"]), 2);
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "s", "carol"]), 0);

    ok(&mut con, &["SECKILL.INIT", "b", "3", "LIMIT", "3"]);
    let binary_user = b"\x00\xff\r\n user";
    let reply = call(&mut con, &[b"SECKILL.TRY", b"b", binary_user, b"2"]).unwrap();
    assert_eq!(reply, Value::Int(1));
    let reply = call(&mut con, &[b"SECKILL.BOUGHT", b"b", binary_user]).unwrap();
    assert_eq!(reply, Value::Int(2));
    assert_eq!(
        int(&mut con, &["SECKILL.TRY", "b", "x", "2"]),
        -1,
        "fewer than qty left"
    );

    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let cases: [(&[&str], &str); 11] = [
        (&["SECKILL.TRY", "s", ""], "ERR user must not be empty"),
        (
            &["SECKILL.TRY", "b", "u", "0"],
            "ERR qty must be an integer between 1 and 3 (the sale's LIMIT)",
        ),
        (
            &["SECKILL.TRY", "b", "u", "4"],
            "ERR qty must be an integer between 1 and 3 (the sale's LIMIT)",
        ),
        (
            &["SECKILL.TRY", "b", "u", "x"],
            "ERR qty must be an integer between 1 and 3 (the sale's LIMIT)",
        ),
        (
            &["SECKILL.TRY", "s"],
            "ERR wrong number of arguments for 'seckill.try' command",
        ),
        (
            &["SECKILL.TRY", "s", "u", "1", "extra"],
            "ERR unknown option 'EXTRA'",
        ),
        (
            &["SECKILL.TRY", "s", "u", "1", "ID", "a", "extra"],
            "ERR unknown option 'EXTRA'",
        ),
        (
            &["SECKILL.TRY", "s"],
            "ERR wrong number of arguments for 'seckill.try' command",
        ),
        (
            &["SECKILL.TRY", "missing", "u"],
            "NOSALE no sale at this key",
        ),
        (
            &["SECKILL.BOUGHT", "missing", "u"],
            "NOSALE no sale at this key",
        ),
        (&["SECKILL.INFO", "missing"], "NOSALE no sale at this key"),
    ];
    for (args, expected) in cases {
        assert_eq!(error(&mut con, args), expected, "{args:?}");
    }
    for args in [
        &["SECKILL.TRY", "str", "u"][..],
        &["SECKILL.INFO", "str"],
        &["SECKILL.BOUGHT", "str", "u"],
    ] {
        assert!(error(&mut con, args).starts_with("WRONGTYPE"), "{args:?}");
    }
    assert_eq!(
        error(&mut con, &["SECKILL.INFO", "s", "extra"]),
        "ERR wrong number of arguments for 'seckill.info' command"
    );
    assert_eq!(
        error(&mut con, &["SECKILL.BOUGHT", "s"]),
        "ERR wrong number of arguments for 'seckill.bought' command"
    );
    let exists: i64 = redis::cmd("EXISTS").arg("missing").query(&mut con).unwrap();
    assert_eq!(exists, 0, "TRY on a missing key creates nothing");
}

#[test]
fn info_section_counts() {
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "a", "1"]);
    ok(&mut con, &["SECKILL.INIT", "b", "5"]);
    int(&mut con, &["SECKILL.TRY", "a", "u1"]);
    int(&mut con, &["SECKILL.TRY", "a", "u2"]);
    int(&mut con, &["SECKILL.TRY", "b", "u1"]);
    int(&mut con, &["SECKILL.TRY", "b", "u1"]);
    assert_eq!(info_counter(&mut con, "sales"), 2);
    assert_eq!(info_counter(&mut con, "tries"), 4);
    assert_eq!(info_counter(&mut con, "purchases"), 2);
    assert_eq!(info_counter(&mut con, "sold_out_rejections"), 1);
    assert_eq!(info_counter(&mut con, "limit_rejections"), 1);
    let _: i64 = redis::cmd("DEL").arg("a").query(&mut con).unwrap();
    assert_eq!(info_counter(&mut con, "sales"), 1);
    let text: String = redis::cmd("INFO").arg("seckill").query(&mut con).unwrap();
    assert!(text.contains("seckill_version:"), "{text}");
    // Valkey 9 lists its Lua engine as a module too.
    let modules: Vec<Vec<Value>> = redis::cmd("MODULE").arg("LIST").query(&mut con).unwrap();
    let names: Vec<String> = modules
        .iter()
        .map(|m| redis::from_redis_value::<String>(m[1].clone()).unwrap())
        .collect();
    assert!(names.iter().any(|n| n == "seckill"), "{names:?}");
}

#[test]
fn hundreds_of_concurrent_buyers_never_oversell() {
    const STOCK: i64 = 50;
    const CLIENTS: usize = 300;
    const DISTINCT_USERS: usize = 220;
    let server = Server::start_with(&["--maxclients", "1000"]);
    ok(
        &mut server.con(),
        &["SECKILL.INIT", "flash", &STOCK.to_string()],
    );
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let barrier = barrier.clone();
            let mut con = server.con();
            std::thread::spawn(move || {
                // Every user past DISTINCT_USERS is a second attempt by an earlier user.
                let user = format!("user-{}", i % DISTINCT_USERS);
                barrier.wait();
                let reply = int(&mut con, &["SECKILL.TRY", "flash", &user]);
                (user, reply)
            })
        })
        .collect();
    let results: Vec<(String, i64)> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    let winners: Vec<&(String, i64)> = results.iter().filter(|(_, r)| *r >= 0).collect();
    assert_eq!(winners.len() as i64, STOCK.min(DISTINCT_USERS as i64));
    let remaining_replies: HashSet<i64> = winners.iter().map(|(_, r)| *r).collect();
    assert_eq!(
        remaining_replies,
        (0..STOCK).collect(),
        "each unit sold exactly once"
    );
    let winner_names: HashSet<&str> = winners.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(winner_names.len(), winners.len(), "no user bought twice");
    assert!(results.iter().all(|(_, r)| *r >= -2));

    let mut con = server.con();
    assert_eq!(field(&mut con, &["SECKILL.INFO", "flash"], "remaining"), 0);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "flash"], "buyers"), STOCK);
    for user in winner_names {
        assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "flash", user]), 1);
    }
}

fn load_sample(con: &mut redis::Connection) {
    ok(con, &["SECKILL.INIT", "s", "10", "LIMIT", "3"]);
    int(con, &["SECKILL.TRY", "s", "alice", "3"]);
    int(con, &["SECKILL.TRY", "s", "bob"]);
    call(con, &[b"SECKILL.TRY", b"s", b"\x00bin\xff", b"2"]).unwrap();
}

fn assert_sample(con: &mut redis::Connection) {
    assert_eq!(info(con, "s"), expected_info(10, 4, 3, 3));
    assert_eq!(int(con, &["SECKILL.BOUGHT", "s", "alice"]), 3);
    assert_eq!(int(con, &["SECKILL.BOUGHT", "s", "bob"]), 1);
    assert_eq!(
        call(con, &[b"SECKILL.BOUGHT", b"s", b"\x00bin\xff"]).unwrap(),
        Value::Int(2)
    );
    assert_eq!(
        int(con, &["SECKILL.TRY", "s", "alice"]),
        -2,
        "limits survive"
    );
}

fn digest(con: &mut redis::Connection, key: &str) -> String {
    redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query::<Vec<String>>(con)
        .unwrap()[0]
        .clone()
}

#[test]
fn survives_debug_reload_save_restart_and_aof() {
    let mut server = Server::start();
    let mut con = server.con();
    load_sample(&mut con);
    let before = digest(&mut con, "s");
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(digest(&mut con, "s"), before);
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    server.kill_and_restart();
    let mut con = server.con();
    assert_eq!(digest(&mut con, "s"), before, "RDB restart");
    assert_sample(&mut con);

    // AOF: commands replayed as logged, then a rewrite that emits SECKILL._RESTORE.
    let mut aof = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = aof.con();
    load_sample(&mut con);
    let before = digest(&mut con, "s");
    aof.kill_and_restart();
    let mut con = aof.con();
    assert_eq!(digest(&mut con, "s"), before, "AOF replay");
    seckill_harness::rewrite_aof(&mut con);
    aof.kill_and_restart();
    let mut con = aof.con();
    assert_eq!(digest(&mut con, "s"), before, "AOF rewrite replay");
    assert_sample(&mut con);
}

#[test]
fn dump_restore_copy_rename_and_broken_dumps() {
    let server = Server::start();
    let mut con = server.con();
    load_sample(&mut con);
    let dump: Vec<u8> = redis::cmd("DUMP").arg("s").query(&mut con).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("r")
        .arg(0)
        .arg(&dump)
        .query(&mut con)
        .unwrap();
    assert_eq!(digest(&mut con, "r"), digest(&mut con, "s"));
    let copied: i64 = redis::cmd("COPY")
        .arg("s")
        .arg("c")
        .query(&mut con)
        .unwrap();
    assert_eq!(copied, 1);
    int(&mut con, &["SECKILL.TRY", "c", "new-user"]);
    assert_eq!(
        field(&mut con, &["SECKILL.INFO", "s"], "remaining"),
        4,
        "a copy is independent"
    );
    assert_eq!(field(&mut con, &["SECKILL.INFO", "c"], "remaining"), 3);
    let _: () = redis::cmd("RENAME")
        .arg("s")
        .arg("moved")
        .query(&mut con)
        .unwrap();
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "moved", "alice"]), 3);
    assert_eq!(info_counter(&mut con, "sales"), 3);

    // A dump whose CRC is broken is refused by Redis before the module sees it.
    let mut broken = dump.clone();
    broken[3] ^= 0xff;
    assert!(
        redis::cmd("RESTORE")
            .arg("x")
            .arg(0)
            .arg(&broken)
            .query::<()>(&mut con)
            .is_err()
    );
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn works_in_multi_and_lua() {
    let server = Server::start();
    let mut con = server.con();
    let replies: (String, i64, i64) = redis::pipe()
        .atomic()
        .cmd("SECKILL.INIT")
        .arg("m")
        .arg(2)
        .cmd("SECKILL.TRY")
        .arg("m")
        .arg("a")
        .cmd("SECKILL.TRY")
        .arg("m")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(replies, ("OK".to_string(), 1, -2));
    let script = "return {redis.call('SECKILL.TRY', KEYS[1], ARGV[1]), \
                  redis.call('SECKILL.BOUGHT', KEYS[1], ARGV[1])}";
    let reply: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("m")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, vec![0, 1]);
    let reply: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("m")
        .arg("c")
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, vec![-1, 0]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("SECKILL.TRY")
        .arg("m")
        .arg("u")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, vec!["m"]);
}

/// Whether `watcher`'s transaction on `key`, WATCHed before `meanwhile` ran on another
/// connection, still executes (false: EXEC answered nil because the key changed).
fn watch_survives(watcher: &mut redis::Connection, key: &str, meanwhile: impl FnOnce()) -> bool {
    ok(watcher, &["WATCH", key]);
    meanwhile();
    let reply: Value = redis::pipe()
        .atomic()
        .cmd("EXISTS")
        .arg(key)
        .query(watcher)
        .unwrap();
    reply != Value::Nil
}

#[test]
fn watch_is_aborted_by_changes_and_not_by_refusals() {
    let master = Server::start();
    let replica = Server::start();
    replicate(&replica, &master);
    let mut con = master.con();
    let mut watcher = master.con();
    ok(
        &mut con,
        &["SECKILL.INIT", "w", "2", "HOLD", "600000", "EVENTS", "w:ev"],
    );
    let try_as = |con: &mut redis::Connection, user: &str, expected: i64| {
        assert_eq!(int(con, &["SECKILL.TRY", "w", user]), expected);
    };
    let confirm = |user: &str, expected: i64| {
        assert_eq!(
            int(&mut master.con(), &["SECKILL.CONFIRM", "w", user]),
            expected
        );
    };
    assert!(!watch_survives(&mut watcher, "w", || {
        try_as(&mut master.con(), "alice", 1)
    }));
    // Over LIMIT, sold out, confirmed already: the sale and its stream stay as they were.
    assert!(watch_survives(&mut watcher, "w", || {
        try_as(&mut master.con(), "alice", -2)
    }));
    assert!(!watch_survives(&mut watcher, "w:ev", || {
        try_as(&mut master.con(), "bob", 0)
    }));
    for key in ["w", "w:ev"] {
        assert!(watch_survives(&mut watcher, key, || {
            try_as(&mut master.con(), "carol", -1)
        }));
    }
    assert!(!watch_survives(&mut watcher, "w:ev", || confirm(
        "alice", 1
    )));
    assert!(watch_survives(&mut watcher, "w", || confirm("alice", 0)));
    assert!(!watch_survives(&mut watcher, "w", || {
        ok(
            &mut master.con(),
            &["SECKILL.INIT", "w", "5", "HOLD", "500", "REPLACE"],
        )
    }));

    // A hold that the timer expires is a change too: WATCHed while it is still held.
    try_as(&mut con, "carol", 4);
    let expiries = info_counter(&mut con, "expiries");
    assert!(!watch_survives(&mut watcher, "w", || {
        assert_eq!(
            field(&mut master.con(), &["SECKILL.INFO", "w"], "held"),
            1,
            "the hold of 500 ms expired before WATCH"
        );
        // INFO counts the hold as expired from its deadline on; the counter moves when the
        // timer has put it back.
        wait_until(Duration::from_secs(10), "the timer to expire it", || {
            info_counter(&mut master.con(), "expiries") > expiries
        })
    }));

    // On the replica, the master's changes reach WATCH as well.
    let mut on_replica = replica.con();
    wait_until(Duration::from_secs(10), "the replica to expire it", || {
        field(&mut on_replica, &["SECKILL.INFO", "w"], "held") == 0
    });
    assert!(!watch_survives(&mut on_replica, "w", || {
        try_as(&mut con, "dave", 4);
        wait_replicas(&mut con, 1);
    }));

    // Locks: a contended ACQUIRE or a RELEASE with another token change nothing.
    assert!(int(&mut con, &["LOCK.ACQUIRE", "lk", "first", "60000"]) > 0);
    assert!(watch_survives(&mut watcher, "lk", || {
        let refused: Value = redis::cmd("LOCK.ACQUIRE")
            .arg("lk")
            .arg("second")
            .arg("60000")
            .query(&mut master.con())
            .unwrap();
        assert_eq!(refused, Value::Nil);
    }));
    assert!(watch_survives(&mut watcher, "lk", || {
        assert_eq!(int(&mut master.con(), &["LOCK.RELEASE", "lk", "second"]), 0)
    }));
    assert!(!watch_survives(&mut watcher, "lk", || {
        assert_eq!(
            int(&mut master.con(), &["LOCK.EXTEND", "lk", "first", "120000"]),
            1
        )
    }));
    assert!(!watch_survives(&mut watcher, "lk", || {
        assert_eq!(int(&mut master.con(), &["LOCK.RELEASE", "lk", "first"]), 1)
    }));

    // Client-side caching: a refusal sends no invalidation, a purchase does. Invalidations
    // and the marker reach the subscriber in order, so the first message after a refusal
    // is the marker unless the refusal invalidated the key.
    let mut subscriber = master.con();
    let subscriber_id = int(&mut subscriber, &["CLIENT", "ID"]).to_string();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe("__redis__:invalidate").unwrap();
    pubsub.subscribe("marker").unwrap();
    ok(
        &mut watcher,
        &["CLIENT", "TRACKING", "on", "REDIRECT", &subscriber_id],
    );
    let next_message = |pubsub: &mut redis::PubSub| {
        let message = pubsub.get_message().unwrap();
        let payload = match message.get_channel_name() {
            "marker" => vec![message.get_payload::<String>().unwrap()],
            _ => message.get_payload::<Vec<String>>().unwrap(),
        };
        (message.get_channel_name().to_string(), payload)
    };
    let mut cache_and_then = |act: &dyn Fn()| {
        field(&mut watcher, &["SECKILL.INFO", "w"], "remaining");
        act();
        int(&mut master.con(), &["PUBLISH", "marker", "after"]);
    };
    cache_and_then(&|| try_as(&mut master.con(), "dave", -2));
    assert_eq!(
        next_message(&mut pubsub),
        ("marker".to_string(), vec!["after".to_string()])
    );
    cache_and_then(&|| try_as(&mut master.con(), "erin", 3));
    assert_eq!(
        next_message(&mut pubsub),
        ("__redis__:invalidate".to_string(), vec!["w".to_string()])
    );
}

#[test]
fn replica_ends_in_identical_state() {
    let master = Server::start();
    let replica = Server::start();
    let mut con = master.con();
    ok(&mut con, &["SECKILL.INIT", "before-sync", "3"]);
    int(&mut con, &["SECKILL.TRY", "before-sync", "early"]);
    replicate(&replica, &master);
    load_sample(&mut con);
    for i in 0..200 {
        let _ = call(
            &mut con,
            &[b"SECKILL.TRY", b"s", format!("u{i}").as_bytes()],
        );
    }
    wait_replicas(&mut con, 1);
    let mut replica_con = replica.con();
    for key in ["s", "before-sync"] {
        assert_eq!(
            digest(&mut replica_con, key),
            digest(&mut con, key),
            "{key}"
        );
        assert_eq!(info(&mut replica_con, key), info(&mut con, key), "{key}");
    }
    assert_eq!(
        field(&mut replica_con, &["SECKILL.INFO", "s"], "remaining"),
        0
    );
    assert!(
        error(&mut replica_con, &["SECKILL.TRY", "s", "x"]).starts_with("READONLY"),
        "a replica refuses writes"
    );
}

#[test]
fn buyer_costs_less_memory_than_a_set_member() {
    const USERS: usize = 100_000;
    let server = Server::start();
    let mut con = server.con();
    let used = seckill_harness::used_memory;
    let ids: Vec<String> = (0..USERS).map(|i| format!("u{i:09}")).collect();
    assert!(ids.iter().all(|id| id.len() == 10));

    let base = used(&mut con);
    for chunk in ids.chunks(1000) {
        let mut cmd = redis::cmd("SADD");
        cmd.arg("set");
        for id in chunk {
            cmd.arg(id);
        }
        let _: i64 = cmd.query(&mut con).unwrap();
    }
    let set_bytes = used(&mut con) - base;

    ok(&mut con, &["SECKILL.INIT", "sale", &USERS.to_string()]);
    let base = used(&mut con);
    for chunk in ids.chunks(1000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.cmd("SECKILL.TRY").arg("sale").arg(id);
        }
        let _: Vec<i64> = pipe.query(&mut con).unwrap();
    }
    let sale_bytes = used(&mut con) - base;
    let per_set_member = set_bytes as f64 / USERS as f64;
    let per_buyer = sale_bytes as f64 / USERS as f64;
    println!(
        "used_memory per 10-byte id: SET member {per_set_member:.1} B, buyer {per_buyer:.1} B"
    );
    assert!(
        per_buyer < per_set_member,
        "buyer {per_buyer:.1} B vs SET {per_set_member:.1} B"
    );

    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("sale")
        .query(&mut con)
        .unwrap();
    println!("MEMORY USAGE sale: {usage} B");
    // MEMORY USAGE counts jemalloc's size classes (Redis' allocator): within 5 % there; other
    // allocators (this Valkey build uses libc's) round differently.
    let memory: String = redis::cmd("INFO").arg("memory").query(&mut con).unwrap();
    let tolerance = if memory.contains("mem_allocator:jemalloc") {
        0.05
    } else {
        0.2
    };
    let ratio = usage as f64 / sale_bytes as f64;
    assert!(
        (ratio - 1.0).abs() < tolerance,
        "MEMORY USAGE {usage} should match the measured {sale_bytes} (ratio {ratio:.3})"
    );
}

#[test]
fn loads_the_v1_rdb_fixture() {
    let dir = std::env::temp_dir().join(format!("seckill-fixture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v1.rdb"),
        dir.join("dump.rdb"),
    )
    .unwrap();
    let server = Server::start_in(dir, &[]);
    let mut con = server.con();
    assert_sample(&mut con);
    assert_eq!(field(&mut con, &["LOCK.INFO", "fixture-lock"], "fence"), 2);
}

#[test]
fn acl_rules_apply_to_commands_and_keys() {
    let server = Server::start();
    let mut admin = server.con();
    ok(&mut admin, &["SECKILL.INIT", "sale:1", "5"]);
    ok(&mut admin, &["SECKILL.INIT", "other:1", "5"]);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("shop")
        .arg("on")
        .arg(">pw")
        .arg("~sale:*")
        .arg("+seckill.try")
        .arg("+seckill.info")
        .query(&mut admin)
        .unwrap();
    let mut shop = redis::Client::open(format!("redis://shop:pw@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(int(&mut shop, &["SECKILL.TRY", "sale:1", "alice"]), 4);
    assert_eq!(field(&mut shop, &["SECKILL.INFO", "sale:1"], "sold"), 1);
    for args in [
        &["SECKILL.INIT", "sale:2", "5"][..],
        &["SECKILL.TRY", "other:1", "alice"],
        &["SECKILL.BOUGHT", "sale:1", "alice"],
    ] {
        assert!(error(&mut shop, args).starts_with("NOPERM"), "{args:?}");
    }
    assert_eq!(field(&mut admin, &["SECKILL.INFO", "other:1"], "sold"), 0);

    // INIT declares its EVENTS stream as a key: a user confined to `sale:*` cannot point a
    // sale's events at a key outside it.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("ops")
        .arg("on")
        .arg(">pw")
        .arg("~sale:*")
        .arg("+@all")
        .query(&mut admin)
        .unwrap();
    let mut ops = redis::Client::open(format!("redis://ops:pw@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(
        error(
            &mut ops,
            &["SECKILL.INIT", "sale:3", "5", "EVENTS", "other:events"]
        )
        .starts_with("NOPERM")
    );
    ok(
        &mut ops,
        &["SECKILL.INIT", "sale:3", "5", "EVENTS", "sale:3:events"],
    );

    // Where the server has module ACL categories (Redis 7.2+, Valkey 8+), one rule grants the
    // public commands, and not the internal ones.
    let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut admin).unwrap();
    if !categories.iter().any(|c| c == "seckill") {
        println!("skipped: this server has no module ACL categories");
        return;
    }
    let mut in_category: Vec<String> = redis::cmd("ACL")
        .arg("CAT")
        .arg("seckill")
        .query(&mut admin)
        .unwrap();
    in_category.sort();
    let mut public: Vec<String> = seckill_harness::module_commands(&mut admin)
        .into_iter()
        .filter(|name| !name.contains("._"))
        .collect();
    public.sort();
    assert_eq!(in_category, public, "every public command, no internal one");
    assert_eq!(in_category.len(), 20, "{in_category:?}");
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("buyer")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@seckill")
        .query(&mut admin)
        .unwrap();
    let mut buyer = redis::Client::open(format!("redis://buyer:pw@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(int(&mut buyer, &["SECKILL.TRY", "sale:1", "bob"]), 3);
    assert!(error(&mut buyer, &["SET", "x", "1"]).starts_with("NOPERM"));
    assert!(error(&mut buyer, &["SECKILL._RESTORE", "x", "1", "p"]).starts_with("NOPERM"));
}

#[test]
fn writes_publish_keyspace_notifications() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut subscriber = server.con();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__keyevent@0__:*").unwrap();
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "s", "5"]);
    int(&mut con, &["SECKILL.TRY", "s", "alice"]);
    int(&mut con, &["SECKILL.TRY", "s", "alice"]); // a rejection changes nothing: no event
    let _: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg("l")
        .arg("t")
        .arg(1000)
        .query(&mut con)
        .unwrap();
    ok(&mut con, &["SECKILL.INIT", "t", "0"]);
    int(&mut con, &["SECKILL.LEND", "s", "x", "2", "TO", "t"]);
    int(&mut con, &["SECKILL.ABSORB", "t", "x", "2", "FROM", "s"]);
    let mut events = Vec::new();
    for _ in 0..6 {
        let msg = pubsub.get_message().unwrap();
        let key: String = msg.get_payload().unwrap();
        events.push((msg.get_channel_name().to_string(), key));
    }
    assert_eq!(
        events,
        vec![
            ("__keyevent@0__:seckill.init".to_string(), "s".to_string()),
            ("__keyevent@0__:seckill.try".to_string(), "s".to_string()),
            ("__keyevent@0__:lock.change".to_string(), "l".to_string()),
            ("__keyevent@0__:seckill.init".to_string(), "t".to_string()),
            ("__keyevent@0__:seckill.lend".to_string(), "s".to_string()),
            ("__keyevent@0__:seckill.absorb".to_string(), "t".to_string()),
        ]
    );
}

fn argv(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.to_vec()).collect()
}

fn internal_error(con: &mut redis::Connection, args: &[&[u8]]) -> String {
    seckill_harness::error_text(&call(con, args).unwrap_err())
}

/// A client allowed to write keys must not state a sale or a lock outright: the internal
/// commands answer only the replication link (every replication test here goes through them)
/// and AOF loading.
#[test]
fn internal_commands_only_from_replication_and_aof() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "s", "10", "LIMIT", "2"]);
    assert!(int(&mut con, &["LOCK.ACQUIRE", "l", "holder", "60000"]) > 0);
    let sale_before = info(&mut con, "s");
    let lock_state = |con: &mut redis::Connection| {
        let mut state = fields(con, &["LOCK.INFO", "l"]);
        state.retain(|(name, _)| name != "ttl");
        state
    };
    let lock_before = lock_state(&mut con);
    let now = seckill_harness::server_now_ms(&mut con).to_string();
    let forged: [&[&[u8]]; 5] = [
        &[
            b"SECKILL._REPLAY",
            b"s",
            now.as_bytes(),
            b"RESTOCK",
            b"1000",
        ],
        &[
            b"SECKILL._REPLAY",
            b"s",
            now.as_bytes(),
            b"TRY",
            b"mallory",
            b"2",
        ],
        &[b"SECKILL._RESTORE", b"s", b"1", b"garbage"],
        &[b"SECKILL._RESTORE", b"new", b"1", b""],
        &[b"LOCK._RESTORE", b"l", b"1", b"garbage"],
    ];
    for args in forged {
        let name = String::from_utf8_lossy(args[0]).to_string();
        let err = internal_error(&mut con, args);
        assert_eq!(
            err,
            format!(
                "ERR {name} is internal: only the replication link and AOF loading may call it"
            ),
        );
        // Arity and payload are not even looked at.
        assert!(internal_error(&mut con, &args[..1]).contains("wrong number of arguments"));
        assert!(internal_error(&mut con, &args[..2]).contains("is internal"));
    }
    // Nor inside MULTI or a script, which run the command on the client's behalf.
    let in_multi: redis::RedisResult<Vec<redis::Value>> = redis::pipe()
        .atomic()
        .cmd("SECKILL._REPLAY")
        .arg("s")
        .arg(&now)
        .arg("RESTOCK")
        .arg(5)
        .query(&mut con);
    let err = in_multi.unwrap_err();
    assert!(err.to_string().contains("is internal"), "{err:?}");
    let in_script: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
        .arg("return redis.call('LOCK._RESTORE', KEYS[1], '1', ARGV[1])")
        .arg(1)
        .arg("l")
        .arg("garbage")
        .query(&mut con);
    assert!(seckill_harness::error_text(&in_script.unwrap_err()).contains("is internal"));
    assert_eq!(info(&mut con, "s"), sale_before, "the sale is unchanged");
    assert_eq!(lock_state(&mut con), lock_before, "the lock is unchanged");
    assert_eq!(int(&mut con, &["EXISTS", "new"]), 0);

    // AOF loading runs them: a change as a master made it, and corrupt payloads refused one
    // by one (logged, key untouched) without stopping the load.
    server.crash_and_append_to_aof(&[
        argv(&[
            b"SECKILL._REPLAY",
            b"s",
            now.as_bytes(),
            b"TRY",
            b"bob",
            b"2",
        ]),
        argv(&[b"SECKILL._RESTORE", b"s", b"1", b"garbage"]),
        argv(&[b"SECKILL._RESTORE", b"bad", b"1", b"\x0a\x01\x05\x01a\x02"]),
        argv(&[b"SECKILL._RESTORE", b"bad", b"99", b"\x00\x01\x00"]),
        argv(&[b"LOCK._RESTORE", b"l", b"1", b"\x01"]),
        argv(&[
            b"SECKILL._REPLAY",
            b"s",
            now.as_bytes(),
            b"TRY",
            b"carol",
            b"1",
        ]),
    ]);
    let mut con = server.con();
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "s", "bob"]), 2);
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "s", "carol"]), 1);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "s"], "remaining"), 7);
    assert_eq!(int(&mut con, &["EXISTS", "bad"]), 0);
    assert_eq!(
        lock_state(&mut con),
        lock_before,
        "a corrupt lock payload changes nothing"
    );
    let log = server.log();
    let refused: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("key left unchanged"))
        .collect();
    assert_eq!(refused.len(), 4, "{log}");
    for (line, what) in refused.iter().zip([
        "s: ERR bad sale payload",
        "bad: ERR bad sale payload",
        "bad: ERR bad sale payload: unknown sale encoding version",
        "l: ERR bad lock payload",
    ]) {
        assert!(line.contains(what), "{line}");
    }
}

/// AOF rewrite writes a big sale in pieces of at most `seckill.aof-chunk-bytes`, so no
/// argument nears `proto-max-bulk-len` however many buyers; loading puts them together.
#[test]
fn aof_rewrite_writes_a_big_sale_in_bounded_chunks() {
    const CHUNK: usize = 1024;
    let mut server = Server::start_with(&[
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        "no",
        "--appendfsync",
        "always",
    ]);
    let mut con = server.con();
    ok(
        &mut con,
        &[
            "CONFIG",
            "SET",
            "seckill.aof-chunk-bytes",
            &CHUNK.to_string(),
        ],
    );
    ok(&mut con, &["SECKILL.INIT", "big", "100000", "LIMIT", "2"]);
    ok(&mut con, &["SECKILL.INIT", "small", "5"]);
    let mut pipe = redis::pipe();
    for user in 0..5_000 {
        pipe.cmd("SECKILL.TRY")
            .arg("big")
            .arg(format!("user:{user:010}"));
    }
    let _: Vec<i64> = pipe.query(&mut con).unwrap();
    let before = (
        seckill_harness::dump(&mut con, "big"),
        seckill_harness::dump(&mut con, "small"),
    );
    seckill_harness::rewrite_aof(&mut con);
    let aof = std::fs::read(server.aof_file("b")).unwrap();
    let text = String::from_utf8_lossy(&aof);
    let chunks = text.matches("\r\nCHUNK\r\n").count();
    assert!(chunks >= 50, "{chunks} chunks");
    let longest = text
        .split("\r\n")
        .filter_map(|line| line.strip_prefix('$'))
        .filter_map(|len| len.parse::<usize>().ok())
        .max()
        .unwrap();
    assert!(longest <= CHUNK, "an argument of {longest} bytes");
    server.kill_and_restart();
    let mut con = server.con();
    assert_eq!(
        (
            seckill_harness::dump(&mut con, "big"),
            seckill_harness::dump(&mut con, "small")
        ),
        before,
        "the sale comes back whole from its chunks"
    );
    assert_eq!(field(&mut con, &["SECKILL.INFO", "big"], "buyers"), 5_000);
    // A piece without its first one is refused and logged; loading goes on.
    let chunk = |index: &[u8]| -> Vec<Vec<u8>> {
        [
            &b"SECKILL._RESTORE"[..],
            b"stray",
            b"4",
            b"CHUNK",
            index,
            b"2",
            b"xx",
        ]
        .iter()
        .map(|a| a.to_vec())
        .collect()
    };
    let after: Vec<Vec<u8>> = [&b"SECKILL.TRY"[..], b"small", b"late"]
        .iter()
        .map(|a| a.to_vec())
        .collect();
    server.crash_and_append_to_aof(&[chunk(b"1"), after]);
    let mut con = server.con();
    assert_eq!(int(&mut con, &["EXISTS", "stray"]), 0);
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "small", "late"]), 1);
    assert!(server.log().contains("a chunk without its first one"));
}
