//! `make bench`'s "Async Rust client" (#40): purchases per second of `aio::FlashSale::try_buy`
//! from 256 tokio tasks on one `aio::ClusterSession` (the crate's own connections), and on one
//! plain `MultiplexedConnection` for comparison, against `redis-benchmark -P 16 -c 16` sending
//! `SECKILL.TRY` to the same server, every purchase a new buyer. Rounds interleaved (each round
//! runs every row once); the median round is reported, with the server's time per
//! `SECKILL.TRY` (INFO commandstats) and this process's CPU per purchase (getrusage). Writes
//! bench/results/async.md.

use seckill_client::TryReply;
use seckill_client::aio::{ClusterSession, FlashSale, Sale};
use seckill_harness::Server;
use std::fmt::Write as _;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

const TASKS: usize = 256;
const PURCHASES: usize = 200_000;
const ROUNDS: usize = 3;

struct Measure {
    per_s: f64,
    server_us: f64,
    /// This process's CPU time per purchase, microseconds (0 for redis-benchmark, another
    /// process).
    client_us: f64,
}

fn server_us(server: &Server) -> f64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.con())
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_seckill.try:"))
        .and_then(|line| {
            line.split(',')
                .find_map(|f| f.strip_prefix("usec_per_call="))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn fresh_sale(server: &Server, key: &str) {
    let _: () = redis::cmd("DEL").arg(key).query(&mut server.con()).unwrap();
    let _: () = redis::cmd("SECKILL.INIT")
        .arg(key)
        .arg(1_000_000_000u64)
        .arg("LIMIT")
        .arg(1)
        .query(&mut server.con())
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut server.con())
        .unwrap();
}

fn redis_benchmark(server: &Server, round: usize) -> Measure {
    let key = "bench:async:rb";
    fresh_sale(server, key);
    let binary = std::env::var("REDIS_BENCHMARK").unwrap_or_else(|_| "redis-benchmark".into());
    let started = Instant::now();
    let out = Command::new(&binary)
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["-n", &PURCHASES.to_string(), "-c", "16", "-P", "16", "-q"])
        .args(["-r", "100000000000"])
        .args(["SECKILL.TRY", key, &format!("r{round}:__rand_int__"), "1"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {binary}: {e}"));
    assert!(out.status.success(), "{binary} failed");
    Measure {
        per_s: PURCHASES as f64 / started.elapsed().as_secs_f64(),
        server_us: server_us(server),
        client_us: 0.0,
    }
}

/// PURCHASES purchases from TASKS tasks sharing `con`, each buyer new.
async fn library<C>(server: &Server, con: C, row: &str) -> Measure
where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    let key = format!("bench:async:{row}");
    fresh_sale(server, &key);
    let sale = Arc::new(Sale::new(key));
    let next = Arc::new(AtomicUsize::new(0));
    let (cpu, started) = (seckill_harness::cpu_time(), Instant::now());
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (sale, next, mut con) = (sale.clone(), next.clone(), con.clone());
            let row = row.to_string();
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= PURCHASES {
                        break;
                    }
                    let reply = sale.try_buy(&mut con, format!("{row}:{n}"), 1).await;
                    assert!(matches!(reply, Ok(TryReply::Bought { .. })), "{reply:?}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let (took, cpu) = (started.elapsed(), seckill_harness::cpu_time() - cpu);
    Measure {
        per_s: PURCHASES as f64 / took.as_secs_f64(),
        server_us: server_us(server),
        client_us: cpu.as_secs_f64() * 1e6 / PURCHASES as f64,
    }
}

fn median(mut rounds: Vec<Measure>) -> Measure {
    rounds.sort_by(|a, b| a.per_s.total_cmp(&b.per_s));
    rounds.swap_remove(rounds.len() / 2)
}

fn main() {
    let server = Server::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (mut rb, mut session_rows, mut plain_rows) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        rb.push(redis_benchmark(&server, round));
        let session = runtime
            .block_on(ClusterSession::connect([server.url()]))
            .unwrap();
        session_rows.push(runtime.block_on(library(&server, session, &format!("s{round}"))));
        let plain = runtime
            .block_on(
                redis::Client::open(server.url())
                    .unwrap()
                    .get_multiplexed_async_connection(),
            )
            .unwrap();
        plain_rows.push(runtime.block_on(library(&server, plain, &format!("m{round}"))));
    }
    let (rb, session, plain) = (median(rb), median(session_rows), median(plain_rows));
    let mut md = String::new();
    writeln!(
        md,
        "# Async Rust client\n\nGenerated by `make bench` (examples/bench_async.rs). {PURCHASES} \
         purchases per row, every buyer new; {TASKS} tokio tasks (multi-thread runtime) on one \
         connection vs `redis-benchmark -P 16 -c 16` sending SECKILL.TRY; {ROUNDS} rounds \
         interleaved, the median shown. Goal (#40): the session at >= 0.8x redis-benchmark.\n\n\
         | row | purchases/s | vs redis-benchmark | server us/call | client CPU us/purchase |\n\
         | --- | ---: | ---: | ---: | ---: |"
    )
    .unwrap();
    for (row, m) in [
        ("redis-benchmark -P 16 -c 16", &rb),
        ("try_buy, aio::ClusterSession", &session),
        ("try_buy, MultiplexedConnection", &plain),
    ] {
        let client = if m.client_us > 0.0 {
            format!("{:.2}", m.client_us)
        } else {
            "-".to_string()
        };
        writeln!(
            md,
            "| {row} | {:.0} | {:.2}x | {:.2} | {client} |",
            m.per_s,
            m.per_s / rb.per_s,
            m.server_us
        )
        .unwrap();
    }
    print!("{md}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/results");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("async.md"), md).unwrap();
}
