//! The measurements the rows share: redis-benchmark runs, the load generators redis-benchmark
//! cannot stand in for, server time per call, memory, and `--scale`.

use redis::{Connection, Script};
use seckill_harness::{Server, used_memory, wait_until};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

pub(crate) struct Config {
    pub(crate) requests: usize,
    pub(crate) clients: usize,
    pub(crate) memory_buyers: usize,
    pub(crate) handoff_samples: usize,
    pub(crate) out: PathBuf,
}

/// The seed's Lua seckill: SISMEMBER + GET + DECR + SADD.
pub(crate) const LUA_SECKILL: &str = "\
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -2 end
local stock = tonumber(redis.call('GET', KEYS[1]))
if stock <= 0 then return -1 end
redis.call('SADD', KEYS[2], ARGV[1])
return redis.call('DECR', KEYS[1])";

/// The fair peer of TRY with EVENTS: the seed's script plus the order event, XADD to a stream.
pub(crate) const LUA_SECKILL_XADD: &str = "\
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -2 end
local stock = tonumber(redis.call('GET', KEYS[1]))
if stock <= 0 then return -1 end
redis.call('SADD', KEYS[2], ARGV[1])
local left = redis.call('DECR', KEYS[1])
redis.call('XADD', KEYS[3], '*', 'event', 'purchase', 'user', ARGV[1], 'qty', '1', 'remaining', left)
return left";

pub(crate) const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// Users for the limit path: redis-benchmark's `__rand_int__` is 12 zero-padded digits.
pub(crate) const LIMIT_USERS: usize = 1_000;

pub(crate) fn benchmark_binary() -> String {
    std::env::var("REDIS_BENCHMARK").unwrap_or_else(|_| "redis-benchmark".to_string())
}

/// Rounds of every row, interleaved (each round runs every row once, so a slow minute on this
/// shared machine hits all rows alike); the median round is reported.
pub(crate) const REPEATS: usize = 3;

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The server's own time per call of `command` since the last `CONFIG RESETSTAT`, in
/// microseconds (INFO commandstats), which does not depend on the load generator.
pub(crate) fn usec_per_call(con: &mut Connection, command: &str) -> Option<f64> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(con).ok()?;
    let prefix = format!("cmdstat_{command}:");
    let line = text.lines().find_map(|l| l.strip_prefix(&prefix))?;
    line.split(',')
        .find_map(|field| field.strip_prefix("usec_per_call="))?
        .parse()
        .ok()
}

pub(crate) fn reset_stats(con: &mut Connection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
}

/// Puts the server on core 0 and this process (and the redis-benchmark it starts) on core 1,
/// so that client and server do not take turns on one core.
pub(crate) fn pin_to_cores(server: &Server) -> String {
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
pub(crate) fn redis_benchmark_once(
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
pub(crate) fn lock_pairs(server: &Server, cfg: &Config, pipeline: usize, module: bool) -> f64 {
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

pub(crate) fn lock_unlock_sequential(
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
pub(crate) fn memory_per_buyer(server: &Server, buyers: usize) -> (f64, f64) {
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
pub(crate) fn handoff_latency(server: &Server, samples: usize, module: bool) -> Vec<f64> {
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

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) pipeline: usize,
    pub(crate) ops: f64,
    /// Median server time per call (of the row's command), microseconds.
    pub(crate) usec: Option<f64>,
}

/// `bench --scale [N...]`: memory, SAVE and load of one sale with N distinct buyers against a
/// SET with the same N members, each alone on a fresh server (`make bench-scale`).
pub(crate) fn scale(sizes: &[usize], out: &Path) {
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
