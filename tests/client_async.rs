//! The Rust client's async API (`seckill_client::aio`) on tokio: a thousand tasks on one
//! multiplexed connection sell a one-key sale exactly while a ticker proves the runtime never
//! blocks (not even through a busy server's timeouts and the retries' backoff); a server
//! stopped mid-run fails calls within the retry deadline with a typed, retryable error and
//! serves them again once it is back, nothing bought twice; holds, events and the partitioned
//! sale on one server. (The cluster runs, async, are in tests/cluster.rs.)

use redis::AsyncConnectionConfig;
use seckill_client::aio::{FlashSale, PartitionedSale, Sale};
use seckill_client::{Error, RetryPolicy, SaleSpec, TryReply, is_retryable, partition_of};
use seckill_harness::{Server, wait_until};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

async fn multiplexed(server: &Server, timeout: Duration) -> redis::aio::MultiplexedConnection {
    let config = AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// Ticks every 10 ms until `stop`: the longest gap between two ticks. On a current-thread
/// runtime any blocking call anywhere (a thread sleep, a std lock, a sync read) stretches it.
fn ticker(stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<(u64, Duration)> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(10));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        let (mut ticks, mut worst, mut last) = (0, Duration::ZERO, Instant::now());
        while !stop.load(Ordering::Relaxed) {
            interval.tick().await;
            worst = worst.max(last.elapsed());
            last = Instant::now();
            ticks += 1;
        }
        (ticks, worst)
    })
}

#[tokio::test(flavor = "current_thread")]
async fn a_thousand_tasks_on_one_connection_sell_exactly_and_never_block_the_runtime() {
    const TASKS: usize = 1_000;
    const USERS: usize = 400;
    const STOCK: u64 = 500;
    const LIMIT: u64 = 2;
    let server = Server::start_with(&["--enable-debug-command", "yes"]);
    // A 100 ms response timeout, so the busy spell below times calls out and they retry.
    let con = multiplexed(&server, Duration::from_millis(100)).await;
    let spec = SaleSpec::new(STOCK, 1).limit(LIMIT);
    let sale = Arc::new(
        Sale::create(&mut con.clone(), "sale:async", &spec)
            .await
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = ticker(stop.clone());
    // The server goes busy for 400 ms once the first purchases are answered.
    let answered = Arc::new(AtomicUsize::new(0));
    let spell = {
        let (url, answered) = (server.url(), answered.clone());
        std::thread::spawn(move || {
            let mut direct = redis::Client::open(url).unwrap().get_connection().unwrap();
            wait_until(Duration::from_secs(30), "first purchases", || {
                answered.load(Ordering::Relaxed) >= 100
            });
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("0.4")
                .query(&mut direct)
                .unwrap();
        })
    };
    let tasks: Vec<_> = (0..TASKS)
        .map(|n| {
            let (sale, mut con, answered) = (sale.clone(), con.clone(), answered.clone());
            tokio::spawn(async move {
                // Spread over 200 ms, so that the spell falls inside the run.
                tokio::time::sleep(Duration::from_millis((n % 200) as u64)).await;
                let user = format!("user:{}", n % USERS);
                let started = Instant::now();
                let reply = sale.try_buy(&mut con, &user, 1).await;
                answered.fetch_add(1, Ordering::Relaxed);
                (user, reply, started.elapsed())
            })
        })
        .collect();
    let mut replies: HashMap<String, u64> = HashMap::new();
    let (mut bought, mut slow) = (0, 0);
    for task in tasks {
        let (user, reply, took) = task.await.unwrap();
        let reply = reply.unwrap_or_else(|e| panic!("{user}: {e}"));
        match reply {
            TryReply::Bought { .. } => {
                bought += 1;
                *replies.entry(user).or_default() += 1;
            }
            TryReply::SoldOut | TryReply::OverLimit => {}
            other => panic!("{user}: {other:?}"),
        }
        slow += usize::from(took >= Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    let (ticks, worst) = ticks.await.unwrap();
    spell.join().unwrap();
    let mut con = con.clone();
    let info = sale.info(&mut con).await.unwrap();
    println!(
        "{TASKS} tasks: {bought} bought, {slow} waited out the busy spell; ticker: {ticks} ticks, \
         longest gap {worst:?}"
    );
    if bought != STOCK {
        // Which buyers own more than their answers said: what a failure looks like.
        let mut shown = 0;
        for n in 0..USERS {
            let user = format!("user:{n}");
            let owned = sale.bought(&mut con, &user).await.unwrap();
            let told = replies.get(&user).copied().unwrap_or(0);
            if owned != told && shown < 5 {
                println!("{user}: owns {owned}, was told {told}");
                shown += 1;
            }
        }
    }
    assert_eq!((bought, info.sold, info.remaining), (STOCK, STOCK, 0));
    for (user, count) in &replies {
        assert!(*count <= LIMIT, "{user} over LIMIT");
        assert_eq!(sale.bought(&mut con, user).await.unwrap(), *count, "{user}");
    }
    let buyers = sale.buyers(&mut con).await.unwrap();
    assert_eq!(buyers.iter().map(|b| b.qty).sum::<u64>(), STOCK);
    assert!(
        slow > 0,
        "no call met the busy spell: the test proves nothing"
    );
    assert!(
        worst < Duration::from_millis(100),
        "the runtime was blocked for {worst:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_fails_calls_in_time_and_serves_them_again_once_back() {
    const BUYERS: usize = 20;
    let server = Server::start();
    // A ConnectionManager connects anew after a failure; each call waits 200 ms for its reply.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_millis(200)));
    let con = redis::Client::open(server.url())
        .unwrap()
        .get_connection_manager_with_config(config)
        .await
        .unwrap();
    let deadline = Duration::from_millis(800);
    let retry = RetryPolicy {
        deadline,
        ..RetryPolicy::default()
    };
    let spec = SaleSpec::new(1_000_000, 1).limit(1_000_000);
    let sale = Arc::new(
        Sale::create(&mut con.clone(), "sale:stopped", &spec)
            .await
            .unwrap()
            .with_retry(retry),
    );
    let resumed = Arc::new(AtomicBool::new(false));
    let buyers: Vec<_> = (0..BUYERS)
        .map(|t| {
            let (sale, mut con, resumed) = (sale.clone(), con.clone(), resumed.clone());
            tokio::spawn(async move {
                let user = format!("user:{t}");
                let (mut bought, mut unknown, mut after) = (0, 0, 0);
                // Buy one unit at a time until the server was stopped, resumed, and served
                // this buyer twice since.
                while after < 2 {
                    let started = Instant::now();
                    match sale.try_buy(&mut con, &user, 1).await {
                        Ok(TryReply::Bought { .. }) => {
                            bought += 1;
                            after += u64::from(unknown > 0 && resumed.load(Ordering::Relaxed));
                        }
                        Ok(other) => panic!("{user}: {other:?}"),
                        Err(Error::OutcomeUnknown { last_error, .. }) => {
                            assert!(is_retryable(&last_error), "{last_error}");
                            // Within the deadline, plus the one reply it was waiting for.
                            let took = started.elapsed();
                            assert!(took < deadline + Duration::from_millis(500), "{took:?}");
                            unknown += 1;
                        }
                        Err(e) => panic!("{user}: {e}"),
                    }
                }
                (user, bought, unknown)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.signal(libc::SIGSTOP);
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    server.signal(libc::SIGCONT);
    resumed.store(true, Ordering::Relaxed);
    let mut con = con.clone();
    let (mut unknowns, mut lost_answers_applied) = (0, 0);
    for buyer in buyers {
        let (user, bought, unknown) = buyer.await.unwrap();
        let owned = sale.bought(&mut con, &user).await.unwrap();
        // Every purchase answered is owned; each one without an answer is owned once at most,
        // however many times it was sent.
        assert!(
            (bought..=bought + unknown).contains(&owned),
            "{user}: {bought} answered + {unknown} unknown, owns {owned}"
        );
        unknowns += unknown;
        lost_answers_applied += owned - bought;
    }
    let info = sale.info(&mut con).await.unwrap();
    let owned: u64 = sale
        .buyers(&mut con)
        .await
        .unwrap()
        .iter()
        .map(|b| b.qty)
        .sum();
    println!(
        "{BUYERS} buyers through a 2 s stop: {unknowns} calls ended OutcomeUnknown within the \
         deadline, {lost_answers_applied} of them had been applied (once); {} sold",
        info.sold
    );
    assert!(unknowns >= BUYERS as u64, "every buyer met the stop");
    assert_eq!(owned, info.sold);
    assert!(info.balanced(), "{info:?}");
}

#[tokio::test]
async fn one_key_and_partitioned_sales_on_one_server_through_the_async_api() {
    let server = Server::start();
    let mut con = multiplexed(&server, Duration::from_secs(5)).await;
    // One key: holds, confirm, cancel, restock, events.
    let spec = SaleSpec::new(3, 1).hold_ms(60_000).events(None);
    let sale = Sale::create(&mut con, "sale:one", &spec).await.unwrap();
    assert!(matches!(
        Sale::create(&mut con, "sale:one", &spec).await,
        Err(Error::SaleExists(_))
    ));
    assert!(matches!(
        Sale::open(&mut con, "sale:none").await,
        Err(Error::NoSale(_))
    ));
    assert!(matches!(
        Sale::create(&mut con, "sale:two", &SaleSpec::new(3, 2)).await,
        Err(Error::InvalidArgument(_))
    ));
    sale.create_group(&mut con, "shipping").await.unwrap();
    for user in ["alice", "bob"] {
        let reply = sale.try_buy(&mut con, user, 1).await.unwrap();
        assert!(matches!(reply, TryReply::Bought { .. }), "{reply:?}");
    }
    assert!(sale.confirm(&mut con, "alice").await.unwrap());
    assert_eq!(sale.cancel(&mut con, "bob", None).await.unwrap(), 1);
    sale.restock(&mut con, 2).await.unwrap();
    let (reply, acked) = sale
        .try_buy_acked(&mut con, "carol", 1, 0, 100)
        .await
        .unwrap();
    assert_eq!((reply, acked), (TryReply::Bought { remaining: 3 }, 0));
    let info = sale.info(&mut con).await.unwrap();
    assert_eq!(
        (info.stock, info.restocked, info.sold, info.held),
        (3, 2, 1, 1)
    );
    assert!(info.balanced());
    let events: Vec<(String, String)> = sale
        .read_group(&mut con, "shipping", "w1", 100)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.get("event").to_string(), e.get("user").to_string()))
        .collect();
    assert_eq!(events.len(), 6, "{events:?}"); // 3 purchases, confirm, cancel, restock
    assert_eq!(events[0], ("purchase".to_string(), "alice".to_string()));
    let opened = Sale::open(&mut con, "sale:one").await.unwrap();
    assert_eq!(opened.bought(&mut con, "alice").await.unwrap(), 1);
    sale.delete(&mut con).await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    // Partitioned, on one server: every buyer in partition 0 borrows the others' stock.
    let sale = PartitionedSale::create(&mut con, "sale:p", &SaleSpec::new(10, 4))
        .await
        .unwrap();
    let users: Vec<String> = (0..)
        .map(|n| format!("u{n}"))
        .filter(|u| partition_of(u.as_bytes(), 4) == 0)
        .take(12)
        .collect();
    let mut bought = 0;
    for user in &users {
        bought += u64::from(matches!(
            sale.try_buy(&mut con, user, 1).await.unwrap(),
            TryReply::Bought { .. }
        ));
    }
    assert_eq!(bought, 10);
    let info = sale.info(&mut con).await.unwrap();
    assert!(info.sold_out && info.balanced(), "{info:?}");
    assert!(sale.stats().transfers > 0);
    let same = PartitionedSale::open(&mut con, "sale:p").await.unwrap();
    assert_eq!(same.spec(), sale.spec());
    PartitionedSale::delete(&mut con, "sale:p").await.unwrap();
}
