//! Fences any client reads exactly (docs/fencing.md, docs/any-client.md): the default clock
//! fences are below 2^53, so a JavaScript number, Lua's `tonumber` and a JSON document hold
//! them without rounding, and they still only grow, across DEBUG RELOAD and a replica's
//! promotion. Module 0.7 shifted the clock by 20 bits (about 1.9e18): three grants in one
//! millisecond read as one number in all of them. The same through ioredis:
//! `examples/node/fences.mjs`, run by tests/any_client.rs.

use seckill::logic::lock::EXACT_IN_DOUBLES;
use seckill_harness::{Server, int, promote, replicate, wait_replicas};

const GRANTS: usize = 3_000;

/// Grants `key` to `GRANTS` tokens in turn, in one pipeline: each ACQUIRE's fence.
fn pipelined_grants(con: &mut redis::Connection, key: &str) -> Vec<u64> {
    let mut pipe = redis::pipe();
    for n in 0..GRANTS {
        let token = format!("t{n}");
        pipe.cmd("LOCK.ACQUIRE").arg(key).arg(&token).arg(60_000);
        pipe.cmd("LOCK.RELEASE").arg(key).arg(&token).ignore();
    }
    pipe.query(con).unwrap()
}

fn acquire(con: &mut redis::Connection, key: &str, token: &str) -> u64 {
    int(con, &["LOCK.ACQUIRE", key, token, "60000"]) as u64
}

/// Below 2^53 and larger than `before` as an IEEE double, as JavaScript compares them.
fn exact_and_larger(fence: u64, before: u64) -> bool {
    fence < EXACT_IN_DOUBLES && (fence as f64) > (before as f64)
}

#[test]
fn three_thousand_grants_in_one_pipeline_are_exact_and_increasing_as_doubles() {
    let server = Server::start();
    let mut con = server.con();
    let fences = pipelined_grants(&mut con, "lock:js");
    assert_eq!(fences.len(), GRANTS);
    assert!(fences[0] < EXACT_IN_DOUBLES, "{}", fences[0]);
    for pair in fences.windows(2) {
        assert!(exact_and_larger(pair[1], pair[0]), "{pair:?}");
    }
}

#[test]
fn lua_tonumber_orders_consecutive_fences() {
    let server = Server::start();
    let mut con = server.con();
    let fences = pipelined_grants(&mut con, "lock:lua");
    // A script fencing a write the usual way: tonumber(fence) > tonumber(stored).
    let script = "local bad = 0 \
                  for i = 2, #ARGV do \
                    if not (tonumber(ARGV[i]) > tonumber(ARGV[i - 1])) then bad = bad + 1 end \
                  end \
                  return bad";
    let not_larger: i64 = redis::cmd("EVAL")
        .arg(script)
        .arg(0)
        .arg(&fences)
        .query(&mut con)
        .unwrap();
    assert_eq!(not_larger, 0, "pairs Lua did not see growing");
}

#[test]
fn fences_stay_exact_and_grow_across_debug_reload_and_promotion() {
    let master = Server::start();
    let replica = Server::start();
    replicate(&replica, &master);
    let mut con = master.con();
    let first = acquire(&mut con, "lock:f", "a");
    assert!(first < EXACT_IN_DOUBLES);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("lock:f")
        .arg("a")
        .query(&mut con)
        .unwrap();
    let reloaded = acquire(&mut con, "lock:f", "b");
    assert!(exact_and_larger(reloaded, first), "{first} then {reloaded}");
    wait_replicas(&mut con, 1);
    let mut rcon = replica.con();
    promote(&mut rcon);
    // The promoted replica holds b's grant; released there, its next fence is larger.
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("lock:f")
        .arg("b")
        .query(&mut rcon)
        .unwrap();
    let promoted = acquire(&mut rcon, "lock:f", "c");
    assert!(
        exact_and_larger(promoted, reloaded),
        "{reloaded} then {promoted}"
    );
}
