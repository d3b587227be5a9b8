//! Fences across an asynchronous failover that loses writes: the replica is frozen (SIGSTOP)
//! and its link cut so it misses a grant, the master dies (SIGKILL), the replica is resumed and promoted.

use seckill::logic::lock::CLOCK_SHIFT;
use seckill_harness::{Server, field, replicate, wait_replicas};
use std::time::{Duration, Instant};

fn acquire(con: &mut redis::Connection, key: &str, token: &str) -> i64 {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(token)
        .arg(60_000)
        .query::<Option<i64>>(con)
        .unwrap()
        .expect("a free lock")
}

/// How the replica becomes the master once the old one is dead.
#[derive(Clone, Copy, Debug)]
enum Promotion {
    /// An operator's `REPLICAOF NO ONE`.
    Manual,
    /// A Sentinel (quorum 1) notices the dead master and promotes the replica.
    Sentinel,
    /// A cluster replica told `CLUSTER FAILOVER FORCE`, elected by the other two masters.
    ClusterForce,
}

/// A Sentinel process watching one master as `m`; killed when dropped.
struct Sentinel {
    child: std::process::Child,
    port: u16,
}

impl Sentinel {
    fn watch(master: &Server) -> Sentinel {
        let port = seckill_harness::free_port();
        let config = master.dir.join(format!("sentinel-{port}.conf"));
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel-{port}.log\n\
                 sentinel monitor m 127.0.0.1 {master} 1\n\
                 sentinel down-after-milliseconds m 300\n\
                 sentinel failover-timeout m 5000\n",
                dir = master.dir.display(),
                master = master.port,
            ),
        )
        .unwrap();
        let child = std::process::Command::new(seckill_harness::server_binary())
            .arg(&config)
            .arg("--sentinel")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start a sentinel");
        let sentinel = Sentinel { child, port };
        // It learns of replicas from the master's INFO: one it has not seen, it cannot promote.
        seckill_harness::wait_until(
            Duration::from_secs(30),
            "sentinel knows the replica",
            || sentinel.known_replicas() == 1,
        );
        sentinel
    }

    fn known_replicas(&self) -> usize {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .and_then(|client| client.get_connection())
            .and_then(|mut con| {
                redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg("m")
                    .query::<Vec<redis::Value>>(&mut con)
            })
            .map_or(0, |replicas| replicas.len())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server's ROLE, or "" while it cannot answer (a Sentinel promoting it kills its client
/// connections, this one included).
fn role(server: &Server) -> String {
    redis::Client::open(server.url())
        .and_then(|client| client.get_connection())
        .and_then(|mut con| redis::cmd("ROLE").query::<Vec<redis::Value>>(&mut con))
        .ok()
        .and_then(|role| role.first().cloned())
        .and_then(|first| redis::from_redis_value(first).ok())
        .unwrap_or_default()
}

/// A lock key that `node` serves (in a cluster, one of its slots).
fn key_served_by(node: &Server) -> String {
    let mut con = node.con();
    (0..)
        .map(|i| format!("lk:{i}"))
        .find(|key| {
            redis::cmd("LOCK.INFO")
                .arg(key)
                .query::<redis::Value>(&mut con)
                .is_ok()
        })
        .unwrap()
}

/// Grants on the master, one of which the frozen replica never gets, then a failover; returns
/// (the lost grant's fence, the first fence the promoted replica grants).
fn lose_a_grant_and_fail_over(promotion: Promotion, module_args: &[&str]) -> (i64, i64) {
    let mut args = module_args.to_vec();
    let mut others = Vec::new();
    let (mut master, replica) = match promotion {
        Promotion::Manual | Promotion::Sentinel => {
            (Server::start_with(&args), Server::start_with(&args))
        }
        Promotion::ClusterForce => {
            args.extend(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]);
            let mut nodes = seckill_harness::start_cluster(3, module_args);
            let replica = Server::start_with(&args);
            let master = nodes.remove(0);
            others = nodes;
            let mut con = replica.con();
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(master.port)
                .query(&mut con)
                .unwrap();
            let master_id = seckill_harness::cluster_node_id(&master);
            seckill_harness::wait_until(Duration::from_secs(30), "replica assigned", || {
                redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&master_id)
                    .query::<()>(&mut con)
                    .is_ok()
            });
            (master, replica)
        }
    };
    if !matches!(promotion, Promotion::ClusterForce) {
        replicate(&replica, &master);
    }
    seckill_harness::wait_until(Duration::from_secs(30), "replica in sync", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.con())
            .unwrap();
        info.contains("master_link_status:up")
    });
    let _sentinel = matches!(promotion, Promotion::Sentinel).then(|| Sentinel::watch(&master));
    let key = key_served_by(&master);
    let mut con = master.con();
    let first = acquire(&mut con, &key, "a");
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg("a")
        .query(&mut con)
        .unwrap();
    wait_replicas(&mut con, 1);
    // What follows stays on the master.
    seckill_harness::isolate_replica(&replica, &mut con);
    // Acknowledged to its client, never shipped.
    let lost = acquire(&mut con, &key, "b");
    assert!(lost > first);
    master.kill();
    replica.signal(libc::SIGCONT);
    match promotion {
        Promotion::Manual => {
            seckill_harness::promote(&mut replica.con());
        }
        Promotion::Sentinel => {}
        Promotion::ClusterForce => {
            let _: () = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .arg("FORCE")
                .query(&mut replica.con())
                .unwrap();
        }
    }
    let mut asked = Instant::now();
    seckill_harness::wait_until(Duration::from_secs(60), "replica promoted", || {
        // A manual failover gives up after 5 s (a vote that came too late on a loaded
        // machine): an operator asks again, and so does this.
        if matches!(promotion, Promotion::ClusterForce) && asked.elapsed() > Duration::from_secs(10)
        {
            asked = Instant::now();
            let _ = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .arg("FORCE")
                .query::<()>(&mut replica.con());
        }
        role(&replica) == "master"
    });
    let mut promoted = replica.con();
    if matches!(promotion, Promotion::ClusterForce) {
        // Serving the slot again once the other masters know the new owner.
        seckill_harness::wait_until(Duration::from_secs(30), "slot served", || {
            redis::cmd("LOCK.INFO")
                .arg(&key)
                .query::<redis::Value>(&mut promoted)
                .is_ok()
        });
    }
    assert_eq!(
        field(&mut promoted, &["LOCK.INFO", &key], "fence"),
        first,
        "the promoted replica never saw the lost grant ({promotion:?})"
    );
    let next = acquire(&mut promoted, &key, "c");
    println!("{promotion:?}: lost grant fence {lost}, first fence after promotion {next}");
    drop(others);
    (lost, next)
}

#[test]
fn clock_fences_never_go_back_across_a_failover_that_loses_a_grant() {
    let (lost, next) = lose_a_grant_and_fail_over(Promotion::Manual, &[]);
    assert!(next > lost, "fence went back: {next} <= {lost}");
    // Promoted by hand right after the kill, at times within the lost grant's millisecond (2
    // of 17 runs on Valkey 8.1): the promoted server's fences start at the next one.
    let millisecond = |fence: i64| fence >> 11;
    assert!(
        millisecond(next) > millisecond(lost),
        "first fence after promotion {next} from the lost grant's millisecond"
    );
}

#[test]
fn clock_fences_never_go_back_across_a_sentinel_failover() {
    let (lost, next) = lose_a_grant_and_fail_over(Promotion::Sentinel, &[]);
    assert!(next > lost, "fence went back: {next} <= {lost}");
}

#[test]
fn clock_fences_never_go_back_across_cluster_failover_force() {
    let (lost, next) = lose_a_grant_and_fail_over(Promotion::ClusterForce, &[]);
    assert!(next > lost, "fence went back: {next} <= {lost}");
}

#[test]
fn counter_fences_repeat_the_lost_grant_which_is_why_they_are_opt_in() {
    // The hole the default closes: with the plain counter the promoted replica hands out the
    // lost grant's fence again, and a downstream store cannot tell the two holders apart.
    for promotion in [
        Promotion::Manual,
        Promotion::Sentinel,
        Promotion::ClusterForce,
    ] {
        let (lost, next) = lose_a_grant_and_fail_over(promotion, &["fences", "counter"]);
        assert_eq!(
            next, lost,
            "the counter repeats the lost fence ({promotion:?})"
        );
    }
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
    // max(last + 1, now_ms << CLOCK_SHIFT): within a few seconds of the server clock.
    assert!((clock >> CLOCK_SHIFT) / 1000 - secs <= 2, "{clock}");
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
        seckill_harness::error(&mut con, &["CONFIG", "SET", "seckill.fences", "bogus"])
            .contains("clock, counter")
    );
}

/// A purchase and `WAIT 1 ms` in one pipeline: one round trip, and the second reply says
/// whether the purchase reached the replica.
fn buy_and_wait(con: &mut redis::Connection, user: &str, timeout_ms: u64) -> (i64, i64) {
    redis::pipe()
        .cmd("SECKILL.TRY")
        .arg("s")
        .arg(user)
        .cmd("WAIT")
        .arg(1)
        .arg(timeout_ms)
        .query(con)
        .unwrap()
}

#[test]
fn wait_says_which_acknowledgements_survive_a_failover() {
    let mut master = Server::start();
    let replica = Server::start();
    replicate(&replica, &master);
    let mut con = master.con();
    seckill_harness::ok(&mut con, &["SECKILL.INIT", "s", "10"]);
    assert_eq!(
        buy_and_wait(&mut con, "kept", 5_000),
        (9, 1),
        "bought, replicated"
    );
    seckill_harness::isolate_replica(&replica, &mut con);
    assert_eq!(
        buy_and_wait(&mut con, "maybe-lost", 100),
        (8, 0),
        "bought, not replicated"
    );
    master.kill();
    replica.signal(libc::SIGCONT);
    let mut promoted = replica.con();
    seckill_harness::promote(&mut promoted);
    assert_eq!(
        seckill_harness::int(&mut promoted, &["SECKILL.BOUGHT", "s", "kept"]),
        1
    );
    // The answer said "not replicated", and so it is: lost with the old master.
    assert_eq!(
        seckill_harness::int(&mut promoted, &["SECKILL.BOUGHT", "s", "maybe-lost"]),
        0
    );
    assert_eq!(field(&mut promoted, &["SECKILL.INFO", "s"], "remaining"), 9);
}

fn has_command(con: &mut redis::Connection, name: &str) -> bool {
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(con)
        .unwrap();
    !matches!(info.first(), None | Some(redis::Value::Nil))
}

#[test]
fn waitaof_says_a_purchase_reached_the_disk() {
    // `appendfsync everysec`: a write is on disk only once the next fsync ran, which is what
    // WAITAOF waits for.
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let mut con = server.con();
    if !has_command(&mut con, "WAITAOF") {
        println!("skipped: this server has no WAITAOF (Redis 7.2+, Valkey 8+)");
        return;
    }
    seckill_harness::ok(&mut con, &["SECKILL.INIT", "s", "10"]);
    let (remaining, (local, replicas)): (i64, (i64, i64)) = redis::pipe()
        .cmd("SECKILL.TRY")
        .arg("s")
        .arg("alice")
        .cmd("WAITAOF")
        .arg(1)
        .arg(0)
        .arg(5_000)
        .query(&mut con)
        .unwrap();
    assert_eq!((remaining, local, replicas), (9, 1, 0), "fsynced locally");
    server.kill_and_restart();
    let mut con = server.con();
    assert_eq!(
        seckill_harness::int(&mut con, &["SECKILL.BOUGHT", "s", "alice"]),
        1
    );
}

/// A client whose purchase's answer was lost sends it again with its attempt id, on a new
/// connection, and waits for a replica there. The repeat changes nothing, but WAIT counts the
/// writes of its own connection: the module propagates a marker for the repeat, so that the
/// WAIT covers the purchase it repeats. (Without it the new connection has written nothing,
/// and WAIT answers at once that the frozen replica has it.)
#[test]
fn a_purchase_sent_again_on_a_new_connection_is_covered_by_the_wait_after_it() {
    let master = Server::start();
    let replica = Server::start();
    replicate(&replica, &master);
    let mut first = master.con();
    seckill_harness::ok(&mut first, &["SECKILL.INIT", "s", "10"]);
    // Frozen, its link kept: the master still counts it, at the offset it acknowledged last.
    replica.signal(libc::SIGSTOP);
    let try_again = |timeout_ms: u64| {
        redis::pipe()
            .cmd("SECKILL.TRY")
            .arg("s")
            .arg("alice")
            .arg(1)
            .arg("ID")
            .arg("attempt-1")
            .cmd("WAIT")
            .arg(1)
            .arg(timeout_ms)
            .clone()
    };
    let (_, acked): (i64, i64) = try_again(200).query(&mut first).unwrap();
    assert_eq!(acked, 0, "the replica is frozen: not acknowledged");
    // The answer was "lost": the client sends it again on a connection of its own.
    let mut second = master.con();
    let (remaining, acked): (i64, i64) = try_again(200).query(&mut second).unwrap();
    assert_eq!(remaining, 9, "the repeat answers the purchase");
    assert_eq!(
        acked, 0,
        "the repeat's WAIT covers the purchase, which no replica has"
    );
    replica.signal(libc::SIGCONT);
    let mut third = master.con();
    let (remaining, acked): (i64, i64) = try_again(30_000).query(&mut third).unwrap();
    assert_eq!(
        (remaining, acked),
        (9, 1),
        "once the replica has it, the repeat says so"
    );
    assert_eq!(
        field(&mut third, &["SECKILL.INFO", "s"], "sold"),
        1,
        "bought once"
    );
}
