//! SECKILL.* against a real server: the contract, concurrency, persistence, replication
//! (tests/citizenship.rs: MULTI, Lua, WATCH, ACL, notifications, internal commands).

use redis::Value;
use seckill_harness::{
    Server, call, error, field, fields, info_counter, int, ok, replicate, wait_replicas,
};
use std::collections::HashSet;
use std::sync::{Arc, Barrier};

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
