//! `make bench`: the module measured against plain Redis commands on one server, in one run.
//!
//! Single-command rows use `redis-benchmark` (`REDIS_BENCHMARK`), all with the same clients,
//! request count, pipeline depth and random user ids. Rows that need two commands per
//! operation (lock + unlock) or a measurement redis-benchmark cannot make (memory, handoff
//! latency) use the small load generators of `measure.rs`; the cluster, async-client,
//! client-lock and sold-out-cache sections are files of their own. Results go to the terminal and to
//! `<out>/latest.md`, `<out>/latest.csv` and `<out>/latest.png` (default out: bench/results).
//! `bench --smoke --out DIR` runs a few hundred requests per row (used by `make test`).

mod async_clients;
mod client_locks;
mod cluster;
mod measure;
mod sold_out_cache;

use measure::*;
use seckill_harness::Server;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    writeln!(md, "\nLock rows count commands (two per lock + unlock) from the Rust load generator in `examples/bench/measure.rs`; \
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
