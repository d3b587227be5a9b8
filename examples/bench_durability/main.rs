//! `make bench`'s "Durability" (#51): what a replica's acknowledgement costs, on a master with
//! one replica on loopback. Rust async: 256 tokio tasks on one `aio::ClusterSession` buying
//! with the default `Durability::Replica` against `Durability::Master` on the same kind of
//! session, and against a plain `MultiplexedConnection` sending bare `SECKILL.TRY ... ID` (no
//! library, no WAIT), with `redis-benchmark -P 16 -c 16` beside them as the ceiling; rounds
//! interleaved, the median round shown, with the server's time per TRY, the WAITs sent per
//! purchase (INFO commandstats) and this process's CPU per purchase (getrusage). Sync: one
//! connection's purchase latency, p50 and p99, per durability. The ceiling: the same purchases
//! from a client written by hand for this bench (`by_hand`), with and without a `WAIT` per
//! write. Python asyncio: the default against `durability="master"`
//! (bench/python_durability.py). Writes bench/results/durability.md. `--async-only` prints the
//! Rust async tables only; `--profile master|replica` runs one library row again and again
//! (for `perf record -p`).

use seckill_client::aio::{ClusterSession, FlashSale as _, Sale as AsyncSale};
use seckill_client::{
    ClusterSession as SyncClusterSession, Durability, Error, FlashSale as _, RetryPolicy, Sale,
    Session, TryReply,
};
use seckill_harness::topology::{cluster_con, owner_of, urls};
use seckill_harness::{Server, python_bench, replicate, start_cluster_with_replicas};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod by_hand;
use by_hand::ByHand;

const TASKS: usize = 256;
const PURCHASES: usize = 100_000;
const ROUNDS: usize = 5;
const SYNC_PURCHASES: usize = 3_000;

struct Measure {
    per_s: f64,
    server_us: f64,
    waits_per_purchase: f64,
    /// The client's CPU time per purchase, microseconds (this process, or redis-benchmark).
    client_us: f64,
    /// The master's and the replica's CPU time per purchase, microseconds.
    servers_us: f64,
}

/// The master's and the replica's process ids, for their CPU time.
static SERVERS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();

fn servers_cpu() -> Duration {
    let pids = SERVERS.get().map_or(&[][..], Vec::as_slice);
    pids.iter()
        .map(|&pid| seckill_harness::process_cpu_time(pid))
        .sum()
}

/// `(server µs per SECKILL.TRY, WAIT calls)` since the last CONFIG RESETSTAT.
fn commandstats(server: &Server) -> (f64, f64) {
    (
        seckill_harness::commandstat(&mut server.con(), "seckill.try", "usec_per_call"),
        seckill_harness::commandstat(&mut server.con(), "wait", "calls"),
    )
}

fn fresh_sale(server: &Server, key: &str) {
    let mut con = server.con();
    let _: () = redis::cmd("DEL").arg(key).query(&mut con).unwrap();
    let _: () = redis::cmd("SECKILL.INIT")
        .arg(key)
        .arg(1_000_000_000u64)
        .arg("LIMIT")
        .arg(1)
        .query(&mut con)
        .unwrap();
    seckill_harness::wait_replicas(&mut con, 1);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
}

/// A row's figures: `took` in all, `(client, servers)` the CPU time spent meanwhile.
fn measured(server: &Server, took: Duration, (client, servers): (Duration, Duration)) -> Measure {
    let (server_us, waits) = commandstats(server);
    let per_purchase = |cpu: Duration| cpu.as_secs_f64() * 1e6 / PURCHASES as f64;
    Measure {
        per_s: PURCHASES as f64 / took.as_secs_f64(),
        server_us,
        waits_per_purchase: waits / PURCHASES as f64,
        client_us: per_purchase(client),
        servers_us: per_purchase(servers),
    }
}

fn redis_benchmark(server: &Server, round: usize) -> Measure {
    let key = "bench:durability:rb";
    fresh_sale(server, key);
    let (client, servers) = (seckill_harness::children_cpu_time(), servers_cpu());
    let took = seckill_harness::redis_benchmark_try(server, key, &format!("r{round}:"), PURCHASES);
    let cpu = (
        seckill_harness::children_cpu_time() - client,
        servers_cpu() - servers,
    );
    measured(server, took, cpu)
}

/// PURCHASES purchases from TASKS tasks: `buy(n)` makes the n-th.
async fn tasks<F, Fut>(server: &Server, buy: F) -> Measure
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let buy = Arc::new(buy);
    let next = Arc::new(AtomicUsize::new(0));
    let (cpu, servers, started) = (seckill_harness::cpu_time(), servers_cpu(), Instant::now());
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (buy, next) = (buy.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= PURCHASES {
                        break;
                    }
                    buy(n).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let took = started.elapsed();
    let cpu = (seckill_harness::cpu_time() - cpu, servers_cpu() - servers);
    measured(server, took, cpu)
}

async fn library(server: &Server, durability: Durability, row: &str) -> Measure {
    let key = format!("bench:durability:{row}");
    fresh_sale(server, &key);
    let session = ClusterSession::connect([server.url()]).await.unwrap();
    let sale = Arc::new(AsyncSale::new(key).durability(durability));
    let row = row.to_string();
    tasks(server, move |n| {
        let (sale, mut con, user) = (sale.clone(), session.clone(), format!("{row}:{n}"));
        async move {
            let reply = sale.try_buy(&mut con, user, 1).await;
            assert!(matches!(reply, Ok(TryReply::Bought { .. })), "{reply:?}");
        }
    })
    .await
}

async fn raw(server: &Server, row: &str) -> Measure {
    let key = format!("bench:durability:{row}");
    fresh_sale(server, &key);
    let client = redis::Client::open(server.url()).unwrap();
    let con = client.get_multiplexed_async_connection().await.unwrap();
    let row = row.to_string();
    tasks(server, move |n| {
        let (mut con, key, user) = (con.clone(), key.clone(), format!("{row}:{n}"));
        async move {
            let code: i64 = redis::cmd("SECKILL.TRY")
                .arg(&key)
                .arg(user)
                .arg(1)
                .arg("ID")
                .arg(format!("{n:032x}"))
                .query_async(&mut con)
                .await
                .unwrap();
            assert!(code >= 0);
        }
    })
    .await
}

/// The same purchases from a client written by hand (see `by_hand`).
fn by_hand_row(server: &Server, how: ByHand, row: &str) -> Measure {
    let key = format!("bench:durability:{row}");
    fresh_sale(server, &key);
    let (cpu, servers) = (seckill_harness::cpu_time(), servers_cpu());
    let took = by_hand::run(server.port, &key, row, (PURCHASES, TASKS), how);
    let cpu = (seckill_harness::cpu_time() - cpu, servers_cpu() - servers);
    measured(server, took, cpu)
}

fn median(mut rounds: Vec<Measure>) -> Measure {
    rounds.sort_by(|a, b| a.per_s.total_cmp(&b.per_s));
    rounds.swap_remove(rounds.len() / 2)
}

/// One connection's purchases, one after the other: (p50, p99) in microseconds.
fn sync_latency(server: &Server, durability: Durability) -> (f64, f64) {
    let key = format!("bench:durability:sync:{durability:?}");
    fresh_sale(server, &key);
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = Session::server(client, Some(Duration::from_secs(5))).unwrap();
    let sale = Sale::new(key).durability(durability);
    let mut took: Vec<f64> = (0..SYNC_PURCHASES)
        .map(|n| {
            let started = Instant::now();
            let reply = sale.try_buy(&mut con, format!("u{n}"), 1).unwrap();
            assert!(matches!(reply, TryReply::Bought { .. }));
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    (at(0.5), at(0.99))
}

/// What the buyers were told while a sale's master was SIGKILLed and a replica took over, on a
/// cluster of 3 masters with `replicas` replicas each: `(bought, not replicated, other)` over
/// the purchases begun after the kill, and the buyers told "bought" who own nothing at the end.
fn through_a_failover(replicas: usize) -> ((u64, u64, u64), u64) {
    let mut nodes = start_cluster_with_replicas(3, replicas, &["--cluster-node-timeout", "2000"]);
    let urls = urls(&nodes);
    let builder = || redis::cluster::ClusterClient::builder(urls.clone()).retries(2);
    let mut con = SyncClusterSession::cluster(builder).unwrap();
    let _: () = redis::cmd("SECKILL.INIT")
        .arg("s")
        .arg(1_000_000_000u64)
        .query(&mut con)
        .unwrap();
    let killed_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let buyers: Vec<_> = (0..8)
        .map(|t| {
            let (urls, killed_at, stop) = (urls.clone(), killed_at.clone(), stop.clone());
            std::thread::spawn(move || {
                let builder = || redis::cluster::ClusterClient::builder(urls.clone()).retries(2);
                let mut con = SyncClusterSession::cluster(builder).unwrap();
                let sale = Sale::new("s")
                    .ack_timeout(Duration::from_millis(200))
                    .with_retry(RetryPolicy {
                        deadline: Duration::from_secs(20),
                        ..RetryPolicy::default()
                    });
                let (mut counts, mut told) = ((0, 0, 0), Vec::new());
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let user = format!("t{t}:{n}");
                    n += 1;
                    let after_kill = killed_at.lock().unwrap().is_some();
                    let answer = sale.try_buy(&mut con, &user, 1);
                    if let Ok(TryReply::Bought { .. }) = answer {
                        told.push(user);
                    }
                    if after_kill {
                        match answer {
                            Ok(TryReply::Bought { .. }) => counts.0 += 1,
                            Err(Error::NotReplicated { .. }) => counts.1 += 1,
                            _ => counts.2 += 1,
                        }
                    }
                }
                (counts, told)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let owner = owner_of(&urls, "s");
    nodes.iter_mut().find(|n| n.url() == owner).unwrap().kill();
    *killed_at.lock().unwrap() = Some(Instant::now());
    std::thread::sleep(Duration::from_secs(12));
    stop.store(true, Ordering::Relaxed);
    // A connection made now, with retries: the one above last spoke to the killed master.
    let mut con = cluster_con(&urls);
    let (mut counts, mut lost) = ((0, 0, 0), 0);
    for buyer in buyers {
        let ((bought, not_replicated, other), told) = buyer.join().unwrap();
        counts = (
            counts.0 + bought,
            counts.1 + not_replicated,
            counts.2 + other,
        );
        for user in told {
            let owned: i64 = redis::cmd("SECKILL.BOUGHT")
                .arg("s")
                .arg(&user)
                .query(&mut con)
                .unwrap();
            lost += u64::from(owned != 1);
        }
    }
    (counts, lost)
}

fn failover_section() -> String {
    let mut md = String::new();
    writeln!(
        md,
        "Through a failover: a one-key sale on a cluster of 3 masters (node timeout 2 s), 8 \
         threads buying with the default durability (ack timeout 200 ms) on sync cluster \
         sessions; the sale's master SIGKILLed, the purchases begun in the 12 s after it \
         counted. After the failover the promoted master has no replica with 1 replica per \
         master (its old master is dead): it answers as `Master`, nothing to wait for; with 2, \
         the other replica follows the new master and is waited for.\n\n\
         | replicas per master | bought | NotReplicated | other (unknown, unavailable) | told bought, lost |\n\
         | --- | ---: | ---: | ---: | ---: |"
    )
    .unwrap();
    for replicas in [1, 2] {
        let ((bought, not_replicated, other), lost) = through_a_failover(replicas);
        let all = (bought + not_replicated + other).max(1) as f64;
        writeln!(
            md,
            "| {replicas} | {bought} ({:.1} %) | {not_replicated} ({:.1} %) | {other} ({:.1} %) | {lost} |",
            bought as f64 * 100.0 / all,
            not_replicated as f64 * 100.0 / all,
            other as f64 * 100.0 / all,
        )
        .unwrap();
    }
    md
}

/// The sync latencies, the Python rows and the failover table.
fn sync_and_python_sections(master: &Server) -> String {
    let mut md = String::new();
    writeln!(
        md,
        "\nSync, one connection (`Session::server`), {SYNC_PURCHASES} purchases one after the \
         other:\n\n| durability | p50 us | p99 us |\n| --- | ---: | ---: |"
    )
    .unwrap();
    for durability in [Durability::Master, Durability::Replica] {
        let (p50, p99) = sync_latency(master, durability);
        writeln!(md, "| {durability:?} | {p50:.0} | {p99:.0} |").unwrap();
    }
    md.push('\n');
    md.push_str(&python_bench(
        "python_durability.py",
        &[&master.port.to_string()],
    ));
    md.push('\n');
    md.push_str(&failover_section());
    md
}

/// `--profile master|replica`: the library row of that durability only, [`PROFILED_ROUNDS`]
/// times.
fn profiled_row() -> Option<Durability> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--profile")?;
    match args.get(at + 1).map(String::as_str) {
        Some("master") => Some(Durability::Master),
        Some("replica") => Some(Durability::Replica),
        other => panic!("--profile master|replica, got {other:?}"),
    }
}

const PROFILED_ROUNDS: usize = 30;

fn main() {
    if std::env::args().any(|a| a == "--failover-only") {
        print!("{}", failover_section());
        return;
    }
    let master = Server::start();
    let replica = Server::start();
    replicate(&replica, &master);
    let pids = [&master, &replica].map(|s| s.pid().expect("started"));
    SERVERS.set(pids.to_vec()).expect("set once");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    if let Some(row) = profiled_row() {
        // One row again and again, for a profiler to attach to (`perf record -p`).
        for round in 0..PROFILED_ROUNDS {
            let m = runtime.block_on(library(&master, row, &format!("p{round}")));
            println!(
                "{row:?}: {:.0} purchases/s, client CPU {:.2} us/purchase",
                m.per_s, m.client_us
            );
        }
        return;
    }
    let mut rows: [Vec<Measure>; 7] = Default::default();
    let by_hand = [
        ByHand::Master,
        ByHand::WaitPerWrite,
        ByHand::TwoWritesInFlight,
    ];
    for round in 0..ROUNDS {
        rows[0].push(redis_benchmark(&master, round));
        rows[1].push(runtime.block_on(raw(&master, &format!("raw{round}"))));
        rows[2].push(runtime.block_on(library(&master, Durability::Master, &format!("m{round}"))));
        rows[3].push(runtime.block_on(library(&master, Durability::Replica, &format!("r{round}"))));
        for (i, how) in by_hand.into_iter().enumerate() {
            rows[4 + i].push(by_hand_row(&master, how, &format!("h{i}:{round}")));
        }
    }
    // Each row against Master and the bare TRY of its own round (run back to back on the same
    // machine state), the median of the rounds' ratios with their range.
    let ratios = |row: usize, base: usize| -> (f64, f64, f64) {
        let mut each: Vec<f64> = (0..ROUNDS)
            .map(|r| rows[row][r].per_s / rows[base][r].per_s)
            .collect();
        each.sort_by(f64::total_cmp);
        (each[ROUNDS / 2], each[0], each[ROUNDS - 1])
    };
    let against: Vec<_> = (0..4).map(|row| (ratios(row, 2), ratios(row, 1))).collect();
    let by_hand_against: Vec<_> = (4..7).map(|row| ratios(row, 4)).collect();
    let [
        rb,
        raw,
        master_only,
        replica_kept,
        hand_master,
        hand_wait,
        hand_two,
    ] = rows.map(median);
    let mut md = String::new();
    writeln!(
        md,
        "# Durability\n\nGenerated by `make bench` (examples/bench_durability/main.rs): a master and one \
         replica on loopback, {PURCHASES} purchases per row, every buyer new, {TASKS} tokio tasks \
         (one worker thread) on one connection; {ROUNDS} rounds interleaved, the median shown; \
         the ratios are each round's against the `Master` and bare rows of the same round, their \
         median and range. \
         Goals (#51): the default (`Durability::Replica`) at >= 0.8x `Durability::Master` and \
         >= 0.8x bare SECKILL.TRY on a `MultiplexedConnection`; client CPU <= 2 us per purchase. \
         redis-benchmark is the ceiling (client and server share the machine's cores).\n\n\
         | row | purchases/s | vs Master | vs bare TRY | server us/TRY | WAITs/purchase | client CPU us/purchase | servers' CPU us/purchase |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    .unwrap();
    let range = |(median, low, high): (f64, f64, f64)| format!("{median:.2}x ({low:.2}-{high:.2})");
    for (i, (row, m)) in [
        ("redis-benchmark -P 16 -c 16 (no WAIT)", &rb),
        ("bare SECKILL.TRY ... ID, MultiplexedConnection", &raw),
        (
            "try_buy, Durability::Master, aio::ClusterSession",
            &master_only,
        ),
        (
            "try_buy, Durability::Replica (default), aio::ClusterSession",
            &replica_kept,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let (vs_master, vs_raw) = against[i];
        writeln!(
            md,
            "| {row} | {:.0} | {} | {} | {:.2} | {:.4} | {:.2} | {:.2} |",
            m.per_s,
            range(vs_master),
            range(vs_raw),
            m.server_us,
            m.waits_per_purchase,
            m.client_us,
            m.servers_us,
        )
        .unwrap();
    }
    writeln!(
        md,
        "\nThe ceiling of the durability on this machine: the same purchases from a client \
         written for this bench alone (examples/bench_durability/by_hand.rs: no library, no \
         tasks), {TASKS} in flight as 2 connections of {} pipelined TRYs per write, each write \
         read back before the next; rounds interleaved with the rows above. What a replica's \
         acknowledgement costs when the client costs next to nothing.\n\n\
         | by hand | purchases/s | vs by hand, master only | WAITs/purchase | client CPU us/purchase | servers' CPU us/purchase |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |",
        TASKS / 2
    )
    .unwrap();
    for (i, (row, m)) in [
        ("master only", &hand_master),
        ("each write ended by one WAIT 1 1000", &hand_wait),
        (
            "the same, two writes of half as many in flight per connection",
            &hand_two,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        writeln!(
            md,
            "| {row} | {:.0} | {} | {:.4} | {:.2} | {:.2} |",
            m.per_s,
            range(by_hand_against[i]),
            m.waits_per_purchase,
            m.client_us,
            m.servers_us,
        )
        .unwrap();
    }
    if std::env::args().any(|a| a == "--async-only") {
        print!("{md}");
        return;
    }
    md.push_str(&sync_and_python_sections(&master));
    print!("{md}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/results");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("durability.md"), md).unwrap();
}
