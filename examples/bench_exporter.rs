//! `make bench`'s "Watching a sale" (#48): `seckill-exporter` over one server holding 10 000
//! sale keys. A scrape's duration and the longest call Redis served for it (SLOWLOG with every
//! call logged), and the module's server time per `SECKILL.TRY` (INFO commandstats) under
//! `redis-benchmark` with and without a scrape every second, in interleaved rounds. Writes
//! bench/results/exporter.md.

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use seckill_harness::{Server, commandstat, free_port, http, redis_benchmark_try, wait_until};

const SALES: usize = 10_000;
const SCRAPES: usize = 5;
const ROUNDS: usize = 3;
const TRIES: usize = 200_000;

fn scrape(address: &str) -> (Duration, usize) {
    let started = Instant::now();
    let (status, body) = http::request(address, "GET", "/metrics").expect("the exporter");
    assert_eq!(status, 200, "{body}");
    let sales = body
        .lines()
        .filter(|l| l.starts_with("seckill_sale_stock{"))
        .count();
    (started.elapsed(), sales)
}

/// Every call in the slow log (every call is logged) as (µs, command, SCAN's), then clears it.
fn logged_calls(con: &mut redis::Connection) -> Vec<(u64, String)> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(1_000_000)
        .query(con)
        .unwrap();
    let mut calls = Vec::new();
    for entry in entries {
        if let redis::Value::Array(fields) = entry {
            let micros: u64 = redis::from_redis_value(fields[2].clone()).unwrap_or(0);
            let args: Vec<Vec<u8>> = redis::from_redis_value(fields[3].clone()).unwrap_or_default();
            let name = String::from_utf8_lossy(args.first().map_or(&b""[..], |a| a)).into_owned();
            if name.to_uppercase() != "SLOWLOG" {
                calls.push((micros, name.to_uppercase()));
            }
        }
    }
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(con).unwrap();
    calls
}

fn try_usec_per_call(server: &Server, con: &mut redis::Connection, round: usize) -> f64 {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
    redis_benchmark_try(server, "bench:try", &format!("r{round}u"), TRIES);
    commandstat(con, "seckill.try", "usec_per_call")
}

fn main() {
    let server = Server::start();
    let mut con = server.con();
    let mut pipe = redis::pipe();
    for n in 0..SALES {
        pipe.cmd("SECKILL.INIT")
            .arg(format!("sale:{n}"))
            .arg(100)
            .ignore();
    }
    pipe.exec(&mut con).unwrap();
    let _: () = redis::cmd("SECKILL.INIT")
        .arg("bench:try")
        .arg(i64::MAX)
        .query(&mut con)
        .unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let address = format!("127.0.0.1:{}", free_port());
    let mut exporter = Command::new(root.join("target/release/seckill-exporter"))
        .args([
            "--redis",
            &server.url(),
            "--listen",
            &address,
            "--timeout-ms",
            "10000",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("target/release/seckill-exporter: make build");
    wait_until(Duration::from_secs(30), "the exporter", || {
        TcpStream::connect(&address).is_ok()
    });

    // Scrapes of 10 000 sales, every call logged.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .arg("slowlog-max-len")
        .arg(1_000_000)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();
    let mut durations = Vec::new();
    let mut calls = Vec::new();
    for _ in 0..SCRAPES {
        let (took, sales) = scrape(&address);
        assert_eq!(sales, SALES + 1, "every sale in the scrape");
        durations.push(took);
        calls.extend(logged_calls(&mut con));
    }
    calls.sort();
    let at = |share: f64| calls[((calls.len() - 1) as f64 * share) as usize].0;
    let longest_of = |command: &str| {
        calls
            .iter()
            .filter(|(_, name)| name == command)
            .map(|(us, _)| *us)
            .max()
            .unwrap_or(0)
    };
    let median_of = |command: &str| {
        let mut of: Vec<u64> = calls
            .iter()
            .filter(|(_, name)| name == command)
            .map(|(us, _)| *us)
            .collect();
        of.sort();
        of.get(of.len() / 2).copied().unwrap_or(0)
    };
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    durations.sort();
    let median = durations[SCRAPES / 2];
    let worst = durations[SCRAPES - 1];

    // TRY's server time with and without a scrape a second, interleaved.
    let (mut quiet, mut scraped) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        quiet.push(try_usec_per_call(&server, &mut con, 2 * round));
        let scraping = Arc::new(AtomicBool::new(true));
        let scraper = {
            let (scraping, address) = (scraping.clone(), address.clone());
            std::thread::spawn(move || {
                while scraping.load(Ordering::Relaxed) {
                    scrape(&address);
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };
        scraped.push(try_usec_per_call(&server, &mut con, 2 * round + 1));
        scraping.store(false, Ordering::Relaxed);
        scraper.join().unwrap();
    }
    let _ = exporter.kill();
    let _ = exporter.wait();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let md = format!(
        "# Watching a sale\n\nGenerated by `make bench` (examples/bench_exporter.rs): \
         `seckill-exporter` over one server holding {SALES} sale keys (#48's goals: a scrape \
         under 1 s, no Redis call over 1 ms, TRY's server time unchanged beyond noise).\n\n\
         | measure | value |\n| --- | --- |\n\
         | scrape of {SALES} sales, median of {SCRAPES} | {:.0} ms |\n\
         | scrape, slowest of {SCRAPES} | {:.0} ms |\n\
         | Redis calls for the scrapes (SLOWLOG, every call logged) | {} |\n\
         | their p99.9, and the longest (wall time: a preempted server counts) | {} µs, {} µs |\n\
         | `SCAN .. COUNT 200 TYPE seckill-S`: median, longest | {} µs, {} µs |\n\
         | `SECKILL.INFO`: median, longest | {} µs, {} µs |\n\
         | `SECKILL.TRY` server time, no scrape ({ROUNDS} rounds of {TRIES}) | {} µs/call |\n\
         | `SECKILL.TRY` server time, a scrape every second (interleaved) | {} µs/call |\n\
         | ratio, scraped / not | {:.2} |\n",
        median.as_secs_f64() * 1000.0,
        worst.as_secs_f64() * 1000.0,
        calls.len(),
        at(0.999),
        at(1.0),
        median_of("SCAN"),
        longest_of("SCAN"),
        median_of("SECKILL.INFO"),
        longest_of("SECKILL.INFO"),
        fmt(&quiet),
        fmt(&scraped),
        mean(&scraped) / mean(&quiet),
    );
    print!("{md}");
    let dir = root.join("bench/results");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("exporter.md"), md).unwrap();
}
