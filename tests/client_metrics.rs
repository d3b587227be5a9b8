//! The Rust client's metrics (feature `metrics`, on the `metrics` facade) against a real
//! server: every call of a sale handle, and each hold and release of a lock, sync and async,
//! counts once under its operation and outcome and is timed once; a resent purchase counts its
//! retries; the names are the shared table's (`clients/metrics.txt`), which the Python package
//! records under too.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use seckill_client::aio::{self, FlashSale as _};
use seckill_client::{Error, FlashSale, Lock, RetryPolicy, Sale, SaleSpec, SoldOutCache, TryReply};
use seckill_harness::Server;
use std::collections::BTreeMap;
use std::time::Duration;

type Counts = BTreeMap<(String, String, String), u64>;

/// Every series the recorder holds: (name, operation, outcome) → the counter's value, or the
/// histogram's number of samples.
fn counts(snapshotter: &metrics_util::debugging::Snapshotter) -> Counts {
    let mut counts = Counts::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let label = |name: &str| {
            key.labels()
                .find(|label| label.key() == name)
                .map_or(String::new(), |label| label.value().to_string())
        };
        // Each name is recorded as the shared table's kind says.
        let histogram = key.name() == "seckill_client_call_duration_seconds";
        let count = match value {
            DebugValue::Counter(n) if !histogram => n,
            DebugValue::Histogram(samples) if histogram => samples.len() as u64,
            other => panic!("{key:?} recorded as {other:?}"),
        };
        *counts
            .entry((key.name().to_string(), label("operation"), label("outcome")))
            .or_default() += count;
    }
    counts
}

fn calls(counts: &Counts, operation: &str, outcome: &str) -> u64 {
    let key = |name: &str| (name.to_string(), operation.to_string(), outcome.to_string());
    let called = counts
        .get(&key("seckill_client_calls_total"))
        .copied()
        .unwrap_or(0);
    let timed = counts
        .get(&key("seckill_client_call_duration_seconds"))
        .copied()
        .unwrap_or(0);
    assert_eq!(
        called, timed,
        "{operation} {outcome}: counted {called}, timed {timed}"
    );
    called
}

/// The calls made below, by operation and outcome, as the library must count them.
fn expected() -> BTreeMap<(&'static str, &'static str), u64> {
    BTreeMap::from([
        (("try_buy", "bought"), 3),
        (("try_buy", "over_limit"), 1),
        (("try_buy", "sold_out"), 1),
        (("try_buy", "local_refusal"), 2),
        (("try_buy", "error"), 1),
        (("confirm", "ok"), 1),
        (("confirm", "error"), 1),
        (("cancel", "ok"), 1),
        (("restock", "ok"), 1),
        (("bought", "ok"), 1),
        (("info", "ok"), 1),
        (("join", "error"), 1),
        (("position", "error"), 1),
        (("leave", "error"), 1),
        (("place", "error"), 1),
        (("admit", "error"), 1),
        (("lock_hold", "ok"), 2),
        (("lock_hold", "not_granted"), 1),
        (("lock_release", "ok"), 1),
        (("lock_release", "lost"), 1),
    ])
}

/// The calls counted in `expected`, on one handle of each API (`calls_sync`, `calls_async`).
macro_rules! sale_calls {
    ($sale:expr, $plain:expr, $con:expr, $($await:tt)*) => {{
        let (sale, plain, con) = ($sale, $plain, $con);
        assert!(matches!(sale.try_buy(con, "a", 1)$($await)*.unwrap(), TryReply::Bought { .. }));
        assert_eq!(sale.try_buy(con, "a", 1)$($await)*.unwrap(), TryReply::OverLimit);
        assert!(matches!(sale.try_buy(con, "b", 1)$($await)*.unwrap(), TryReply::Bought { .. }));
        assert!(matches!(sale.try_buy(con, "c", 1)$($await)*.unwrap(), TryReply::Bought { .. }));
        assert_eq!(sale.try_buy(con, "d", 1)$($await)*.unwrap(), TryReply::SoldOut);
        assert_eq!(sale.try_buy(con, "e", 1)$($await)*.unwrap(), TryReply::SoldOut);
        assert_eq!(sale.try_buy(con, "f", 1)$($await)*.unwrap(), TryReply::SoldOut);
        assert!(sale.try_buy(con, "", 1)$($await)*.is_err());
        assert!(sale.confirm(con, "a")$($await)*.unwrap());
        assert_eq!(sale.cancel(con, "b", None)$($await)*.unwrap(), 1);
        sale.restock(con, 1)$($await)*.unwrap();
        assert_eq!(sale.bought(con, "a")$($await)*.unwrap(), 1);
        sale.info(con)$($await)*.unwrap();
        // A sale without holds or a waiting room: the server's refusals are "error".
        assert!(plain.confirm(con, "a")$($await)*.is_err());
        assert!(plain.join(con, "a")$($await)*.is_err());
        assert!(plain.position(con, "a")$($await)*.is_err());
        assert!(plain.leave(con, "a")$($await)*.is_err());
        assert!(plain.place(con, "a")$($await)*.is_err());
        assert!(plain.admit(con, 1)$($await)*.is_err());
    }};
}

/// The lock calls counted in `expected`, on a lock of each API: granted, refused while held,
/// released; granted again, its lease deleted under it, released ("lost"). A released guard's
/// drop sends nothing and counts nothing.
macro_rules! lock_calls {
    ($lock:expr, $con:expr, $($await:tt)*) => {{
        let (lock, con) = ($lock, $con);
        let guard = lock.hold(0)$($await)*.unwrap();
        assert!(matches!(lock.hold(0)$($await)*, Err(Error::LockTimeout { .. })));
        assert!(guard.release()$($await)*);
        let guard = lock.hold(0)$($await)*.unwrap();
        let _: () = redis::cmd("DEL").arg(lock.name()).query(&mut *con).unwrap();
        assert!(!guard.release()$($await)*);
    }};
}

fn check(before: &Counts, after: &Counts, api: &str) {
    let table = include_str!("../clients/metrics.txt");
    let operations: Vec<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("operation"))
        .map(str::trim)
        .collect();
    let outcomes: Vec<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("outcome"))
        .map(str::trim)
        .collect();
    let expected = expected();
    for operation in &operations {
        for outcome in &outcomes {
            let made = calls(after, operation, outcome) - calls(before, operation, outcome);
            let want = expected.get(&(*operation, *outcome)).copied().unwrap_or(0);
            assert_eq!(made, want, "{api}: {operation} {outcome}");
        }
    }
    for (name, operation, outcome) in after.keys() {
        assert!(
            operations.contains(&operation.as_str()),
            "{name}: operation {operation:?} is not in clients/metrics.txt"
        );
        assert!(
            outcome.is_empty() || outcomes.contains(&outcome.as_str()),
            "{name}: outcome {outcome:?} is not in clients/metrics.txt"
        );
    }
}

/// One test, as the recorder is the process's: the sync calls, then the async ones, then a
/// purchase resent against a killed server.
#[test]
fn every_call_counts_once_under_its_operation_and_outcome() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();
    seckill_client::describe_metrics();
    let mut server = Server::start();
    let mut con = server.con();
    let cache = SoldOutCache::new([server.url()]).unwrap();
    let spec = SaleSpec::new(3, 1).limit(1).hold_ms(60_000);

    let before = counts(&snapshotter);
    let sale = Sale::create(&mut con, "sync", &spec)
        .unwrap()
        .with_local_cache(&cache);
    let plain = Sale::create(&mut con, "sync-plain", &SaleSpec::new(3, 1)).unwrap();
    sale_calls!(&sale, &plain, &mut con,);
    let client = redis::Client::open(server.url()).unwrap();
    lock_calls!(
        &Lock::new(client.clone(), "sync-lock", 10_000).unwrap(),
        &mut con,
    );
    let after = counts(&snapshotter);
    check(&before, &after, "sync");
    assert_eq!(sale.stats().local_refusals, 2);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let before = counts(&snapshotter);
        let sale = aio::Sale::create(&mut con, "async", &spec)
            .await
            .unwrap()
            .with_local_cache(&cache);
        let plain = aio::Sale::create(&mut con, "async-plain", &SaleSpec::new(3, 1))
            .await
            .unwrap();
        sale_calls!(&sale, &plain, &mut con, .await);
        let mut admin = server.con();
        let lock = aio::Lock::new(client.clone(), "async-lock", 10_000).unwrap();
        lock_calls!(&lock, &mut admin, .await);
        check(&before, &counts(&snapshotter), "async");

        // A purchase given up by its caller (a timeout around it while the server is paused)
        // did not learn its outcome: "unknown".
        let before = counts(&snapshotter);
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(300)
            .query(&mut admin)
            .unwrap();
        let given_up = tokio::time::timeout(
            Duration::from_millis(20),
            plain.try_buy(&mut con, "late", 1),
        );
        assert!(given_up.await.is_err());
        let after = counts(&snapshotter);
        assert_eq!(
            calls(&after, "try_buy", "unknown") - calls(&before, "try_buy", "unknown"),
            1
        );
    });

    // A purchase that cannot reach its server is resent until its deadline: its retries count.
    let before = counts(&snapshotter);
    let dead = Sale::new("sync").with_retry(RetryPolicy {
        deadline: Duration::from_millis(300),
        ..RetryPolicy::default()
    });
    server.kill();
    assert!(dead.try_buy(&mut con, "z", 1).is_err());
    let after = counts(&snapshotter);
    let retries = |counts: &Counts| {
        counts
            .get(&(
                "seckill_client_retries_total".to_string(),
                "try_buy".to_string(),
                String::new(),
            ))
            .copied()
            .unwrap_or(0)
    };
    let lost: u64 = ["unknown", "unavailable"]
        .iter()
        .map(|outcome| calls(&after, "try_buy", outcome) - calls(&before, "try_buy", outcome))
        .sum();
    assert_eq!(lost, 1, "{after:?}");
    assert!(retries(&after) > retries(&before), "{after:?}");
}
