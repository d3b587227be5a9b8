//! `make bench`: the module measured against plain Redis commands on one server, in one run.
//!
//! Single-command rows use `redis-benchmark` (`REDIS_BENCHMARK`), all with the same clients,
//! request count, pipeline depth and random user ids. Rows that need two commands per
//! operation (lock + unlock) or a measurement redis-benchmark cannot make (memory, handoff
//! latency) use the small load generators below. Results go to the terminal and to
//! `<out>/latest.md`, `<out>/latest.csv` and `<out>/latest.png` (default out: bench/results).
//! `bench --smoke --out DIR` runs a few hundred requests per row (used by `make test`).

use redis::{Connection, Script};
use seckill_harness::{Server, used_memory, wait_until};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

struct Config {
    requests: usize,
    clients: usize,
    memory_buyers: usize,
    handoff_samples: usize,
    out: PathBuf,
}

/// The seed's Lua seckill: SISMEMBER + GET + DECR + SADD.
const LUA_SECKILL: &str = "\
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -2 end
local stock = tonumber(redis.call('GET', KEYS[1]))
if stock <= 0 then return -1 end
redis.call('SADD', KEYS[2], ARGV[1])
return redis.call('DECR', KEYS[1])";

/// The fair peer of TRY with EVENTS: the seed's script plus the order event, XADD to a stream.
const LUA_SECKILL_XADD: &str = "\
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -2 end
local stock = tonumber(redis.call('GET', KEYS[1]))
if stock <= 0 then return -1 end
redis.call('SADD', KEYS[2], ARGV[1])
local left = redis.call('DECR', KEYS[1])
redis.call('XADD', KEYS[3], '*', 'event', 'purchase', 'user', ARGV[1], 'qty', '1', 'remaining', left)
return left";

const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// Users for the limit path: redis-benchmark's `__rand_int__` is 12 zero-padded digits.
const LIMIT_USERS: usize = 1_000;

fn benchmark_binary() -> String {
    std::env::var("REDIS_BENCHMARK").unwrap_or_else(|_| "redis-benchmark".to_string())
}

/// Rounds of every row, interleaved (each round runs every row once, so a slow minute on this
/// shared machine hits all rows alike); the median round is reported.
const REPEATS: usize = 3;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The server's own time per call of `command` since the last `CONFIG RESETSTAT`, in
/// microseconds (INFO commandstats), which does not depend on the load generator.
fn usec_per_call(con: &mut Connection, command: &str) -> Option<f64> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(con).ok()?;
    let prefix = format!("cmdstat_{command}:");
    let line = text.lines().find_map(|l| l.strip_prefix(&prefix))?;
    line.split(',')
        .find_map(|field| field.strip_prefix("usec_per_call="))?
        .parse()
        .ok()
}

fn reset_stats(con: &mut Connection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
}

/// Puts the server on core 0 and this process (and the redis-benchmark it starts) on core 1,
/// so that client and server do not take turns on one core.
fn pin_to_cores(server: &Server) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pin = |pid: u32, core: usize| {
        Command::new("taskset")
            .args(["-acp", &core.to_string(), &pid.to_string()])
            .output()
            .is_ok_and(|out| out.status.success())
    };
    match server.pid() {
        Some(pid) if cores >= 2 && pin(pid, 0) && pin(std::process::id(), 1) => {
            "server pinned to core 0, load generators to core 1".to_string()
        }
        _ => "not pinned to cores (needs 2 cores and taskset)".to_string(),
    }
}

/// Requests per second of one redis-benchmark run.
fn redis_benchmark_once(
    server: &Server,
    cfg: &Config,
    pipeline: usize,
    keyspace: usize,
    args: &[&str],
) -> f64 {
    let out = Command::new(benchmark_binary())
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args([
            "-n",
            &cfg.requests.to_string(),
            "-c",
            &cfg.clients.to_string(),
        ])
        .args([
            "-P",
            &pipeline.to_string(),
            "-r",
            &keyspace.to_string(),
            "--csv",
        ])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", benchmark_binary()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "redis-benchmark failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = text
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .expect("csv output");
    last.split(',')
        .nth(1)
        .map(|v| v.trim_matches('"').parse().expect("rps"))
        .expect("rps column")
}

/// Lock + unlock pairs per second with `clients` threads; `pipeline` commands per round trip.
fn lock_pairs(server: &Server, cfg: &Config, pipeline: usize, module: bool) -> f64 {
    let pairs_per_client = (cfg.requests / 2 / cfg.clients).max(1);
    let batch = (pipeline / 2).max(1);
    let barrier = Arc::new(Barrier::new(cfg.clients + 1));
    let threads: Vec<_> = (0..cfg.clients)
        .map(|client| {
            let barrier = barrier.clone();
            let mut con = server.con();
            std::thread::spawn(move || {
                let unlock = Script::new(COMPARE_AND_DELETE);
                let token = format!("token-{client}");
                barrier.wait();
                let mut done = 0;
                while done < pairs_per_client {
                    let keys: Vec<String> = (0..batch)
                        .map(|i| {
                            format!(
                                "bench:{}:{pipeline}:{client}:{}",
                                if module { "lock" } else { "setnx" },
                                done + i
                            )
                        })
                        .collect();
                    if pipeline == 1 {
                        lock_unlock_sequential(&mut con, &keys[0], &token, module, &unlock);
                    } else {
                        let mut pipe = redis::pipe();
                        for key in &keys {
                            if module {
                                pipe.cmd("LOCK.ACQUIRE").arg(key).arg(&token).arg(60_000);
                                pipe.cmd("LOCK.RELEASE").arg(key).arg(&token);
                            } else {
                                pipe.cmd("SET")
                                    .arg(key)
                                    .arg(&token)
                                    .arg("NX")
                                    .arg("PX")
                                    .arg(60_000);
                                pipe.cmd("EVALSHA")
                                    .arg(unlock.get_hash())
                                    .arg(1)
                                    .arg(key)
                                    .arg(&token);
                            }
                        }
                        let _: Vec<redis::Value> = pipe.query(&mut con).expect("pipeline");
                    }
                    done += batch;
                }
                done
            })
        })
        .collect();
    let mut con = server.con();
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(COMPARE_AND_DELETE)
        .query(&mut con)
        .unwrap();
    barrier.wait();
    let start = Instant::now();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    total as f64 / start.elapsed().as_secs_f64()
}

fn lock_unlock_sequential(
    con: &mut Connection,
    key: &str,
    token: &str,
    module: bool,
    unlock: &Script,
) {
    if module {
        let fence: Option<i64> = redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(token)
            .arg(60_000)
            .query(con)
            .unwrap();
        assert!(fence.is_some());
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg(token)
            .query(con)
            .unwrap();
        assert_eq!(released, 1);
    } else {
        let ok: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(60_000)
            .query(con)
            .unwrap();
        assert!(ok.is_some());
        let released: i64 = unlock.key(key).arg(token).invoke(con).unwrap();
        assert_eq!(released, 1);
    }
}

/// Bytes per 10-byte user id: (SET member, sale buyer).
fn memory_per_buyer(server: &Server, buyers: usize) -> (f64, f64) {
    let mut con = server.con();
    // Keys of earlier rows expire as they please; measure on an empty keyspace.
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    let ids: Vec<String> = (0..buyers).map(|i| format!("m{i:09}")).collect();
    let mut measure = |build: &dyn Fn(&mut redis::Pipeline, &str)| {
        let before = used_memory(&mut con);
        for chunk in ids.chunks(1_000) {
            let mut pipe = redis::pipe();
            for id in chunk {
                build(&mut pipe, id);
            }
            let _: Vec<i64> = pipe.query(&mut con).unwrap();
        }
        (used_memory(&mut con) - before) as f64 / buyers as f64
    };
    let set = measure(&|pipe, id| {
        pipe.cmd("SADD").arg("mem:set").arg(id);
    });
    let mut init = server.con();
    let _: () = redis::cmd("SECKILL.INIT")
        .arg("mem:sale")
        .arg(buyers)
        .query(&mut init)
        .unwrap();
    let sale = measure(&|pipe, id| {
        pipe.cmd("SECKILL.TRY").arg("mem:sale").arg(id);
    });
    (set, sale)
}

/// Release-to-granted latencies in ms: LOCK.ACQUIRE WAIT vs a client polling every 10 ms.
fn handoff_latency(server: &Server, samples: usize, module: bool) -> Vec<f64> {
    let mut holder = server.con();
    let unlock = Script::new(COMPARE_AND_DELETE);
    (0..samples)
        .map(|i| {
            let key = format!("handoff:{}:{i}", if module { "wait" } else { "poll" });
            let mut waiter = server.con();
            let waiter_key = key.clone();
            let thread = if module {
                let _: Option<i64> = redis::cmd("LOCK.ACQUIRE")
                    .arg(&key)
                    .arg("holder")
                    .arg(60_000)
                    .query(&mut holder)
                    .unwrap();
                let t = std::thread::spawn(move || {
                    let fence: Option<i64> = redis::cmd("LOCK.ACQUIRE")
                        .arg(&waiter_key)
                        .arg("waiter")
                        .arg(60_000)
                        .arg("WAIT")
                        .arg(10_000)
                        .query(&mut waiter)
                        .unwrap();
                    assert!(fence.is_some());
                    Instant::now()
                });
                wait_until(Duration::from_secs(5), "waiter queued", || {
                    let info: Vec<redis::Value> = redis::cmd("LOCK.INFO")
                        .arg(&key)
                        .query(&mut holder)
                        .unwrap();
                    info[7] == redis::Value::Int(1)
                });
                t
            } else {
                let _: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg("holder")
                    .arg("NX")
                    .arg("PX")
                    .arg(60_000)
                    .query(&mut holder)
                    .unwrap();
                let t = std::thread::spawn(move || {
                    loop {
                        let got: Option<String> = redis::cmd("SET")
                            .arg(&waiter_key)
                            .arg("waiter")
                            .arg("NX")
                            .arg("PX")
                            .arg(60_000)
                            .query(&mut waiter)
                            .unwrap();
                        if got.is_some() {
                            return Instant::now();
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                });
                // Release at a point uncorrelated with the poller's 10 ms rhythm.
                std::thread::sleep(Duration::from_millis(15 + (i as u64 * 7) % 10));
                t
            };
            let released_at = Instant::now();
            if module {
                let _: i64 = redis::cmd("LOCK.RELEASE")
                    .arg(&key)
                    .arg("holder")
                    .query(&mut holder)
                    .unwrap();
            } else {
                let _: i64 = unlock.key(&key).arg("holder").invoke(&mut holder).unwrap();
            }
            let granted_at = thread.join().unwrap();
            granted_at.duration_since(released_at).as_secs_f64() * 1_000.0
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

struct Row {
    name: String,
    pipeline: usize,
    ops: f64,
    /// Median server time per call (of the row's command), microseconds.
    usec: Option<f64>,
}

/// `bench --scale [N...]`: memory, SAVE and load of one sale with N distinct buyers against a
/// SET with the same N members, each alone on a fresh server (`make bench-scale`).
fn scale(sizes: &[usize], out: &Path) {
    let mut md = String::from(
        "# seckill at scale\n\nOne sale with N distinct buyers (ids like `user:0000000001`, one unit each) \
         against a SET of the same N members, each alone on its own fresh server (Redis \
         persistence off but for the timed SAVE). `used_memory` delta per member; SAVE; and load: \
         the server restarted on that dump, until it answers PING.\n\n\
         | N | SET B/member | sale B/buyer | sale MEMORY USAGE / delta | SET SAVE s | sale SAVE s | SET load s | sale load s | load sale/SET |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for &n in sizes {
        let measure = |sale: bool| -> (f64, f64, f64, f64) {
            let mut server = Server::start_with(&["--maxclients", "10000"]);
            let mut con = server.con();
            if sale {
                let _: () = redis::cmd("SECKILL.INIT")
                    .arg("scale")
                    .arg(n)
                    .query(&mut con)
                    .unwrap();
            }
            let before = used_memory(&mut con);
            let mut next = 0usize;
            while next < n {
                let mut pipe = redis::pipe();
                for i in next..(next + 10_000).min(n) {
                    let user = format!("user:{i:010}");
                    if sale {
                        pipe.cmd("SECKILL.TRY").arg("scale").arg(user);
                    } else {
                        pipe.cmd("SADD").arg("scale").arg(user);
                    }
                }
                let _: Vec<i64> = pipe.query(&mut con).unwrap();
                next += 10_000;
            }
            let delta = (used_memory(&mut con) - before) as f64;
            let usage: i64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg("scale")
                .query(&mut con)
                .unwrap();
            let timed = |cmd: &mut redis::Cmd, con: &mut Connection| {
                let start = Instant::now();
                let _: () = cmd.query(con).unwrap();
                start.elapsed().as_secs_f64()
            };
            let save = timed(&mut redis::cmd("SAVE"), &mut con);
            // The dump SAVE just wrote, loaded by a restarted server (nothing to free first).
            let start = Instant::now();
            server.kill_and_restart();
            let reload = start.elapsed().as_secs_f64();
            (delta / n as f64, usage as f64 / delta, save, reload)
        };
        let (set_bytes, _, set_save, set_reload) = measure(false);
        let (sale_bytes, usage_ratio, sale_save, sale_reload) = measure(true);
        let row = format!(
            "| {n} | {set_bytes:.1} | {sale_bytes:.1} | {usage_ratio:.3} | {set_save:.2} | {sale_save:.2} | {set_reload:.2} | {sale_reload:.2} | {:.2}x |\n",
            sale_reload / set_reload
        );
        print!("{row}");
        md.push_str(&row);
    }
    std::fs::create_dir_all(out).unwrap();
    std::fs::write(out.join("scale.md"), &md).unwrap();
    println!("\n{md}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--scale") {
        let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
        let sizes = if sizes.is_empty() {
            vec![1_000_000, 10_000_000]
        } else {
            sizes
        };
        scale(
            &sizes,
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/results"),
        );
        return;
    }
    let smoke = args.iter().any(|a| a == "--smoke");
    let out = args
        .iter()
        .position(|a| a == "--out")
        .map(|i| PathBuf::from(&args[i + 1]))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/results"));
    let cfg = if smoke {
        Config {
            requests: 300,
            clients: 10,
            memory_buyers: 1_000,
            handoff_samples: 3,
            out,
        }
    } else {
        Config {
            requests: 300_000,
            clients: 50,
            memory_buyers: 1_000_000,
            handoff_samples: 100,
            out,
        }
    };
    std::fs::create_dir_all(&cfg.out).expect("create output dir");
    if args.iter().any(|a| a == "--cluster-only") {
        // Just the cluster section, printed (`bench --cluster-only`), for working on it.
        let (md, targets) = cluster::section(&cfg);
        println!("{md}\n| target | measured | met |\n| --- | ---: | --- |\n{targets}");
        return;
    }
    if args.iter().any(|a| a == "--locks-only") {
        // Just the client libraries' locks, printed (`bench --locks-only`).
        let (md, targets) = client_locks::section(&cfg);
        println!("{md}\n| target | measured | met |\n| --- | ---: | --- |\n{targets}");
        return;
    }
    if args.iter().any(|a| a == "--cache-only") {
        // Just the sold-out cache, printed (`bench --cache-only`).
        let (md, targets) = sold_out_cache::section(&cfg);
        println!("{md}\n| target | measured | met |\n| --- | ---: | --- |\n{targets}");
        return;
    }
    if args.iter().any(|a| a == "--async-only") {
        // Just the async clients' section, printed (`bench --async-only`).
        let (md, targets) = async_clients::section(&cfg);
        println!("{md}\n| target | measured | met |\n| --- | ---: | --- |\n{targets}");
        return;
    }

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let server = Server::start_with(&["--maxclients", "10000"]);
    let pinning = pin_to_cores(&server);
    println!("{pinning}");
    let mut con = server.con();
    let version: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    let version = version
        .lines()
        .find(|l| l.starts_with("redis_version:") || l.starts_with("valkey_version:"))
        .unwrap_or("unknown")
        .to_string();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(LUA_SECKILL)
        .query(&mut con)
        .unwrap();
    let sha_xadd: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(LUA_SECKILL_XADD)
        .query(&mut con)
        .unwrap();
    for stock in ["bench:lua:stock", "{bench:luax}:stock"] {
        let _: () = redis::cmd("SET")
            .arg(stock)
            .arg(1_000_000_000_000i64)
            .query(&mut con)
            .unwrap();
    }
    for (key, stock) in [
        ("bench:sale", 1_000_000_000_000i64),
        ("bench:soldout", 0),
        ("bench:limit", 1_000_000_000_000),
    ] {
        let _: () = redis::cmd("SECKILL.INIT")
            .arg(key)
            .arg(stock)
            .query(&mut con)
            .unwrap();
    }
    // The order lifecycle's cost: a hold per purchase, and a stream entry too.
    let _: () = redis::cmd("SECKILL.INIT")
        .arg("bench:held")
        .arg(1_000_000_000_000i64)
        .arg("HOLD")
        .arg(3_600_000)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("{bench:events}:stream")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SECKILL.INIT")
        .arg("{bench:events}")
        .arg(1_000_000_000_000i64)
        .arg("HOLD")
        .arg(3_600_000)
        .arg("EVENTS")
        .arg("{bench:events}:stream")
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    let mut pipe = redis::pipe();
    for i in 0..LIMIT_USERS {
        pipe.cmd("SECKILL.TRY")
            .arg("bench:limit")
            .arg(format!("user:{i:012}"));
    }
    let _: Vec<i64> = pipe.query(&mut con).unwrap();

    let keyspace = 100_000_000;
    // name, keyspace, argv (redis-benchmark options, then the command), and the command whose
    // server time INFO commandstats reports.
    // Keys and holds made here outlive the run (TTL and HOLD of an hour): a million SET keys
    // expiring a minute after their row take about a second of the server's time, which
    // would land on whichever rows run then. The two rows that add keys each have a database
    // of their own (redis-benchmark's --dbnum), so each pays for its own keyspace's growth:
    // in one database the row after the one that crossed a power of two paid for rehashing
    // a million keys (LOCK.ACQUIRE measured 1.9 to 5.2 us per call, round by round).
    let cases: Vec<(&str, usize, Vec<&str>, &str)> = vec![
        ("PING", keyspace, vec!["PING"], "ping"),
        ("INCR", keyspace, vec!["INCR", "bench:counter"], "incr"),
        (
            "SADD random member",
            keyspace,
            vec!["SADD", "bench:set", "user:__rand_int__"],
            "sadd",
        ),
        (
            "SET NX PX random key",
            keyspace,
            vec![
                "--dbnum",
                "1",
                "SET",
                "bench:key:__rand_int__",
                "v",
                "NX",
                "PX",
                "3600000",
            ],
            "set",
        ),
        (
            "LOCK.ACQUIRE free key",
            keyspace,
            vec![
                "--dbnum",
                "2",
                "LOCK.ACQUIRE",
                "bench:lk:__rand_int__",
                "tok",
                "3600000",
            ],
            "lock.acquire",
        ),
        (
            "Lua seckill (EVALSHA)",
            keyspace,
            vec![
                "EVALSHA",
                &sha,
                "2",
                "bench:lua:stock",
                "bench:lua:buyers",
                "user:__rand_int__",
            ],
            "evalsha",
        ),
        (
            "Lua seckill + XADD (EVALSHA)",
            keyspace,
            vec![
                "EVALSHA",
                &sha_xadd,
                "3",
                "{bench:luax}:stock",
                "{bench:luax}:buyers",
                "{bench:luax}:events",
                "user:__rand_int__",
            ],
            "evalsha",
        ),
        (
            "SECKILL.TRY success",
            keyspace,
            vec!["SECKILL.TRY", "bench:sale", "user:__rand_int__"],
            "seckill.try",
        ),
        (
            "SECKILL.TRY sold out",
            keyspace,
            vec!["SECKILL.TRY", "bench:soldout", "user:__rand_int__"],
            "seckill.try",
        ),
        (
            "SECKILL.TRY over limit",
            LIMIT_USERS,
            vec!["SECKILL.TRY", "bench:limit", "user:__rand_int__"],
            "seckill.try",
        ),
        (
            "SECKILL.TRY success, HOLD",
            keyspace,
            vec!["SECKILL.TRY", "bench:held", "user:__rand_int__"],
            "seckill.try",
        ),
        (
            "SECKILL.TRY success, HOLD+EVENTS",
            keyspace,
            vec!["SECKILL.TRY", "{bench:events}", "user:__rand_int__"],
            "seckill.try",
        ),
    ];
    let lock_rows = [
        ("SET NX PX + Lua unlock (cmds)", false),
        ("LOCK.ACQUIRE + RELEASE (cmds)", true),
    ];
    // (ops/s, server usec per call) of every round, per row and pipeline depth.
    let mut samples: Vec<(String, usize, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut record = |name: &str, pipeline: usize, ops: f64, usec: Option<f64>| {
        let at = samples
            .iter()
            .position(|(n, p, _, _)| n == name && *p == pipeline)
            .unwrap_or_else(|| {
                samples.push((name.to_string(), pipeline, Vec::new(), Vec::new()));
                samples.len() - 1
            });
        samples[at].2.push(ops);
        samples[at].3.extend(usec);
    };
    for pipeline in [1, 16] {
        for round in 1..=REPEATS {
            for (name, space, argv, stat) in &cases {
                reset_stats(&mut con);
                let ops = redis_benchmark_once(&server, &cfg, pipeline, *space, argv);
                let usec = usec_per_call(&mut con, stat);
                println!("-P {pipeline:<2} round {round} {name:<34} {ops:>12.0} ops/s");
                record(name, pipeline, ops, usec);
            }
            for (name, module) in lock_rows {
                let ops = 2.0 * lock_pairs(&server, &cfg, pipeline, module);
                println!("-P {pipeline:<2} round {round} {name:<34} {ops:>12.0} ops/s");
                record(name, pipeline, ops, None);
            }
        }
    }
    let rows: Vec<Row> = samples
        .into_iter()
        .map(|(name, pipeline, ops, usec)| Row {
            name,
            pipeline,
            ops: median(ops),
            usec: (!usec.is_empty()).then(|| median(usec)),
        })
        .collect();
    let (set_bytes, buyer_bytes) = memory_per_buyer(&server, cfg.memory_buyers);
    let mut wait = handoff_latency(&server, cfg.handoff_samples, true);
    let mut poll = handoff_latency(&server, cfg.handoff_samples, false);
    wait.sort_by(f64::total_cmp);
    poll.sort_by(f64::total_cmp);

    let find = |name: &str, p: usize| {
        rows.iter()
            .find(|r| r.name == name && r.pipeline == p)
            .unwrap()
            .ops
    };
    let mut md = String::new();
    writeln!(md, "# seckill benchmark\n").unwrap();
    writeln!(md, "Server `{version}`, {} cores, {} requests per row, {} clients, random user ids from a keyspace of {keyspace} \
        (the over-limit row: {LIMIT_USERS} users who all bought already). Persistence off, {pinning}; \
        every row is the median of {REPEATS} rounds, interleaved (each round runs every row once). \
        `server us/call` is the server's own time per call from INFO commandstats (median round).\n",
        cores, cfg.requests, cfg.clients).unwrap();
    writeln!(
        md,
        "| row | -P | ops/s | vs INCR | vs Lua seckill | server us/call |"
    )
    .unwrap();
    writeln!(md, "| --- | ---: | ---: | ---: | ---: | ---: |").unwrap();
    let mut csv = String::from("row,pipeline,ops,vs_incr,vs_lua,usec_per_call\n");
    for r in &rows {
        let (incr, lua) = (
            find("INCR", r.pipeline),
            find("Lua seckill (EVALSHA)", r.pipeline),
        );
        let usec = r.usec.map_or("-".to_string(), |u| format!("{u:.2}"));
        writeln!(
            md,
            "| {} | {} | {:.0} | {:.2}x | {:.2}x | {usec} |",
            r.name,
            r.pipeline,
            r.ops,
            r.ops / incr,
            r.ops / lua
        )
        .unwrap();
        writeln!(
            csv,
            "{},{},{:.0},{:.4},{:.4},{}",
            r.name,
            r.pipeline,
            r.ops,
            r.ops / incr,
            r.ops / lua,
            r.usec.map_or(String::new(), |u| format!("{u:.3}"))
        )
        .unwrap();
    }
    writeln!(md, "\nLock rows count commands (two per lock + unlock) from the Rust load generator in `examples/bench.rs`; \
        the others are `redis-benchmark` runs.\n").unwrap();
    writeln!(md, "| memory, {} ten-byte ids | bytes per id |\n| --- | ---: |\n| SET member | {set_bytes:.1} |\n| SECKILL buyer | {buyer_bytes:.1} |\n",
        cfg.memory_buyers).unwrap();
    writeln!(
        md,
        "| lock handoff, release to grant ({} samples) | p50 ms | p99 ms |\n| --- | ---: | ---: |",
        cfg.handoff_samples
    )
    .unwrap();
    writeln!(
        md,
        "| LOCK.ACQUIRE WAIT | {:.3} | {:.3} |",
        percentile(&wait, 0.5),
        percentile(&wait, 0.99)
    )
    .unwrap();
    writeln!(
        md,
        "| SET NX polling every 10 ms | {:.3} | {:.3} |\n",
        percentile(&poll, 0.5),
        percentile(&poll, 0.99)
    )
    .unwrap();

    let (cluster_md, cluster_targets) = cluster::section(&cfg);
    md.push_str(&cluster_md);
    let (async_md, async_targets) = async_clients::section(&cfg);
    md.push_str(&async_md);
    let (locks_md, locks_targets) = client_locks::section(&cfg);
    md.push_str(&locks_md);
    let (cache_md, cache_targets) = sold_out_cache::section(&cfg);
    md.push_str(&cache_md);
    let targets = [
        (
            "SECKILL.TRY success >= 1.0x SADD at -P 16",
            find("SECKILL.TRY success", 16) / find("SADD random member", 16),
            1.0,
        ),
        (
            "SECKILL.TRY success >= 2.5x Lua seckill at -P 16",
            find("SECKILL.TRY success", 16) / find("Lua seckill (EVALSHA)", 16),
            2.5,
        ),
        (
            "SECKILL.TRY sold out >= 0.9x INCR at -P 1",
            find("SECKILL.TRY sold out", 1) / find("INCR", 1),
            0.9,
        ),
        (
            "SECKILL.TRY sold out >= 0.9x INCR at -P 16",
            find("SECKILL.TRY sold out", 16) / find("INCR", 16),
            0.9,
        ),
        (
            "SECKILL.TRY over limit >= 0.9x INCR at -P 1",
            find("SECKILL.TRY over limit", 1) / find("INCR", 1),
            0.9,
        ),
        (
            "SECKILL.TRY over limit >= 0.9x INCR at -P 16",
            find("SECKILL.TRY over limit", 16) / find("INCR", 16),
            0.9,
        ),
        (
            "SECKILL.TRY HOLD+EVENTS >= 2x Lua seckill + XADD at -P 16",
            find("SECKILL.TRY success, HOLD+EVENTS", 16) / find("Lua seckill + XADD (EVALSHA)", 16),
            2.0,
        ),
        (
            "SECKILL.TRY HOLD+EVENTS >= 1.2x Lua seckill + XADD at -P 1",
            find("SECKILL.TRY success, HOLD+EVENTS", 1) / find("Lua seckill + XADD (EVALSHA)", 1),
            1.2,
        ),
        (
            "SECKILL.TRY HOLD+EVENTS >= 0.9x plain TRY at -P 1",
            find("SECKILL.TRY success, HOLD+EVENTS", 1) / find("SECKILL.TRY success", 1),
            0.9,
        ),
        (
            "SECKILL.TRY HOLD >= 0.8x plain TRY at -P 16",
            find("SECKILL.TRY success, HOLD", 16) / find("SECKILL.TRY success", 16),
            0.8,
        ),
        (
            "LOCK.ACQUIRE on a free key >= 0.9x SET NX PX at -P 16",
            find("LOCK.ACQUIRE free key", 16) / find("SET NX PX random key", 16),
            0.9,
        ),
        (
            "memory per buyer below a SET member",
            set_bytes / buyer_bytes,
            1.0,
        ),
    ];
    writeln!(md, "| target | measured | met |\n| --- | ---: | --- |").unwrap();
    for (name, ratio, goal) in targets {
        writeln!(
            md,
            "| {name} | {ratio:.2}x | {} |",
            if ratio >= goal { "yes" } else { "**no**" }
        )
        .unwrap();
    }
    md.push_str(&cluster_targets);
    md.push_str(&async_targets);
    md.push_str(&locks_targets);
    md.push_str(&cache_targets);
    if smoke {
        writeln!(
            md,
            "\n(smoke run: too few requests for the figures to mean anything)"
        )
        .unwrap();
    }
    println!("\n{md}");
    std::fs::write(cfg.out.join("latest.md"), &md).unwrap();
    std::fs::write(cfg.out.join("latest.csv"), &csv).unwrap();
    chart(&cfg.out);
}

/// Runs `bench/<script>` with the project's .venv Python and `args`: the `count` numbers it
/// prints (its stdout and stderr in the panic if it printed anything else).
fn python_numbers(script: &str, args: &[String], count: usize) -> Vec<f64> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join(".venv/bin/python"))
        .arg(root.join("bench").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("bench/{script}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<f64> = text
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    assert_eq!(
        numbers.len(),
        count,
        "bench/{script}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    numbers
}

/// Draws the ratio chart with bench/chart.py (matplotlib, from the project's .venv).
fn chart(out: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var("SECKILL_PYTHON")
        .map_or_else(|_| root.join(".venv/bin/python"), PathBuf::from);
    let status = Command::new(&python)
        .arg(root.join("bench/chart.py"))
        .arg(out.join("latest.csv"))
        .arg(out.join("latest.png"))
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} (make venv installs it): {e}",
                python.display()
            )
        });
    assert!(status.success(), "bench/chart.py failed");
    println!("chart: {}", out.join("latest.png").display());
}

/// The cluster section of `make bench` (#15): one sale over a 3-master cluster through the
/// `seckill-client` crate against one sale key on one server, the same client threads.
mod cluster {
    use super::{Config, median};
    use redis::ConnectionLike;
    use redis::cluster::ClusterClient;
    use seckill_client::{FlashSale, PartitionedSale, SaleSpec, TryReply, partition_of};
    use seckill_harness::Server;
    use std::fmt::Write as _;
    use std::process::Command;
    use std::sync::{Arc, Barrier};
    use std::time::Instant;

    const PARTITIONS: u32 = 16;

    /// Calls and total microseconds of one command since the last CONFIG RESETSTAT.
    fn command_time(con: &mut impl ConnectionLike, command: &str) -> (f64, f64) {
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(con)
            .unwrap_or_default();
        let prefix = format!("cmdstat_{command}:");
        let Some(line) = text.lines().find_map(|l| l.strip_prefix(&prefix)) else {
            return (0.0, 0.0);
        };
        let field = |name: &str| {
            line.split(',')
                .find_map(|f| f.strip_prefix(name))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        (field("calls="), field("usec="))
    }

    /// Server time over `servers` since their last reset: (TRY calls, µs per TRY, µs of every
    /// seckill command per TRY).
    fn server_time(servers: &[&Server]) -> (f64, f64, f64) {
        let (mut tries, mut try_usec, mut all_usec) = (0.0, 0.0, 0.0);
        for server in servers {
            let mut con = server.con();
            let (calls, usec) = command_time(&mut con, "seckill.try");
            tries += calls;
            try_usec += usec;
            all_usec += usec;
            for other in [
                "seckill.info",
                "seckill.lend",
                "seckill.absorb",
                "seckill.settle",
                "seckill.seal",
                "seckill.transfers",
            ] {
                all_usec += command_time(&mut con, other).1;
            }
        }
        let tries = tries.max(1.0);
        (tries, try_usec / tries, all_usec / tries)
    }

    fn reset(servers: &[&Server]) {
        for server in servers {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query(&mut server.con())
                .unwrap();
        }
    }

    /// `clients` threads each make `per_client` attempts with `attempt(con, client, i)`;
    /// replies the attempts per second.
    fn load<C: ConnectionLike + Send + 'static>(
        clients: usize,
        per_client: usize,
        connect: impl Fn() -> C,
        attempt: impl Fn(&mut C, usize, usize) + Send + Sync + 'static,
    ) -> f64 {
        let attempt = Arc::new(attempt);
        let barrier = Arc::new(Barrier::new(clients + 1));
        let threads: Vec<_> = (0..clients)
            .map(|client| {
                let (barrier, attempt, mut con) = (barrier.clone(), attempt.clone(), connect());
                std::thread::spawn(move || {
                    barrier.wait();
                    for i in 0..per_client {
                        attempt(&mut con, client, i);
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for t in threads {
            t.join().expect("load thread");
        }
        (clients * per_client) as f64 / start.elapsed().as_secs_f64()
    }

    /// A sale of `stock` units at each of `keys`.
    fn init_sales(con: &mut impl ConnectionLike, keys: &[String], stock: u64) {
        for key in keys {
            let _: () = redis::cmd("SECKILL.INIT")
                .arg(key)
                .arg(stock)
                .query(con)
                .unwrap();
        }
    }

    /// [`load`] of plain `SECKILL.TRY` calls by users `<prefix>:<client>:<i>`, each on the key
    /// its id hashes to among `keys` (as a partition is chosen; the one key when there is one),
    /// each replying `expect` when given.
    fn raw_tries<C: ConnectionLike + Send + 'static>(
        clients: usize,
        per_client: usize,
        connect: impl Fn() -> C,
        keys: Vec<String>,
        prefix: &'static str,
        expect: Option<i64>,
    ) -> f64 {
        load(clients, per_client, connect, move |con, c, i| {
            let user = format!("{prefix}:{c}:{i}");
            let key = &keys[partition_of(user.as_bytes(), keys.len() as u32) as usize];
            let code: i64 = redis::cmd("SECKILL.TRY")
                .arg(key)
                .arg(&user)
                .query(con)
                .unwrap();
            if let Some(want) = expect {
                assert_eq!(code, want);
            }
        })
    }

    #[derive(Default)]
    struct Round {
        single: f64,
        partitioned: f64,
        single_usec: f64,
        partitioned_usec: f64,
        partitioned_all_usec: f64,
        borrow_share: f64,
        single_sold_out: f64,
        partitioned_sold_out: f64,
        single_sold_out_usec: f64,
        partitioned_sold_out_usec: f64,
        cluster_key_sold_out: f64,
        cluster_key_sold_out_usec: f64,
        spread_sold_out: f64,
        spread_sold_out_usec: f64,
        sold_out_borrows: u64,
    }

    fn pin(pid: u32, core: usize) {
        let _ = Command::new("taskset")
            .args(["-acp", &core.to_string(), &pid.to_string()])
            .output();
    }

    /// Markdown for the report: the table, and the targets.
    pub fn section(cfg: &Config) -> (String, String) {
        let single = Server::start_with(&["--maxclients", "10000"]);
        let nodes = seckill_harness::start_cluster(3, &["--maxclients", "10000"]);
        // Every server shares core 0, the load generator keeps core 1: the comparison is of
        // the same cores, so it shows the partitioned path's cost, not a cluster's scale-out.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores >= 2 {
            for server in nodes.iter().chain([&single]) {
                if let Some(pid) = server.pid() {
                    pin(pid, 0);
                }
            }
        }
        let urls: Vec<String> = nodes.iter().map(Server::url).collect();
        let masters: Vec<&Server> = nodes.iter().collect();
        let smoke = cfg.requests < 10_000;
        let stock: u64 = if smoke { 500 } else { 100_000 };
        // 10 % more attempts than units: every sale sells out near the end of its row.
        let per_client = (stock as usize * 11 / 10).div_ceil(cfg.clients);
        let sold_out_per_client = (cfg.requests / 6).div_ceil(cfg.clients).max(10);
        let mut rounds = Vec::new();
        for round in 0..super::REPEATS {
            let mut r = Round::default();
            // One sale key on one server.
            let key = vec![format!("bench:one:{round}")];
            init_sales(&mut single.con(), &key, stock);
            reset(&[&single]);
            r.single = raw_tries(
                cfg.clients,
                per_client,
                || single.con(),
                key.clone(),
                "u",
                None,
            );
            r.single_usec = server_time(&[&single]).1;
            // The same over 16 partitions of a 3-master cluster.
            let connect = || {
                ClusterClient::new(urls.clone())
                    .unwrap()
                    .get_connection()
                    .unwrap()
            };
            let name = format!("bench:sale:{round}");
            let sale = Arc::new(
                PartitionedSale::create(&mut connect(), &name, &SaleSpec::new(stock, PARTITIONS))
                    .unwrap(),
            );
            reset(&masters);
            let buyer = sale.clone();
            r.partitioned = load(cfg.clients, per_client, connect, move |con, c, i| {
                buyer.try_buy(con, format!("u:{c}:{i}"), 1).unwrap();
            });
            (_, r.partitioned_usec, r.partitioned_all_usec) = server_time(&masters);
            let stats = sale.stats();
            r.borrow_share = stats.borrowing_tries as f64 / stats.tries as f64;
            let info = sale.info(&mut connect()).unwrap();
            assert_eq!(info.sold, stock, "the partitioned sale sold out: {info:?}");
            // Sold out: the reject path, once per attempt.
            reset(&[&single]);
            r.single_sold_out = raw_tries(
                cfg.clients,
                sold_out_per_client,
                || single.con(),
                key,
                "late",
                Some(-1),
            );
            r.single_sold_out_usec = server_time(&[&single]).1;
            let late = Arc::new(
                PartitionedSale::open(&mut connect(), &name)
                    .unwrap()
                    .with_seal_ms(600_000),
            );
            reset(&masters);
            let buyer = late.clone();
            r.partitioned_sold_out = load(
                cfg.clients,
                sold_out_per_client,
                connect,
                move |con, c, i| {
                    let reply = buyer.try_buy(con, format!("late:{c}:{i}"), 1).unwrap();
                    assert_eq!(reply, TryReply::SoldOut);
                },
            );
            r.partitioned_sold_out_usec = server_time(&masters).1;
            r.sold_out_borrows = late.stats().borrowing_tries;
            // One sold-out sale key in the cluster, through the same cluster client: what a
            // sold-out reply costs there without partitions.
            let cluster_key = vec![format!("bench:cluster-key:{round}")];
            init_sales(&mut connect(), &cluster_key, 0);
            reset(&masters);
            r.cluster_key_sold_out = raw_tries(
                cfg.clients,
                sold_out_per_client,
                connect,
                cluster_key,
                "late",
                Some(-1),
            );
            r.cluster_key_sold_out_usec = server_time(&masters).1;
            // 16 plain sold-out sale keys named and spread as the partitions are, each user on
            // its hash's key, raw TRY: what spreading costs without the partition logic.
            let spread: Vec<String> = (0..PARTITIONS)
                .map(|i| format!("{{bench:spread:{round}/{i}}}"))
                .collect();
            init_sales(&mut connect(), &spread, 0);
            reset(&masters);
            r.spread_sold_out = raw_tries(
                cfg.clients,
                sold_out_per_client,
                connect,
                spread,
                "late",
                Some(-1),
            );
            r.spread_sold_out_usec = server_time(&masters).1;
            rounds.push(r);
        }
        let m = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
        let mut md = String::new();
        writeln!(
            md,
            "### One sale over a Redis Cluster (`seckill-client`, {} client threads, unpipelined)\n\n\
             A sale of {stock} units with {} attempts (10 % more than the stock, each a new user, \
             uniform ids): one sale key on one server against {PARTITIONS} partitions over 3 \
             masters. Then {} attempts on the sold-out sale. All four servers share core 0 and \
             the load generator has core 1, so this measures what partitioning costs on the same \
             cores, not what more cores give; median of {} interleaved rounds.\n",
            cfg.clients,
            per_client * cfg.clients,
            sold_out_per_client * cfg.clients,
            super::REPEATS
        )
        .unwrap();
        writeln!(
            md,
            "| row | attempts/s | ratio | server µs per TRY | server µs of all seckill commands per TRY |\n| --- | ---: | ---: | ---: | ---: |"
        )
        .unwrap();
        let (single_ops, part_ops) = (m(|r| r.single), m(|r| r.partitioned));
        let (single_so, part_so) = (m(|r| r.single_sold_out), m(|r| r.partitioned_sold_out));
        writeln!(
            md,
            "| one key, one server: TRY until sold out | {single_ops:.0} | 1.00x | {:.2} | {:.2} |",
            m(|r| r.single_usec),
            m(|r| r.single_usec)
        )
        .unwrap();
        writeln!(md, "| {PARTITIONS} partitions, 3 masters: try_buy until sold out | {part_ops:.0} | {:.2}x | {:.2} | {:.2} |",
            part_ops / single_ops, m(|r| r.partitioned_usec), m(|r| r.partitioned_all_usec)).unwrap();
        writeln!(
            md,
            "| one key, one server: sold-out TRY | {single_so:.0} | 1.00x | {:.2} | {:.2} |",
            m(|r| r.single_sold_out_usec),
            m(|r| r.single_sold_out_usec)
        )
        .unwrap();
        let cluster_so = m(|r| r.cluster_key_sold_out);
        writeln!(md, "| one key in the cluster, cluster client: sold-out TRY | {cluster_so:.0} | {:.2}x | {:.2} | |",
            cluster_so / single_so, m(|r| r.cluster_key_sold_out_usec)).unwrap();
        let spread_so = m(|r| r.spread_sold_out);
        writeln!(md, "| {PARTITIONS} plain sold-out keys spread as the partitions, raw TRY | {spread_so:.0} | {:.2}x | {:.2} | |",
            spread_so / single_so, m(|r| r.spread_sold_out_usec)).unwrap();
        writeln!(
            md,
            "| {PARTITIONS} partitions: sold-out try_buy | {part_so:.0} | {:.2}x | {:.2} | |",
            part_so / single_so,
            m(|r| r.partitioned_sold_out_usec)
        )
        .unwrap();
        let borrow_share = m(|r| r.borrow_share);
        let sold_out_borrows = rounds.iter().map(|r| r.sold_out_borrows).max().unwrap_or(0);
        writeln!(
            md,
            "\nShare of try_buy calls that borrowed (uniform ids, until sold out): {:.3} %. \
             Sold-out attempts that needed more than one round trip: at most {sold_out_borrows} of {} \
             (those that reached a partition before it was sealed: one of them scans the \
             partitions and seals it, the others wait for it and read one INFO); every later one \
             is one TRY.\n",
            borrow_share * 100.0,
            sold_out_per_client * cfg.clients
        )
        .unwrap();
        let targets = format!(
            "| partitioned try_buy: share that borrowed < 1 % (uniform) | {:.3} % | {} |\n\
             | partitioned sold-out try_buy within 10 % of a single-key sold-out TRY, same cluster and client | {:.2}x | {} |\n\
             | the same against one key on a standalone server (plain client) | {:.2}x | {} |\n",
            borrow_share * 100.0,
            if borrow_share < 0.01 { "yes" } else { "**no**" },
            part_so / cluster_so,
            if part_so / cluster_so >= 0.9 {
                "yes"
            } else {
                "**no**"
            },
            part_so / single_so,
            if part_so / single_so >= 0.9 {
                "yes"
            } else {
                "**no**"
            },
        );
        (md, targets)
    }
}

/// The async clients' section of `make bench` (#28): the Rust async client's `try_buy` on one
/// multiplexed connection with 256 tokio tasks against `redis-benchmark -P 16 -c 16` sending
/// SECKILL.TRY itself, rounds interleaved, server time per call beside each; and the Python
/// asyncio client against the sync one on 32 threads (bench/python_clients.py).
mod async_clients {
    use super::{Config, benchmark_binary, median};
    use seckill_client::SaleSpec;
    use seckill_client::aio::{FlashSale, Sale};
    use seckill_harness::Server;
    use std::fmt::Write as _;
    use std::path::Path;
    use std::process::Command;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    const TASKS: u64 = 256;

    /// µs per SECKILL.TRY on the server since the last reset.
    fn try_usec(server: &Server) -> f64 {
        let mut con = server.con();
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut con)
            .unwrap_or_default();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut con)
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("cmdstat_seckill.try:"))
            .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    /// `requests` purchases of fresh users by 256 tasks on one multiplexed connection.
    fn rust_async(server: &Server, requests: u64, round: usize) -> f64 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = redis::Client::open(server.url()).unwrap();
            let mut con = client.get_multiplexed_async_connection().await.unwrap();
            let key = format!("bench:async:{round}");
            let spec = SaleSpec::new(1_000_000_000_000, 1);
            let sale = Arc::new(Sale::create(&mut con, &key, &spec).await.unwrap());
            let next = Arc::new(AtomicU64::new(0));
            let started = Instant::now();
            let tasks: Vec<_> = (0..TASKS)
                .map(|_| {
                    let (sale, mut con, next) = (sale.clone(), con.clone(), next.clone());
                    tokio::spawn(async move {
                        loop {
                            let n = next.fetch_add(1, Ordering::Relaxed);
                            if n >= requests {
                                break;
                            }
                            sale.try_buy(&mut con, format!("user:{n}"), 1)
                                .await
                                .unwrap();
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            requests as f64 / started.elapsed().as_secs_f64()
        })
    }

    /// The same load without the library: `SECKILL.TRY key user 1 ID <32 hex>` sent by 256 tasks
    /// on one multiplexed connection, what redis-rs itself costs.
    fn raw_async(server: &Server, requests: u64, round: usize) -> f64 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = redis::Client::open(server.url()).unwrap();
            let mut con = client.get_multiplexed_async_connection().await.unwrap();
            let key = format!("bench:raw:{round}");
            let _: () = redis::cmd("SECKILL.INIT")
                .arg(&key)
                .arg(1_000_000_000_000i64)
                .query_async(&mut con)
                .await
                .unwrap();
            let next = Arc::new(AtomicU64::new(0));
            let started = Instant::now();
            let tasks: Vec<_> = (0..TASKS)
                .map(|_| {
                    let (mut con, next, key) = (con.clone(), next.clone(), key.clone());
                    tokio::spawn(async move {
                        loop {
                            let n = next.fetch_add(1, Ordering::Relaxed);
                            if n >= requests {
                                break;
                            }
                            let _: i64 = redis::cmd("SECKILL.TRY")
                                .arg(&key)
                                .arg(format!("user:{n}"))
                                .arg(1)
                                .arg("ID")
                                .arg(format!("{n:032x}"))
                                .query_async(&mut con)
                                .await
                                .unwrap();
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            requests as f64 / started.elapsed().as_secs_f64()
        })
    }

    /// redis-benchmark -P 16 -c 16 sending `SECKILL.TRY key user:<random>`: requests per second.
    fn redis_benchmark(server: &Server, requests: u64, round: usize) -> f64 {
        let key = format!("bench:rb:{round}");
        let _: () = redis::cmd("SECKILL.INIT")
            .arg(&key)
            .arg(1_000_000_000_000i64)
            .query(&mut server.con())
            .unwrap();
        let out = Command::new(benchmark_binary())
            .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
            .args(["-n", &requests.to_string(), "-c", "16", "-P", "16"])
            .args([
                "-r",
                "100000000",
                "--csv",
                "SECKILL.TRY",
                &key,
                "user:__rand_int__",
            ])
            .output()
            .expect("redis-benchmark");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .rfind(|l| !l.trim().is_empty())
            .and_then(|l| l.split(',').nth(1))
            .and_then(|v| v.trim_matches('"').parse().ok())
            .unwrap_or_else(|| panic!("redis-benchmark: {text}"))
    }

    /// bench/python_clients.py: (asyncio tries/s, sync 32-thread tries/s), medians of rounds.
    fn python(server: &Server, requests: u64) -> Option<(f64, f64)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(root.join(".venv/bin/python"))
            .arg(root.join("bench/python_clients.py"))
            .args([server.port.to_string(), requests.to_string()])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut numbers = text.split_whitespace().filter_map(|v| v.parse().ok());
        Some((numbers.next()?, numbers.next()?))
    }

    /// The section's markdown and its rows of the targets table.
    pub fn section(cfg: &Config) -> (String, String) {
        let server = Server::start_with(&["--maxclients", "10000"]);
        let requests = (cfg.requests as u64 / 3).max(300);
        let (mut ours, mut theirs, mut our_usec, mut their_usec) = (vec![], vec![], vec![], vec![]);
        let (mut raw, mut raw_usec) = (vec![], vec![]);
        try_usec(&server);
        for round in 0..3 {
            ours.push(rust_async(&server, requests, round));
            our_usec.push(try_usec(&server));
            raw.push(raw_async(&server, requests, round));
            raw_usec.push(try_usec(&server));
            theirs.push(redis_benchmark(&server, requests, round));
            their_usec.push(try_usec(&server));
        }
        let (ours, theirs, raw) = (median(ours), median(theirs), median(raw));
        let ratio = ours / theirs;
        let mut md = String::new();
        writeln!(
            md,
            "\n## Async clients\n\n| load ({requests} purchases of fresh users, 3 rounds interleaved, median) | tries/s | server µs per TRY |\n| --- | ---: | ---: |"
        )
        .unwrap();
        writeln!(
            md,
            "| Rust `aio::Sale::try_buy`, 256 tokio tasks, one multiplexed connection | {ours:.0} | {:.2} |",
            median(our_usec)
        )
        .unwrap();
        writeln!(
            md,
            "| redis-rs alone: SECKILL.TRY with an ID, 256 tokio tasks, one multiplexed connection | {raw:.0} | {:.2} |",
            median(raw_usec)
        )
        .unwrap();
        writeln!(
            md,
            "| redis-benchmark -P 16 -c 16, SECKILL.TRY | {theirs:.0} | {:.2} |",
            median(their_usec)
        )
        .unwrap();
        if let Some((asyncio, threads)) = python(&server, (requests / 10).max(300)) {
            writeln!(
                md,
                "| Python `seckill.asyncio.Sale.try_buy`, 256 tasks, one client | {asyncio:.0} | |\n| Python `seckill.Sale.try_buy`, 32 threads, one client | {threads:.0} | |\n\nPython asyncio / threads: {:.2}x (reported, no goal).",
                asyncio / threads
            )
            .unwrap();
        }
        writeln!(
            md,
            "\nThe library against redis-rs alone on the same connection: {:.2}x.",
            ours / raw
        )
        .unwrap();
        let targets = format!(
            "| async Rust client on one multiplexed connection >= 0.8x redis-benchmark -P 16 -c 16 | {ratio:.2}x | {} |\n",
            if ratio >= 0.8 { "yes" } else { "**no**" }
        );
        (md, targets)
    }
}

/// The client libraries' locks against redis-py's own `Lock` (bench/python_locks.py):
/// uncontended hold + release, and the handoff from a release to a waiting holder's grant.
mod client_locks {
    use super::{Config, python_numbers};
    use seckill_harness::Server;
    use std::fmt::Write;

    pub fn section(cfg: &Config) -> (String, String) {
        let server = Server::start();
        let holds = (cfg.requests / 30).max(300);
        let args = [server.port.to_string(), holds.to_string(), "50".to_string()];
        let n = python_numbers("python_locks.py", &args, 10);
        let (ours, theirs) = (n[0], n[1]);
        let mut md = String::new();
        writeln!(
            md,
            "\n## Locks in the client libraries\n\n| Python, one thread ({holds} holds, 3 rounds interleaved, median) | holds/s | server µs per call |\n| --- | ---: | ---: |"
        )
        .unwrap();
        writeln!(
            md,
            "| `seckill.Lock.hold(wait_ms=0)` + `release()` (LOCK.ACQUIRE, LOCK.RELEASE) | {ours:.0} | {:.2} + {:.2} |",
            n[2], n[3]
        )
        .unwrap();
        writeln!(
            md,
            "| redis-py `Lock.acquire(blocking=False)` + `release()` (SET NX PX, EVALSHA) | {theirs:.0} | {:.2} + {:.2} |",
            n[4], n[5]
        )
        .unwrap();
        writeln!(
            md,
            "\n| handoff, release to the waiter's grant (50 handoffs) | p50 ms | p99 ms |\n| --- | ---: | ---: |\n| `seckill.Lock`: the waiter waits in the server | {:.3} | {:.3} |\n| redis-py `Lock(blocking=True)`: the waiter polls | {:.3} | {:.3} |",
            n[6], n[7], n[8], n[9]
        )
        .unwrap();
        let uncontended = ours / theirs;
        let handoff = n[8] / n[6];
        let targets = format!(
            "| Python lock uncontended hold + release >= 1.5x redis-py Lock | {uncontended:.2}x | {} |\n| Python lock handoff p50 >= 20x lower than redis-py's polling Lock | {handoff:.0}x | {} |\n",
            if uncontended >= 1.5 { "yes" } else { "**no**" },
            if handoff >= 20.0 { "yes" } else { "**no**" }
        );
        (md, targets)
    }
}

/// The sold-out cache (`with_local_cache`, Python `local_cache=True`): sold-out purchases per
/// second in one client process with the cache and without, the server's SECKILL.TRY calls
/// per 1 M sold-out tries with it, and how soon a returned unit is sold through it.
mod sold_out_cache {
    use super::{Config, median, python_numbers, reset_stats, usec_per_call};
    use seckill_client::{FlashSale, PartitionedSale, Sale, SaleSpec, SoldOutCache, TryReply};
    use seckill_harness::{Server, command_calls};
    use std::fmt::Write;
    use std::time::Instant;

    const PARTITIONS: u32 = 16;

    fn rate(sale: &impl FlashSale, con: &mut redis::Connection, tries: usize) -> f64 {
        let started = Instant::now();
        for _ in 0..tries {
            assert_eq!(
                sale.try_buy(&mut *con, "late", 1).unwrap(),
                TryReply::SoldOut
            );
        }
        tries as f64 / started.elapsed().as_secs_f64()
    }

    pub fn section(cfg: &Config) -> (String, String) {
        let server = Server::start();
        let mut con = server.con();
        let mut admin = server.con();
        let (tries_off, tries_on) = ((cfg.requests / 15).max(300), (cfg.requests * 10).max(3_000));
        let cache = SoldOutCache::new([server.url()]).unwrap();
        let off = Sale::create(&mut con, "bench:cache:one", &SaleSpec::new(1, 1)).unwrap();
        let on = Sale::new("bench:cache:one").with_local_cache(&cache);
        let spec = SaleSpec::new(u64::from(PARTITIONS), PARTITIONS);
        let partitioned = PartitionedSale::create(&mut con, "bench:cache:p", &spec)
            .unwrap()
            .with_local_cache(&cache);
        assert!(matches!(
            on.try_buy(&mut con, "first", 1).unwrap(),
            TryReply::Bought { .. }
        ));
        for n in 0..40 {
            partitioned.try_buy(&mut con, format!("p{n}"), 1).unwrap();
        }
        // The first refusals make the marks.
        assert_eq!(on.try_buy(&mut con, "late", 1).unwrap(), TryReply::SoldOut);
        assert_eq!(
            partitioned.try_buy(&mut con, "late", 1).unwrap(),
            TryReply::SoldOut
        );
        let (mut offs, mut ons, mut parts, mut usecs) = (vec![], vec![], vec![], vec![]);
        let (mut per_million, mut part_per_million) = (0.0f64, 0.0f64);
        for _ in 0..3 {
            reset_stats(&mut admin);
            offs.push(rate(&off, &mut con, tries_off));
            usecs.push(usec_per_call(&mut admin, "seckill.try").unwrap_or(0.0));
            let before = command_calls(&mut admin, "seckill.try");
            ons.push(rate(&on, &mut con, tries_on));
            let sent = command_calls(&mut admin, "seckill.try") - before;
            per_million = per_million.max(sent as f64 * 1e6 / tries_on as f64);
            let before = command_calls(&mut admin, "seckill.try");
            parts.push(rate(&partitioned, &mut con, tries_on));
            let sent = command_calls(&mut admin, "seckill.try") - before;
            part_per_million = part_per_million.max(sent as f64 * 1e6 / tries_on as f64);
        }
        // The lag: another client cancels; a buyer spinning through the cache buys it.
        let mut lags = Vec::new();
        let mut owner = "first".to_string();
        for n in 0..20 {
            assert_eq!(on.try_buy(&mut con, "late", 1).unwrap(), TryReply::SoldOut);
            let returned: i64 = redis::cmd("SECKILL.CANCEL")
                .arg("bench:cache:one")
                .arg(&owner)
                .query(&mut admin)
                .unwrap();
            assert_eq!(returned, 1);
            let changed = Instant::now();
            owner = format!("lag{n}");
            while on.try_buy(&mut con, &owner, 1).unwrap() == TryReply::SoldOut {}
            lags.push(changed.elapsed().as_secs_f64() * 1000.0);
        }
        let (off, on_rate, part) = (median(offs), median(ons), median(parts));
        let usec = median(usecs);
        let lag_p50 = median(lags.clone());
        let lag_max = lags.iter().copied().fold(0.0, f64::max);

        let args = [
            server.port.to_string(),
            (tries_off / 2).to_string(),
            (tries_on / 10).to_string(),
        ];
        let py = python_numbers("python_sold_out.py", &args, 8);

        let mut md = String::new();
        writeln!(
            md,
            "\n## The sold-out cache\n\nSold-out purchases in one client process on one thread (3 rounds interleaved, median): every try a round trip without the cache; with it, answered in the process once the first refusal marked the sale. Server SECKILL.TRY calls per 1 M sold-out tries with the cache (worst round), server µs per call without.\n\n| client | off: tries/s | on: tries/s | ratio | on, {PARTITIONS} partitions: tries/s | TRY per 1 M (one key, {PARTITIONS} partitions) | server µs per TRY |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
        )
        .unwrap();
        writeln!(
            md,
            "| Rust, sync | {off:.0} | {on_rate:.0} | {:.0}x | {part:.0} | {per_million:.1} / {part_per_million:.1} | {usec:.2} |",
            on_rate / off
        )
        .unwrap();
        writeln!(
            md,
            "| Python, sync | {:.0} | {:.0} | {:.0}x | {:.0} | {:.1} / {:.1} | {:.2} |",
            py[0],
            py[1],
            py[1] / py[0],
            py[2],
            py[3],
            py[4],
            py[5]
        )
        .unwrap();
        writeln!(
            md,
            "\nA unit cancelled by another client, until a buyer spinning through the cache buys it (20 samples): Rust p50 {lag_p50:.3} ms, max {lag_max:.3} ms; Python p50 {:.3} ms, max {:.3} ms.",
            py[6], py[7]
        )
        .unwrap();
        let (rust_ratio, py_ratio) = (on_rate / off, py[1] / py[0]);
        let worst = per_million.max(part_per_million).max(py[3]).max(py[4]);
        let targets = format!(
            "| sold-out try_buy with the cache >= 100x without, Rust | {rust_ratio:.0}x | {} |\n| sold-out try_buy with the cache >= 100x without, Python | {py_ratio:.0}x | {} |\n| server SECKILL.TRY per 1 M sold-out tries with the cache <= P ({PARTITIONS}) | {worst:.1} | {} |\n",
            if rust_ratio >= 100.0 { "yes" } else { "**no**" },
            if py_ratio >= 100.0 { "yes" } else { "**no**" },
            if worst <= f64::from(PARTITIONS) {
                "yes"
            } else {
                "**no**"
            }
        );
        (md, targets)
    }
}
