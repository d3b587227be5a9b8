//!
//! The async clients' section of `make bench` (#28): the Rust async client's `try_buy` on one
//! multiplexed connection with 256 tokio tasks against `redis-benchmark -P 16 -c 16` sending
//! SECKILL.TRY itself, rounds interleaved, server time per call beside each; and the Python
//! asyncio client against the sync one on 32 threads (bench/python_clients.py).

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
