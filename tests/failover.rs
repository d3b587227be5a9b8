//! Fences across an asynchronous failover that loses writes: the replica is frozen (SIGSTOP)
//! and its link cut so it misses a grant, the master dies (SIGKILL), the replica is resumed and promoted.

mod common;

use common::{Server, field, replicate, wait_replicas};

fn acquire(con: &mut redis::Connection, key: &str, token: &str) -> i64 {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(token)
        .arg(60_000)
        .query::<Option<i64>>(con)
        .unwrap()
        .expect("a free lock")
}

fn signal(server: &Server, sig: i32) {
    let pid = server.pid().expect("a running server") as i32;
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// Grants on the master, one of which the frozen replica never gets, then a failover; returns
/// (the lost grant's fence, the first fence the promoted replica grants).
fn lose_a_grant_and_fail_over(module_args: &[&str]) -> (i64, i64) {
    let mut master = Server::start_with(module_args);
    let replica = Server::start_with(module_args);
    replicate(&replica, &master);
    let mut con = master.con();
    let first = acquire(&mut con, "lk", "a");
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("lk")
        .arg("a")
        .query(&mut con)
        .unwrap();
    wait_replicas(&master, 1);
    // Freeze the replica and cut its link, so what follows stays on the master (data already
    // in the socket would otherwise reach the replica when it resumes).
    signal(&replica, libc::SIGSTOP);
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut con)
        .unwrap();
    // Acknowledged to its client, never shipped.
    let lost = acquire(&mut con, "lk", "b");
    assert!(lost > first);
    master.kill();
    signal(&replica, libc::SIGCONT);
    let mut promoted = replica.con();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut promoted)
        .unwrap();
    assert_eq!(
        field(&mut promoted, &["LOCK.INFO", "lk"], "fence"),
        first,
        "the promoted replica never saw the lost grant"
    );
    let next = acquire(&mut promoted, "lk", "c");
    (lost, next)
}

#[test]
fn clock_fences_never_go_back_across_a_failover_that_loses_a_grant() {
    let (lost, next) = lose_a_grant_and_fail_over(&[]);
    println!("lost grant fence {lost}, first fence after promotion {next}");
    assert!(next > lost, "fence went back: {next} <= {lost}");
}

#[test]
fn counter_fences_repeat_the_lost_grant_which_is_why_they_are_opt_in() {
    // The hole the default closes: with the plain counter the promoted replica hands out the
    // lost grant's fence again, and a downstream store cannot tell the two holders apart.
    let (lost, next) = lose_a_grant_and_fail_over(&["fences", "counter"]);
    assert_eq!(next, lost, "the counter repeats the lost fence");
}

#[test]
fn fences_configured_at_load_and_at_run_time() {
    let server = Server::start();
    let mut con = server.con();
    let mode: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("seckill.fences")
        .query(&mut con)
        .unwrap();
    assert_eq!(mode, ["seckill.fences", "clock"]);
    let (secs, _): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let clock = acquire(&mut con, "k", "a");
    // max(last + 1, now_ms << 20): within a few seconds of the server clock.
    assert!((clock >> 20) / 1000 - secs <= 2, "{clock}");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("seckill.fences")
        .arg("counter")
        .query(&mut con)
        .unwrap();
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg("k")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(acquire(&mut con, "k", "b"), clock + 1, "fences only grow");
    assert!(
        common::error(&mut con, &["CONFIG", "SET", "seckill.fences", "bogus"])
            .contains("clock, counter")
    );
}
