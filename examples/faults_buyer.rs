//! The Rust client process of `make faults` (tools/faults): tokio buyers of the partitioned
//! sale through `seckill_client::aio`, `try_buy` on a handle of the default durability (a
//! replica's acknowledgement) and on one of `Durability::Master` in turn, every
//! connection from `--source` (an `aio::ClusterSession`'s source address), so that a partition
//! can cut these clients too. Each operation is written to stdout as one history line, the
//! schema of tools/faults/history.py (`ok` applied, `fail` known not applied, `info` unknown).
//!
//! Usage: `faults_buyer --name N --source IP --nodes URL,URL,... --sale NAME --seconds S
//! [--buyers 8] [--run DIR]` (`--run`: the run's folder, unused but on the command line, so
//! that the harness's cleanup check finds the process by it).

use seckill_client::aio::{ClusterSession, FlashSale, PartitionedSale};
use seckill_client::{Durability, Error, RetryPolicy};
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A purchase's answer within this (tools/faults/workload.py's DEADLINE_S).
const DEADLINE: Duration = Duration::from_secs(4);
/// Each buyer's pause between two purchases (workload.py's PACE_S).
const PACE: Duration = Duration::from_millis(25);

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |t| t.as_secs_f64())
}

/// `text` as a JSON string.
fn json(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One history line: keys sorted as Python's `json.dumps(sort_keys=True)` writes them.
fn line(
    process: &str,
    f: &str,
    start: f64,
    end: f64,
    kind: &str,
    user: &str,
    value: &str,
) -> String {
    format!(
        "{{\"args\": {{\"user\": {}}}, \"end\": {end}, \"f\": {}, \"process\": {}, \"start\": {start}, \"type\": {}, \"value\": {value}}}",
        json(user),
        json(f),
        json(process),
        json(kind)
    )
}

/// A purchase's outcome in the history's terms: its type and value.
fn outcome(result: seckill_client::Result<i64>) -> (&'static str, String) {
    match result {
        Ok(code) => (if code >= 0 { "ok" } else { "fail" }, code.to_string()),
        Err(e @ Error::Unavailable { .. }) => ("fail", json(&format!("unavailable: {e}"))),
        Err(Error::NotReplicated { reply, .. }) => {
            ("info", format!("{{\"not_replicated\": {reply}}}"))
        }
        Err(e) => ("info", json(&e.to_string())),
    }
}

async fn buyer(
    process: String,
    (kept, master_only): (
        std::sync::Arc<PartitionedSale>,
        std::sync::Arc<PartitionedSale>,
    ),
    mut session: ClusterSession,
    stop_at: f64,
) {
    let mut count = 0u64;
    while now() < stop_at {
        let user = format!("{process}-u{count}");
        count += 1;
        let master = count.is_multiple_of(2);
        let start = now();
        let sale = if master { &master_only } else { &kept };
        let result = sale.try_buy(&mut session, &user, 1).await;
        let (kind, value) = outcome(result.map(|reply| reply.code()));
        let f = if master { "buy_master" } else { "buy" };
        let record = line(&process, f, start, now(), kind, &user, &value);
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{record}");
            let _ = out.flush();
        }
        tokio::time::sleep(PACE).await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: HashMap<String, String> = HashMap::new();
    let mut given = std::env::args().skip(1);
    while let (Some(key), Some(value)) = (given.next(), given.next()) {
        args.insert(key.trim_start_matches("--").to_string(), value);
    }
    let arg = |key: &str| -> Result<String, String> {
        args.get(key)
            .cloned()
            .ok_or_else(|| format!("--{key} is required"))
    };
    let (name, sale_name) = (arg("name")?, arg("sale")?);
    let seconds: f64 = arg("seconds")?.parse()?;
    let buyers: usize = args.get("buyers").map_or(Ok(8), |b| b.parse())?;
    let stop_at = now() + seconds;
    let nodes: Vec<String> = arg("nodes")?.split(',').map(String::from).collect();
    let mut session = ClusterSession::builder(nodes)?
        .source_address(arg("source")?.parse()?)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await?;
    let retry = RetryPolicy {
        deadline: DEADLINE,
        ..RetryPolicy::default()
    };
    let open = PartitionedSale::open(&mut session, &sale_name).await?;
    let kept = std::sync::Arc::new(open.with_retry(retry));
    let open = PartitionedSale::open(&mut session, &sale_name).await?;
    // The answer without a replica's acknowledgement, to show the window it leaves open.
    let master_only = open.with_retry(retry).durability(Durability::Master);
    let sales = (kept, std::sync::Arc::new(master_only));
    // A session each: a purchase's WAIT holds its connection in the server.
    let tasks: Vec<_> = (0..buyers)
        .map(|n| {
            let process = format!("{name}-b{n}");
            tokio::spawn(buyer(process, sales.clone(), session.detached(), stop_at))
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    Ok(())
}
