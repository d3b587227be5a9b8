//! Buyers of a partitioned sale in four flavours (the Rust crate sync and async, each with and
//! without the sold-out cache), timed call by call while a fault runs: what
//! `tests/availability.rs` checks and `make bench`'s "Availability under a fault" measures.

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use seckill_client::{
    ClusterSession, FlashSale, PartitionedSale, SoldOutCache, TryReply, aio, partition_of,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// The flavours, by name.
pub const SYNC: &str = "sync";
pub const SYNC_CACHE: &str = "sync + cache";
pub const ASYNC: &str = "async";
pub const ASYNC_CACHE: &str = "async + cache";
pub const FLAVOURS: [&str; 4] = [SYNC, SYNC_CACHE, ASYNC, ASYNC_CACHE];

/// Server arguments for a cluster timed through a fault window: a failed master is marked FAIL
/// only after 15 s, far past a window, so the window measures one master down *before* a
/// failover. Once it is marked FAIL, every node refuses every key with CLUSTERDOWN until its
/// replica is promoted (`cluster-require-full-coverage yes`, the default): about a second in
/// which buyers of all partitions wait alike, the failover's cost (`make soak` measures it).
pub const UNFAILED: [&str; 2] = ["--cluster-node-timeout", "15000"];

/// The sync buyers' cluster settings, as docs/clients.md advises for availability: a response
/// timeout bounds a read of a frozen master (the sync API cannot bound one call on its own;
/// the async API bounds the borrow's reads itself), and no retries of redis-rs's own (each
/// would reconnect to the frozen master and wait its timeout again; the crate retries what
/// matters, under attempt ids).
pub fn builder(urls: &[String]) -> ClusterClientBuilder {
    ClusterClient::builder(urls.to_vec())
        .retries(0)
        .connection_timeout(Duration::from_millis(200))
        .response_timeout(Duration::from_millis(200))
}

/// The async buyers' session: the crate's own cluster connections, with `builder`'s timeouts.
pub async fn async_session(urls: &[String]) -> aio::ClusterSession {
    aio::ClusterSession::builder(urls.to_vec())
        .unwrap()
        .connect_timeout(Duration::from_millis(200))
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap()
}

/// The port of the master serving `key`, as the node at `url` says.
pub fn master_port(url: &str, key: &str) -> u16 {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut con)
        .unwrap();
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).unwrap();
    for range in ranges {
        let redis::Value::Array(items) = range else {
            continue;
        };
        let redis::Value::Array(master) = &items[2] else {
            continue;
        };
        let start: u16 = redis::from_redis_value_ref(&items[0]).unwrap();
        let end: u16 = redis::from_redis_value_ref(&items[1]).unwrap();
        if (start..=end).contains(&slot) {
            return redis::from_redis_value_ref(&master[1]).unwrap();
        }
    }
    panic!("slot {slot} of {key} has no owner");
}

/// `count` users whose partitions are served by masters other than the one on `port`.
pub fn users_off(
    url: &str,
    sale: &PartitionedSale,
    port: u16,
    prefix: &str,
    count: usize,
) -> Vec<String> {
    let partitions = sale.partition_keys().len() as u32;
    let ports: Vec<u16> = sale
        .partition_keys()
        .iter()
        .map(|key| master_port(url, key))
        .collect();
    (0..)
        .map(|n| format!("{prefix}{n}"))
        .filter(|user| ports[partition_of(user.as_bytes(), partitions) as usize] != port)
        .take(count)
        .collect()
}

/// One call: its flavour, how long it took, its reply (or error).
pub type Call = (String, Duration, Result<TryReply, String>);

/// Every call's latency and reply.
#[derive(Default)]
pub struct Record(pub Mutex<Vec<Call>>);

/// One flavour's figures.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub calls: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// The share of calls answered within 100 ms.
    pub within_100ms: f64,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} calls, p50 {:.1?}, p99 {:.1?}, max {:.1?}, {:.1}% within 100 ms",
            self.calls,
            self.p50,
            self.p99,
            self.max,
            100.0 * self.within_100ms
        )
    }
}

impl Record {
    fn add(&self, flavour: &str, took: Duration, reply: seckill_client::Result<TryReply>) {
        let reply = reply.map_err(|e| e.to_string());
        self.0
            .lock()
            .unwrap()
            .push((flavour.to_string(), took, reply));
    }

    /// `flavour`'s figures (None: it made no call).
    pub fn figures(&self, flavour: &str) -> Option<Figures> {
        let calls = self.0.lock().unwrap();
        let mut took: Vec<Duration> = calls
            .iter()
            .filter(|(f, ..)| f == flavour)
            .map(|(_, took, _)| *took)
            .collect();
        if took.is_empty() {
            return None;
        }
        took.sort();
        let within = took
            .iter()
            .filter(|t| **t <= Duration::from_millis(100))
            .count();
        Some(Figures {
            calls: took.len(),
            p50: took[took.len() / 2],
            p99: took[(took.len() * 99 / 100).min(took.len() - 1)],
            max: took[took.len() - 1],
            within_100ms: within as f64 / took.len() as f64,
        })
    }
}

/// Buyers of the sale `name` in `flavours` (sync: 4 threads, a `ClusterSession` each; async: 8
/// tasks sharing one `aio::ClusterSession`), over the cluster nodes `urls`, cycling through
/// `users`.
pub struct Buyers<'a> {
    pub urls: &'a [String],
    pub name: &'a str,
    pub seal_ms: u64,
    pub users: &'a [String],
    pub flavours: &'a [&'static str],
    /// How long they buy once the fault is on.
    pub window: Duration,
}

impl Buyers<'_> {
    /// Each buyer makes its connections (one purchase of a "warm" user), then `fault` runs,
    /// they buy for `window`, then `heal` runs. Panics if a buyer is still in a call 120 s
    /// later.
    pub fn run(&self, fault: impl FnOnce(), heal: impl FnOnce()) -> Record {
        let Buyers {
            urls,
            name,
            seal_ms,
            users,
            flavours,
            window,
        } = *self;
        let record = Arc::new(Record::default());
        let stop = Arc::new(AtomicBool::new(false));
        let parties = 1 + flavours
            .iter()
            .map(|f| if f.starts_with("sync") { 4 } else { 1 })
            .sum::<usize>();
        // Every runner made its connections (ready), then the fault, then they buy (go).
        let (ready, go) = (
            Arc::new(Barrier::new(parties)),
            Arc::new(Barrier::new(parties)),
        );
        let mut runners = Vec::new();
        for &flavour in flavours {
            let cache = flavour.ends_with("cache");
            if flavour.starts_with("sync") {
                let mut session = ClusterSession::cluster(|| builder(urls)).unwrap();
                let mut sale = PartitionedSale::open(&mut session, name)
                    .unwrap()
                    .with_seal_ms(seal_ms);
                if cache {
                    sale = sale.with_local_cache(&SoldOutCache::new(urls.to_vec()).unwrap());
                }
                let sale = Arc::new(sale);
                for t in 0..4 {
                    let (sale, record, stop) = (sale.clone(), record.clone(), stop.clone());
                    let (ready, go) = (ready.clone(), go.clone());
                    let chunk: Vec<String> = users.iter().skip(t).step_by(4).cloned().collect();
                    let urls = urls.to_vec();
                    runners.push(std::thread::spawn(move || {
                        let mut session = ClusterSession::cluster(|| builder(&urls)).unwrap();
                        let _ = sale.try_buy(&mut session, format!("warm:{flavour}:{t}"), 1);
                        ready.wait();
                        go.wait();
                        for user in chunk.iter().cycle() {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            let started = Instant::now();
                            let reply = sale.try_buy(&mut session, user, 1);
                            record.add(flavour, started.elapsed(), reply);
                        }
                    }));
                }
                continue;
            }
            let (record, stop) = (record.clone(), stop.clone());
            let (ready, go) = (ready.clone(), go.clone());
            let (urls, name, users) = (urls.to_vec(), name.to_string(), users.to_vec());
            runners.push(std::thread::spawn(move || {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                runtime.block_on(async move {
                    let mut session = async_session(&urls).await;
                    let mut sale = aio::PartitionedSale::open(&mut session, &name)
                        .await
                        .unwrap()
                        .with_seal_ms(seal_ms);
                    if cache {
                        sale = sale.with_local_cache(&SoldOutCache::new(urls.clone()).unwrap());
                    }
                    let sale = Arc::new(sale);
                    for n in 0..8 {
                        let warm = format!("warm:{flavour}:{n}");
                        let _ = aio::FlashSale::try_buy(&*sale, &mut session, warm, 1).await;
                    }
                    tokio::task::block_in_place(|| {
                        ready.wait();
                        go.wait();
                    });
                    let mut tasks = Vec::new();
                    for t in 0..8 {
                        let (sale, record, stop, mut session) =
                            (sale.clone(), record.clone(), stop.clone(), session.clone());
                        let chunk: Vec<String> = users.iter().skip(t).step_by(8).cloned().collect();
                        tasks.push(tokio::spawn(async move {
                            for user in chunk.iter().cycle() {
                                if stop.load(Ordering::Relaxed) {
                                    break;
                                }
                                let started = Instant::now();
                                let reply =
                                    aio::FlashSale::try_buy(&*sale, &mut session, user, 1).await;
                                record.add(flavour, started.elapsed(), reply);
                            }
                        }));
                    }
                    for task in tasks {
                        task.await.unwrap();
                    }
                });
            }));
        }
        ready.wait();
        fault();
        go.wait();
        std::thread::sleep(window); // the fault's length: the buyers buy all along
        stop.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(120);
        for runner in runners {
            while !runner.is_finished() {
                assert!(Instant::now() < deadline, "a buyer hung past 120 s");
                std::thread::sleep(Duration::from_millis(10));
            }
            runner.join().unwrap();
        }
        heal();
        Arc::try_unwrap(record).ok().expect("every runner ended")
    }
}
