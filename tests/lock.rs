//! LOCK.* against a real server: contract, exclusion, FIFO handoff, expiry, persistence.

use redis::Value;
use seckill_harness::{Server, error, info_counter, int, replicate, wait_replicas, wait_until};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// LOCK.INFO as (owner, ttl, fence, waiters).
fn lock_info(con: &mut redis::Connection, key: &str) -> (Option<String>, i64, i64, i64) {
    let reply: Vec<Value> = redis::cmd("LOCK.INFO").arg(key).query(con).unwrap();
    let names: Vec<String> = reply
        .iter()
        .step_by(2)
        .map(|v| redis::from_redis_value(v.clone()).unwrap())
        .collect();
    assert_eq!(names, ["owner", "ttl", "fence", "waiters"]);
    let owner = redis::from_redis_value::<Option<String>>(reply[1].clone()).unwrap();
    let number = |v: &Value| redis::from_redis_value::<i64>(v.clone()).unwrap();
    (
        owner,
        number(&reply[3]),
        number(&reply[5]),
        number(&reply[7]),
    )
}

fn acquire(
    con: &mut redis::Connection,
    key: &str,
    token: &str,
    ttl: u64,
    wait: Option<u64>,
) -> Option<i64> {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key).arg(token).arg(ttl);
    if let Some(wait) = wait {
        cmd.arg("WAIT").arg(wait);
    }
    cmd.query(con).unwrap()
}

/// These tests are about ownership and handoff, and name the fences they expect: they run on
/// the opt-in counter fences (`seckill.fences counter`). The default clock fences are tested
/// in `tests/failover.rs`.
const COUNTER_FENCES: &[&str] = &["fences", "counter"];

fn waiters(con: &mut redis::Connection, key: &str) -> i64 {
    lock_info(con, key).3
}

#[test]
fn acquire_release_extend_info_contract() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    assert_eq!(
        lock_info(&mut con, "l"),
        (None, -1, 0, 0),
        "a missing lock is free"
    );
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "l", "a"]), 0);
    assert_eq!(int(&mut con, &["LOCK.EXTEND", "l", "a", "100"]), 0);
    let exists: i64 = redis::cmd("EXISTS").arg("l").query(&mut con).unwrap();
    assert_eq!(exists, 0, "RELEASE and EXTEND create nothing");

    assert_eq!(acquire(&mut con, "l", "a", 60_000, None), Some(1));
    assert_eq!(
        acquire(&mut con, "l", "a", 90_000, None),
        Some(1),
        "retry keeps the fence"
    );
    let (owner, ttl, fence, queued) = lock_info(&mut con, "l");
    assert_eq!((owner.as_deref(), fence, queued), (Some("a"), 1, 0));
    assert!(ttl > 60_000 && ttl <= 90_000, "retry reset the TTL: {ttl}");
    assert_eq!(acquire(&mut con, "l", "b", 1_000, None), None);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "l", "b"]), 0);
    assert_eq!(int(&mut con, &["LOCK.EXTEND", "l", "b", "100"]), 0);
    assert_eq!(int(&mut con, &["LOCK.EXTEND", "l", "a", "300000"]), 1);
    assert!(lock_info(&mut con, "l").1 > 90_000);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "l", "a"]), 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "l", "a"]), 0);
    assert_eq!(lock_info(&mut con, "l"), (None, -1, 1, 0));
    assert_eq!(acquire(&mut con, "l", "b", 1_000, None), Some(2));
    let kind: String = redis::cmd("TYPE").arg("l").query(&mut con).unwrap();
    assert_eq!(kind, "seckill-L");

    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut con)
        .unwrap();
    for args in [
        &["LOCK.ACQUIRE", "str", "t", "10"][..],
        &["LOCK.RELEASE", "str", "t"],
        &["LOCK.EXTEND", "str", "t", "10"],
        &["LOCK.INFO", "str"],
    ] {
        assert!(error(&mut con, args).starts_with("WRONGTYPE"), "{args:?}");
    }
    let cases: [(&[&str], &str); 9] = [
        (
            &["LOCK.ACQUIRE", "l", "t"],
            "ERR wrong number of arguments for 'lock.acquire' command",
        ),
        (
            &["LOCK.ACQUIRE", "l", "", "10"],
            "ERR token must not be empty",
        ),
        (
            &["LOCK.ACQUIRE", "l", "t", "0"],
            "ERR ttl_ms must be an integer between 1 and 9223372036854775807",
        ),
        (
            &["LOCK.ACQUIRE", "l", "t", "ten"],
            "ERR ttl_ms must be an integer between 1 and 9223372036854775807",
        ),
        (
            &["LOCK.ACQUIRE", "l", "t", "10", "WAIT"],
            "ERR WAIT needs a value",
        ),
        (
            &["LOCK.ACQUIRE", "l", "t", "10", "WAIT", "-1"],
            "ERR WAIT timeout_ms must be an integer between 0 and 9223372036854775807",
        ),
        (
            &["LOCK.ACQUIRE", "l", "t", "10", "NX"],
            "ERR unknown option 'NX'",
        ),
        (
            &["LOCK.RELEASE", "l"],
            "ERR wrong number of arguments for 'lock.release' command",
        ),
        (
            &["LOCK.EXTEND", "l", "t", "0"],
            "ERR ttl_ms must be an integer between 1 and 9223372036854775807",
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(error(&mut con, args), expected, "{args:?}");
    }
    assert_eq!(lock_info(&mut con, "l").2, 2, "errors change nothing");
}

#[test]
fn hundreds_of_clients_are_mutually_excluded_and_fences_grow() {
    const CLIENTS: usize = 200;
    const ROUNDS: usize = 5;
    let server = Server::start_with(&["fences", "counter", "--maxclients", "1000"]);
    let fences = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (fences, barrier) = (fences.clone(), barrier.clone());
            let mut con = server.con();
            std::thread::spawn(move || {
                barrier.wait();
                let token = format!("client-{i}");
                for _ in 0..ROUNDS {
                    let fence = acquire(&mut con, "mutex", &token, 30_000, Some(0))
                        .expect("WAIT 0 waits until granted");
                    // An unprotected read-modify-write: lost updates would show any overlap.
                    let n: i64 = redis::cmd("GET")
                        .arg("counter")
                        .query::<Option<i64>>(&mut con)
                        .unwrap()
                        .unwrap_or(0);
                    let _: () = redis::cmd("SET")
                        .arg("counter")
                        .arg(n + 1)
                        .query(&mut con)
                        .unwrap();
                    fences.lock().unwrap().push(fence);
                    assert_eq!(int(&mut con, &["LOCK.RELEASE", "mutex", &token]), 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut con = server.con();
    let counter: i64 = redis::cmd("GET").arg("counter").query(&mut con).unwrap();
    assert_eq!(
        counter as usize,
        CLIENTS * ROUNDS,
        "no two holders overlapped"
    );
    let fences = fences.lock().unwrap();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences strictly increase in lock order"
    );
    assert_eq!(
        lock_info(&mut con, "mutex"),
        (None, -1, (CLIENTS * ROUNDS) as i64, 0)
    );
    assert!(
        info_counter(&mut con, "lock_waited") > 0,
        "the run had contention"
    );
}

#[test]
fn expired_holder_cannot_release_the_next_holders_lock() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    assert_eq!(acquire(&mut con, "l", "slow", 50, None), Some(1));
    wait_until(Duration::from_secs(5), "the TTL to run out", || {
        lock_info(&mut con, "l").1 == -1
    });
    assert_eq!(acquire(&mut con, "l", "next", 60_000, None), Some(2));
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "l", "slow"]), 0);
    assert_eq!(int(&mut con, &["LOCK.EXTEND", "l", "slow", "1000"]), 0);
    let (owner, _, fence, _) = lock_info(&mut con, "l");
    assert_eq!((owner.as_deref(), fence), (Some("next"), 2));
    assert_eq!(info_counter(&mut con, "lock_expired"), 1);
}

#[test]
fn three_waiters_are_served_in_fifo_order() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    assert_eq!(acquire(&mut con, "q", "holder", 60_000, None), Some(1));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for (n, name) in ["w1", "w2", "w3"].into_iter().enumerate() {
        let order = order.clone();
        let mut waiter = server.con();
        threads.push(std::thread::spawn(move || {
            let fence = acquire(&mut waiter, "q", name, 60_000, Some(10_000)).unwrap();
            order.lock().unwrap().push((name, fence));
            assert_eq!(int(&mut waiter, &["LOCK.RELEASE", "q", name]), 1);
        }));
        wait_until(Duration::from_secs(5), "waiter queued", || {
            waiters(&mut con, "q") == n as i64 + 1
        });
    }
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "q", "holder"]), 1);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        vec![("w1", 2), ("w2", 3), ("w3", 4)]
    );
    assert_eq!(lock_info(&mut con, "q"), (None, -1, 4, 0));
}

#[test]
fn expiry_hands_over_on_a_timer_not_a_poll() {
    // hz 1: anything driven by serverCron instead of a timer would be late by up to a second.
    let server = Server::start_with(&["fences", "counter", "--hz", "1"]);
    let mut con = server.con();
    let mut waiter = server.con();
    const TTL: u64 = 300;
    let start = Instant::now();
    assert_eq!(acquire(&mut con, "h", "stalled", TTL, None), Some(1));
    let fence = acquire(&mut waiter, "h", "next", 60_000, Some(10_000));
    let waited = start.elapsed();
    assert_eq!(fence, Some(2));
    println!(
        "waiter woke {} ms after a {TTL} ms TTL started",
        waited.as_millis()
    );
    assert!(
        // The server clock has millisecond resolution: allow for truncation on both ends.
        waited >= Duration::from_millis(TTL - 2),
        "not before expiry: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(TTL + 250),
        "woken at expiry, not by a poll: {waited:?}"
    );
    assert_eq!(info_counter(&mut con, "lock_expired"), 1);
}

#[test]
fn wait_times_out_with_nil_and_leaves_the_queue() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    let mut waiter = server.con();
    acquire(&mut con, "t", "holder", 60_000, None);
    let start = Instant::now();
    assert_eq!(
        acquire(&mut waiter, "t", "impatient", 1_000, Some(100)),
        None
    );
    assert!(start.elapsed() >= Duration::from_millis(100));
    assert_eq!(waiters(&mut con, "t"), 0);
    assert_eq!(info_counter(&mut con, "lock_timed_out"), 1);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "t", "holder"]), 1);
    assert_eq!(
        lock_info(&mut con, "t"),
        (None, -1, 1, 0),
        "the timed-out waiter got nothing"
    );
    // The connection still works after the timeout.
    assert_eq!(acquire(&mut waiter, "t", "impatient", 1_000, None), Some(2));
}

fn send(stream: &mut TcpStream, args: &[&str]) {
    let mut out = format!("*{}\r\n", args.len());
    for arg in args {
        out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(out.as_bytes()).unwrap();
}

fn read_reply(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n") {
        stream.read_exact(&mut byte).unwrap();
        buf.push(byte[0]);
    }
    String::from_utf8(buf).unwrap()
}

#[test]
fn a_thousand_waiters_half_of_them_disconnecting() {
    const WAITERS: usize = 1_000;
    let server = Server::start_with(&["fences", "counter", "--maxclients", "4000"]);
    let mut con = server.con();
    acquire(&mut con, "big", "holder", 60_000, None);
    let mut streams: Vec<TcpStream> = (0..WAITERS)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            send(
                &mut s,
                &[
                    "LOCK.ACQUIRE",
                    "big",
                    &format!("w{i}"),
                    "60000",
                    "WAIT",
                    "0",
                ],
            );
            s
        })
        .collect();
    wait_until(Duration::from_secs(20), "all waiters queued", || {
        waiters(&mut con, "big") == WAITERS as i64
    });
    // Even-numbered waiters hang up.
    let mut kept = Vec::new();
    for (i, s) in streams.drain(..).enumerate() {
        if i % 2 == 1 {
            kept.push(s);
        }
    }
    wait_until(
        Duration::from_secs(20),
        "disconnected waiters dropped",
        || waiters(&mut con, "big") == (WAITERS / 2) as i64,
    );
    assert_eq!(
        info_counter(&mut con, "lock_waiting_clients"),
        (WAITERS / 2) as i64
    );
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "big", "holder"]), 1);
    // The first waiter still connected (w1) is granted, never a gone one.
    let mut first = kept.remove(0);
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(read_reply(&mut first), ":2\r\n");
    let (owner, _, fence, queued) = lock_info(&mut con, "big");
    assert_eq!(
        (owner.as_deref(), fence, queued),
        (Some("w1"), 2, (WAITERS / 2 - 1) as i64)
    );
    send(&mut first, &["LOCK.RELEASE", "big", "w1"]);
    assert_eq!(read_reply(&mut first), ":1\r\n");
    let mut second = kept.remove(0);
    second
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(read_reply(&mut second), ":3\r\n", "w3 is next in line");
}

#[test]
fn deleting_a_lock_answers_its_waiters_with_nil() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    acquire(&mut con, "d", "holder", 60_000, None);
    let mut waiter = server.con();
    let thread = std::thread::spawn(move || acquire(&mut waiter, "d", "w", 1_000, Some(0)));
    wait_until(Duration::from_secs(5), "waiter queued", || {
        waiters(&mut con, "d") == 1
    });
    let _: i64 = redis::cmd("DEL").arg("d").query(&mut con).unwrap();
    assert_eq!(thread.join().unwrap(), None);
    assert_eq!(info_counter(&mut con, "lock_waiting_clients"), 0);
    assert_eq!(
        lock_info(&mut con, "d"),
        (None, -1, 0, 0),
        "DEL resets the fence"
    );
}

#[test]
fn flushing_the_database_answers_waiters_with_nil() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut con).unwrap();
    acquire(&mut con, "d", "holder", 60_000, None);
    let mut waiter = server.con();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut waiter).unwrap();
    let thread = std::thread::spawn(move || acquire(&mut waiter, "d", "w", 1_000, Some(0)));
    wait_until(Duration::from_secs(5), "waiter queued", || {
        waiters(&mut con, "d") == 1
    });
    // A flush of another database leaves the waiter alone.
    let mut other = server.con();
    let _: () = redis::cmd("FLUSHDB").query(&mut other).unwrap();
    assert_eq!(waiters(&mut con, "d"), 1);
    assert_eq!(info_counter(&mut con, "lock_waiting_clients"), 1);
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    wait_until(
        Duration::from_secs(5),
        "the flushed lock's waiter answered",
        || info_counter(&mut con, "lock_waiting_clients") == 0,
    );
    assert_eq!(thread.join().unwrap(), None);
}

#[test]
fn wait_does_not_block_in_multi_or_lua() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    acquire(&mut con, "m", "holder", 60_000, None);
    let replies: (Option<i64>, Option<i64>) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("m")
        .arg("x")
        .arg(1000)
        .arg("WAIT")
        .arg(0)
        .cmd("LOCK.ACQUIRE")
        .arg("free")
        .arg("x")
        .arg(1000)
        .arg("WAIT")
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(replies, (None, Some(1)));
    let script = "return redis.call('LOCK.ACQUIRE', KEYS[1], 'y', 1000, 'WAIT', 0)";
    let reply: Option<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("m")
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, None);
    assert_eq!(waiters(&mut con, "m"), 0);
}

#[test]
fn fences_keep_growing_across_restart_aof_dump_and_copy() {
    let mut server = Server::start_with(&[
        "fences",
        "counter",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]);
    let mut con = server.con();
    for i in 0..3 {
        let token = format!("t{i}");
        acquire(&mut con, "f", &token, 60_000, None);
        int(&mut con, &["LOCK.RELEASE", "f", &token]);
    }
    acquire(&mut con, "f", "held", 60_000, None);
    server.kill_and_restart();
    let mut con = server.con();
    let (owner, ttl, fence, _) = lock_info(&mut con, "f");
    assert_eq!(
        (owner.as_deref(), fence),
        (Some("held"), 4),
        "AOF replay keeps owner and fence"
    );
    assert!(ttl > 0 && ttl <= 60_000);
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "f", "held"]), 1);

    seckill_harness::rewrite_aof(&mut con);
    server.kill_and_restart();
    let mut con = server.con();
    assert_eq!(
        acquire(&mut con, "f", "after-rewrite", 60_000, None),
        Some(5)
    );
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    assert_eq!(lock_info(&mut con, "f").2, 5, "RDB round trip");

    let dump: Vec<u8> = redis::cmd("DUMP").arg("f").query(&mut con).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("g")
        .arg(0)
        .arg(&dump)
        .query(&mut con)
        .unwrap();
    assert_eq!(lock_info(&mut con, "g").2, 5);
    let _: i64 = redis::cmd("COPY")
        .arg("f")
        .arg("h")
        .query(&mut con)
        .unwrap();
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "h", "after-rewrite"]), 1);
    assert_eq!(acquire(&mut con, "h", "x", 1_000, None), Some(6));
    assert_eq!(
        lock_info(&mut con, "f").0.as_deref(),
        Some("after-rewrite"),
        "a copy is independent"
    );
}

#[test]
fn replica_mirrors_state_and_continues_fences_after_promotion() {
    let master = Server::start_with(COUNTER_FENCES);
    let replica = Server::start_with(COUNTER_FENCES);
    replicate(&replica, &master);
    let mut con = master.con();
    let mut waiter = master.con();
    acquire(&mut con, "r", "a", 200, None);
    // A handoff at expiry on the master reaches the replica as state, not as a clock decision.
    let handed = std::thread::spawn(move || acquire(&mut waiter, "r", "b", 60_000, Some(5_000)));
    assert_eq!(handed.join().unwrap(), Some(2));
    int(&mut con, &["LOCK.EXTEND", "r", "b", "120000"]);
    wait_replicas(&mut con, 1);
    let mut rcon = replica.con();
    let digest = |c: &mut redis::Connection| -> Vec<String> {
        redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg("r")
            .query(c)
            .unwrap()
    };
    assert_eq!(
        digest(&mut rcon),
        digest(&mut con),
        "same owner, absolute expiry and fence"
    );
    let (owner, _, fence, _) = lock_info(&mut rcon, "r");
    assert_eq!((owner.as_deref(), fence), (Some("b"), 2));

    seckill_harness::promote(&mut rcon);
    assert_eq!(
        acquire(&mut rcon, "r", "b", 1_000, None),
        Some(2),
        "the promoted replica knows b"
    );
    assert_eq!(int(&mut rcon, &["LOCK.RELEASE", "r", "b"]), 1);
    assert_eq!(acquire(&mut rcon, "r", "c", 1_000, None), Some(3));
}

#[test]
fn lock_counters() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    acquire(&mut con, "c", "a", 60_000, None);
    acquire(&mut con, "c", "b", 60_000, None);
    assert_eq!(info_counter(&mut con, "locks"), 1);
    assert_eq!(info_counter(&mut con, "lock_acquired"), 1);
    assert_eq!(info_counter(&mut con, "lock_contended"), 1);
    assert_eq!(info_counter(&mut con, "lock_waited"), 0);
}

#[test]
fn huge_ttl_and_wait_values_do_not_hang_the_server() {
    // A TTL near i64::MAX once armed a handoff timer that overflowed Redis' clock and fired
    // forever, freezing the server; found by the argv fuzzer in tests/reliability.rs.
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    // A frozen server must fail this test, not hang it.
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let max = "9223372036854775807";
    assert_eq!(int(&mut con, &["LOCK.ACQUIRE", "h", "holder", max]), 1);
    let mut waiter = server.con();
    let blocked = std::thread::spawn(move || acquire(&mut waiter, "h", "w", 1_000, Some(150)));
    wait_until(Duration::from_secs(5), "waiter queued", || {
        waiters(&mut con, "h") == 1
    });
    assert_eq!(
        blocked.join().unwrap(),
        None,
        "the waiter times out normally"
    );
    let mut forever = server.con();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut forever).unwrap();
    let blocked = std::thread::spawn(move || {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg("h").arg("w2").arg(1_000).arg("WAIT").arg(max);
        cmd.query::<Option<i64>>(&mut forever).unwrap()
    });
    wait_until(Duration::from_secs(5), "second waiter queued", || {
        waiters(&mut con, "h") == 1
    });
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG", "the server still answers");
    assert!(
        lock_info(&mut con, "h").1 > 1_000_000_000,
        "the TTL is kept"
    );
    let _: i64 = redis::cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(id)
        .query(&mut con)
        .unwrap();
    assert_eq!(blocked.join().unwrap(), None);
}

#[test]
fn a_shorter_ttl_after_a_longer_one_is_handed_over_at_its_own_deadline() {
    // The sequence of the issue: B's wait armed a timer for A's 10 s TTL; C then holds the lock
    // for 200 ms, and D must get it when C's TTL runs out, not when A's old timer fires.
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    let mut waiter = server.con();
    assert_eq!(acquire(&mut con, "lk", "A", 10_000, None), Some(1));
    let b = std::thread::spawn(move || acquire(&mut waiter, "lk", "B", 10_000, Some(5_000)));
    wait_until(Duration::from_secs(5), "B queued", || {
        waiters(&mut con, "lk") == 1
    });
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "lk", "A"]), 1);
    assert_eq!(b.join().unwrap(), Some(2));
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "lk", "B"]), 1);
    let start = Instant::now();
    assert_eq!(acquire(&mut con, "lk", "C", 200, None), Some(3));
    let mut d = server.con();
    assert_eq!(acquire(&mut d, "lk", "D", 10_000, Some(3_000)), Some(4));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(198) && waited < Duration::from_millis(1_500),
        "D handed the lock at C's deadline, not A's: {waited:?}"
    );
    // The key keeps one timer (for D's 10 s TTL only while someone waits): none now.
    assert_eq!(info_counter(&mut con, "timers"), 0);
}

#[test]
fn churn_keeps_at_most_one_timer_per_key() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    let keys = ["c0", "c1", "c2"];
    let mut blocked = Vec::new();
    for round in 0..30u64 {
        for key in keys {
            let holder = format!("h{round}");
            acquire(&mut con, key, &holder, 60_000 - round * 1_000, None);
            let mut waiter = server.con();
            let key = key.to_string();
            blocked.push(std::thread::spawn(move || {
                acquire(&mut waiter, &key, "w", 1_000, Some(50))
            }));
        }
        let timers = info_counter(&mut con, "timers");
        assert!(
            timers <= keys.len() as i64,
            "round {round}: {timers} timers"
        );
        for key in keys {
            let holder = format!("h{round}");
            int(&mut con, &["LOCK.RELEASE", key, &holder]);
            let _ = int(&mut con, &["LOCK.RELEASE", key, "w"]);
        }
    }
    for waiter in blocked {
        waiter.join().unwrap();
    }
    wait_until(Duration::from_secs(5), "timers stopped", || {
        info_counter(&mut con, "timers") == 0
    });
}

fn select(con: &mut redis::Connection, db: i64) {
    let _: () = redis::cmd("SELECT").arg(db).query(con).unwrap();
}

/// SWAPDB moves a lock with its waiters and handoff timer: the waiter gets the lock in the
/// database the key went to, at the holder's deadline.
#[test]
fn swapdb_moves_a_lock_with_its_waiters() {
    let server = Server::start_with(COUNTER_FENCES);
    let mut con = server.con();
    assert_eq!(acquire(&mut con, "l", "holder", 300, None), Some(1));
    let mut waiter = server.con();
    let waiting =
        std::thread::spawn(move || acquire(&mut waiter, "l", "waiter", 60_000, Some(10_000)));
    wait_until(Duration::from_secs(10), "the waiter blocks", || {
        info_counter(&mut con, "lock_waiting_clients") == 1
    });
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut con).unwrap();
    assert_eq!(int(&mut con, &["EXISTS", "l"]), 0, "the lock left db 0");
    assert_eq!(
        waiting.join().unwrap(),
        Some(2),
        "granted at the holder's deadline"
    );
    select(&mut con, 1);
    assert_eq!(
        redis::cmd("LOCK.INFO")
            .arg("l")
            .query::<Vec<Value>>(&mut con)
            .unwrap()[1],
        Value::BulkString(b"waiter".to_vec())
    );
}
