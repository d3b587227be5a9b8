//!
//! The sold-out cache (`with_local_cache`, Python `local_cache=True`): sold-out purchases per
//! second in one client process with the cache and without, the server's SECKILL.TRY calls
//! per 1 M sold-out tries with it, and how soon a returned unit is sold through it.

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
