//! `make bench`'s "Availability under a fault" (#38): the share of buyers answered within
//! 100 ms while one master of three is frozen (SIGSTOP), mid-sale and after sell-out, per
//! language and flavour, against the same buyers with no fault in the same run (rounds
//! interleaved: none, frozen, none, frozen). Only buyers whose partitions are on the other
//! masters are timed: the goal is that a fault costs them nothing. Beside it, the healthy
//! masters' server time per SECKILL.TRY and SECKILL.INFO (INFO commandstats). Writes
//! bench/results/availability.md.

use seckill_client::{ClusterSession, FlashSale, PartitionedSale, SaleSpec};
use seckill_harness::buyers::{Buyers, FLAVOURS, UNFAILED, builder, master_port, users_off};
use seckill_harness::{Server, start_cluster_with_replicas, wait_until};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const PARTITIONS: u32 = 16;
const WINDOW: Duration = Duration::from_secs(3);
const SEAL_MS: u64 = 200;
const ROUNDS: usize = 2;

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    MidSale,
    SoldOut,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::MidSale => "mid-sale",
            Phase::SoldOut => "after sell-out, past the seal",
        }
    }
}

/// A new sale for one window: plenty of stock mid-sale; sold out, and every seal lapsed, after.
fn new_sale(urls: &[String], name: &str, phase: Phase) -> PartitionedSale {
    let mut session = ClusterSession::cluster(|| builder(urls)).unwrap();
    let stock = match phase {
        Phase::MidSale => 1_000_000,
        Phase::SoldOut => u64::from(PARTITIONS) * 2,
    };
    let sale = PartitionedSale::create(&mut session, name, &SaleSpec::new(stock, PARTITIONS))
        .unwrap()
        .with_seal_ms(SEAL_MS);
    if phase == Phase::SoldOut {
        let mut n = 0;
        while sale.info(&mut session).unwrap().remaining > 0 {
            sale.try_buy(&mut session, format!("early{n}"), 1).unwrap();
            n += 1;
        }
    }
    sale
}

fn unsealed(urls: &[String], sale: &PartitionedSale) -> bool {
    let mut session = ClusterSession::cluster(|| builder(urls)).unwrap();
    let infos = sale.partition_infos(&mut session).unwrap();
    infos.iter().all(|info| !info.sealed)
}

/// Server µs per call of `command` over `masters`, since their last CONFIG RESETSTAT.
fn usec_per_call(masters: &[&Server], command: &str) -> f64 {
    let (mut calls, mut usec) = (0.0, 0.0);
    for master in masters {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut master.con())
            .unwrap();
        let Some(line) = info
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        else {
            continue;
        };
        for field in line.split([':', ',']) {
            if let Some(v) = field.strip_prefix("calls=") {
                calls += v.parse::<f64>().unwrap();
            }
            if let Some(v) = field.strip_prefix("usec=") {
                usec += v.parse::<f64>().unwrap();
            }
        }
    }
    if calls > 0.0 { usec / calls } else { 0.0 }
}

fn reset_stats(masters: &[&Server]) {
    for master in masters {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut master.con())
            .unwrap();
    }
}

/// One window's figures: flavour -> (share within 100 ms, p99 ms, calls).
type Window = Vec<(String, f64, f64, usize)>;

/// The Python flavours' window, through bench/python_availability.py.
fn python_window(
    entry: &str,
    name: &str,
    victim_port: u16,
    fault: impl FnOnce(),
    heal: impl FnOnce(),
) -> Window {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let port = entry
        .trim_start_matches("redis://127.0.0.1:")
        .trim_end_matches('/');
    let mut child = Command::new(root.join(".venv/bin/python"))
        .arg(root.join("bench/python_availability.py"))
        .args([
            port,
            name,
            &victim_port.to_string(),
            &WINDOW.as_secs_f64().to_string(),
            &SEAL_MS.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("bench/python_availability.py (make venv)");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    fault();
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let mut window = Vec::new();
    for flavour in ["sync", "asyncio"] {
        let line = lines.next().unwrap().unwrap();
        let v: Vec<f64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        window.push((format!("Python {flavour}"), v[1], v[3], v[0] as usize));
    }
    assert!(child.wait().unwrap().success());
    heal();
    window
}

fn main() {
    let nodes = start_cluster_with_replicas(3, 1, &UNFAILED);
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let mut rows: Vec<(Phase, bool, Window, f64, f64)> = Vec::new();
    let mut serial = 0;
    for phase in [Phase::MidSale, Phase::SoldOut] {
        for _ in 0..ROUNDS {
            for frozen in [false, true] {
                for python in [false, true] {
                    serial += 1;
                    let name = format!("avail:bench:{serial}");
                    let sale = new_sale(&urls, &name, phase);
                    let victim_port = master_port(&urls[0], &sale.partition_keys()[0]);
                    let victim = nodes.iter().find(|n| n.port == victim_port).unwrap();
                    let entry: Vec<String> = urls
                        .iter()
                        .filter(|u| !u.ends_with(&format!(":{victim_port}/")))
                        .cloned()
                        .collect();
                    let healthy: Vec<&Server> =
                        nodes.iter().filter(|n| n.port != victim_port).collect();
                    let fault = || {
                        if phase == Phase::SoldOut {
                            wait_until(Duration::from_secs(10), "the seals to lapse", || {
                                unsealed(&entry, &sale)
                            });
                        }
                        reset_stats(&healthy);
                        if frozen {
                            victim.signal(libc::SIGSTOP);
                        }
                    };
                    let heal = || {
                        if frozen {
                            victim.signal(libc::SIGCONT);
                        }
                    };
                    let window = if python {
                        python_window(&entry[0], &name, victim_port, fault, heal)
                    } else {
                        let users = users_off(&urls[0], &sale, victim_port, "rs", 2000);
                        let buyers = Buyers {
                            urls: &entry,
                            name: &name,
                            seal_ms: SEAL_MS,
                            users: &users,
                            flavours: &FLAVOURS,
                            window: WINDOW,
                        };
                        let record = buyers.run(fault, heal);
                        FLAVOURS
                            .iter()
                            .map(|f| {
                                let figures = record.figures(f).expect("calls");
                                (
                                    format!("Rust {f}"),
                                    figures.within_100ms,
                                    figures.p99.as_secs_f64() * 1000.0,
                                    figures.calls,
                                )
                            })
                            .collect()
                    };
                    let (try_us, info_us) = (
                        usec_per_call(&healthy, "seckill.try"),
                        usec_per_call(&healthy, "seckill.info"),
                    );
                    for (flavour, within, p99, calls) in &window {
                        println!(
                            "{} {} {flavour}: {:.1}% within 100 ms, p99 {p99:.1} ms, {calls} calls",
                            phase.name(),
                            if frozen { "frozen" } else { "healthy" },
                            within * 100.0
                        );
                    }
                    rows.push((phase, frozen, window, try_us, info_us));
                }
            }
        }
    }
    let mut md = String::from(
        "# Availability under a fault\n\nGenerated by `make bench` (examples/bench_availability.rs). 3 masters + 3 \
         replicas, 16 partitions; each window 3 s of buyers of the partitions on the two other masters \
         (Rust: 4 sync threads on ClusterSessions, 8 async tasks on one aio::ClusterSession, each with and \
         without the sold-out cache; Python: 4 threads, 8 asyncio tasks, in two processes), one master SIGSTOPped for the \
         window or not; rounds interleaved (healthy, frozen), the worse of 2 rounds shown. Goal: every \
         buyer answered within 100 ms with the master frozen.\n\n\
         | phase | flavour | within 100 ms, healthy | within 100 ms, frozen | p99 healthy | p99 frozen |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for phase in [Phase::MidSale, Phase::SoldOut] {
        let flavours: Vec<String> = rows
            .iter()
            .filter(|r| r.0 == phase)
            .flat_map(|r| r.2.iter().map(|w| w.0.clone()))
            .fold(Vec::new(), |mut seen, f| {
                if !seen.contains(&f) {
                    seen.push(f);
                }
                seen
            });
        for flavour in flavours {
            let worst = |frozen: bool| {
                let of = rows
                    .iter()
                    .filter(|r| r.0 == phase && r.1 == frozen)
                    .flat_map(|r| r.2.iter())
                    .filter(|w| w.0 == flavour);
                let within = of.clone().map(|w| w.1).fold(f64::INFINITY, f64::min);
                let p99 = of.map(|w| w.2).fold(0.0, f64::max);
                (within, p99)
            };
            let ((healthy, healthy_p99), (frozen, frozen_p99)) = (worst(false), worst(true));
            writeln!(
                md,
                "| {} | {flavour} | {:.1}% | {:.1}% | {healthy_p99:.1} ms | {frozen_p99:.1} ms |",
                phase.name(),
                healthy * 100.0,
                frozen * 100.0
            )
            .unwrap();
        }
    }
    let median = |frozen: bool, pick: fn(&(Phase, bool, Window, f64, f64)) -> f64| {
        let mut v: Vec<f64> = rows.iter().filter(|r| r.1 == frozen).map(pick).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    writeln!(
        md,
        "\nServer time on the healthy masters (median of the windows): SECKILL.TRY {:.2} µs healthy, {:.2} µs \
         frozen; SECKILL.INFO (the borrows' reads) {:.2} µs healthy, {:.2} µs frozen.",
        median(false, |r| r.3),
        median(true, |r| r.3),
        median(false, |r| r.4),
        median(true, |r| r.4)
    )
    .unwrap();
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/results");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("availability.md"), &md).unwrap();
    println!("{md}");
}
