//!
//! The cluster section of `make bench` (#15): one sale over a 3-master cluster through the
//! `seckill-client` crate against one sale key on one server, the same client threads.

use super::{Config, median};
use redis::ConnectionLike;
use redis::cluster::ClusterClient;
use seckill_client::{FlashSale, PartitionedSale, SaleSpec, TryReply, partition_of};
use seckill_harness::Server;
use std::fmt::Write as _;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::Instant;

const PARTITIONS: u32 = 16;

/// Calls and total microseconds of one command since the last CONFIG RESETSTAT.
fn command_time(con: &mut impl ConnectionLike, command: &str) -> (f64, f64) {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .unwrap_or_default();
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = text.lines().find_map(|l| l.strip_prefix(&prefix)) else {
        return (0.0, 0.0);
    };
    let field = |name: &str| {
        line.split(',')
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    (field("calls="), field("usec="))
}

/// Server time over `servers` since their last reset: (TRY calls, µs per TRY, µs of every
/// seckill command per TRY).
fn server_time(servers: &[&Server]) -> (f64, f64, f64) {
    let (mut tries, mut try_usec, mut all_usec) = (0.0, 0.0, 0.0);
    for server in servers {
        let mut con = server.con();
        let (calls, usec) = command_time(&mut con, "seckill.try");
        tries += calls;
        try_usec += usec;
        all_usec += usec;
        for other in [
            "seckill.info",
            "seckill.lend",
            "seckill.absorb",
            "seckill.settle",
            "seckill.seal",
            "seckill.transfers",
        ] {
            all_usec += command_time(&mut con, other).1;
        }
    }
    let tries = tries.max(1.0);
    (tries, try_usec / tries, all_usec / tries)
}

fn reset(servers: &[&Server]) {
    for server in servers {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut server.con())
            .unwrap();
    }
}

/// `clients` threads each make `per_client` attempts with `attempt(con, client, i)`;
/// replies the attempts per second.
fn load<C: ConnectionLike + Send + 'static>(
    clients: usize,
    per_client: usize,
    connect: impl Fn() -> C,
    attempt: impl Fn(&mut C, usize, usize) + Send + Sync + 'static,
) -> f64 {
    let attempt = Arc::new(attempt);
    let barrier = Arc::new(Barrier::new(clients + 1));
    let threads: Vec<_> = (0..clients)
        .map(|client| {
            let (barrier, attempt, mut con) = (barrier.clone(), attempt.clone(), connect());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..per_client {
                    attempt(&mut con, client, i);
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for t in threads {
        t.join().expect("load thread");
    }
    (clients * per_client) as f64 / start.elapsed().as_secs_f64()
}

/// A sale of `stock` units at each of `keys`.
fn init_sales(con: &mut impl ConnectionLike, keys: &[String], stock: u64) {
    for key in keys {
        let _: () = redis::cmd("SECKILL.INIT")
            .arg(key)
            .arg(stock)
            .query(con)
            .unwrap();
    }
}

/// [`load`] of plain `SECKILL.TRY` calls by users `<prefix>:<client>:<i>`, each on the key
/// its id hashes to among `keys` (as a partition is chosen; the one key when there is one),
/// each replying `expect` when given.
fn raw_tries<C: ConnectionLike + Send + 'static>(
    clients: usize,
    per_client: usize,
    connect: impl Fn() -> C,
    keys: Vec<String>,
    prefix: &'static str,
    expect: Option<i64>,
) -> f64 {
    load(clients, per_client, connect, move |con, c, i| {
        let user = format!("{prefix}:{c}:{i}");
        let key = &keys[partition_of(user.as_bytes(), keys.len() as u32) as usize];
        let code: i64 = redis::cmd("SECKILL.TRY")
            .arg(key)
            .arg(&user)
            .query(con)
            .unwrap();
        if let Some(want) = expect {
            assert_eq!(code, want);
        }
    })
}

#[derive(Default)]
struct Round {
    single: f64,
    partitioned: f64,
    single_usec: f64,
    partitioned_usec: f64,
    partitioned_all_usec: f64,
    borrow_share: f64,
    single_sold_out: f64,
    partitioned_sold_out: f64,
    single_sold_out_usec: f64,
    partitioned_sold_out_usec: f64,
    cluster_key_sold_out: f64,
    cluster_key_sold_out_usec: f64,
    spread_sold_out: f64,
    spread_sold_out_usec: f64,
    sold_out_borrows: u64,
}

fn pin(pid: u32, core: usize) {
    let _ = Command::new("taskset")
        .args(["-acp", &core.to_string(), &pid.to_string()])
        .output();
}

/// Markdown for the report: the table, and the targets.
pub fn section(cfg: &Config) -> (String, String) {
    let single = Server::start_with(&["--maxclients", "10000"]);
    let nodes = seckill_harness::start_cluster(3, &["--maxclients", "10000"]);
    // Every server shares core 0, the load generator keeps core 1: the comparison is of
    // the same cores, so it shows the partitioned path's cost, not a cluster's scale-out.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores >= 2 {
        for server in nodes.iter().chain([&single]) {
            if let Some(pid) = server.pid() {
                pin(pid, 0);
            }
        }
    }
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let masters: Vec<&Server> = nodes.iter().collect();
    let smoke = cfg.requests < 10_000;
    let stock: u64 = if smoke { 500 } else { 100_000 };
    // 10 % more attempts than units: every sale sells out near the end of its row.
    let per_client = (stock as usize * 11 / 10).div_ceil(cfg.clients);
    let sold_out_per_client = (cfg.requests / 6).div_ceil(cfg.clients).max(10);
    let mut rounds = Vec::new();
    for round in 0..super::REPEATS {
        let mut r = Round::default();
        // One sale key on one server.
        let key = vec![format!("bench:one:{round}")];
        init_sales(&mut single.con(), &key, stock);
        reset(&[&single]);
        r.single = raw_tries(
            cfg.clients,
            per_client,
            || single.con(),
            key.clone(),
            "u",
            None,
        );
        r.single_usec = server_time(&[&single]).1;
        // The same over 16 partitions of a 3-master cluster.
        let connect = || {
            ClusterClient::new(urls.clone())
                .unwrap()
                .get_connection()
                .unwrap()
        };
        let name = format!("bench:sale:{round}");
        let sale = Arc::new(
            PartitionedSale::create(&mut connect(), &name, &SaleSpec::new(stock, PARTITIONS))
                .unwrap(),
        );
        reset(&masters);
        let buyer = sale.clone();
        r.partitioned = load(cfg.clients, per_client, connect, move |con, c, i| {
            buyer.try_buy(con, format!("u:{c}:{i}"), 1).unwrap();
        });
        (_, r.partitioned_usec, r.partitioned_all_usec) = server_time(&masters);
        let stats = sale.stats();
        r.borrow_share = stats.borrowing_tries as f64 / stats.tries as f64;
        let info = sale.info(&mut connect()).unwrap();
        assert_eq!(info.sold, stock, "the partitioned sale sold out: {info:?}");
        // Sold out: the reject path, once per attempt.
        reset(&[&single]);
        r.single_sold_out = raw_tries(
            cfg.clients,
            sold_out_per_client,
            || single.con(),
            key,
            "late",
            Some(-1),
        );
        r.single_sold_out_usec = server_time(&[&single]).1;
        let late = Arc::new(
            PartitionedSale::open(&mut connect(), &name)
                .unwrap()
                .with_seal_ms(600_000),
        );
        reset(&masters);
        let buyer = late.clone();
        r.partitioned_sold_out = load(
            cfg.clients,
            sold_out_per_client,
            connect,
            move |con, c, i| {
                let reply = buyer.try_buy(con, format!("late:{c}:{i}"), 1).unwrap();
                assert_eq!(reply, TryReply::SoldOut);
            },
        );
        r.partitioned_sold_out_usec = server_time(&masters).1;
        r.sold_out_borrows = late.stats().borrowing_tries;
        // One sold-out sale key in the cluster, through the same cluster client: what a
        // sold-out reply costs there without partitions.
        let cluster_key = vec![format!("bench:cluster-key:{round}")];
        init_sales(&mut connect(), &cluster_key, 0);
        reset(&masters);
        r.cluster_key_sold_out = raw_tries(
            cfg.clients,
            sold_out_per_client,
            connect,
            cluster_key,
            "late",
            Some(-1),
        );
        r.cluster_key_sold_out_usec = server_time(&masters).1;
        // 16 plain sold-out sale keys named and spread as the partitions are, each user on
        // its hash's key, raw TRY: what spreading costs without the partition logic.
        let spread: Vec<String> = (0..PARTITIONS)
            .map(|i| format!("{{bench:spread:{round}/{i}}}"))
            .collect();
        init_sales(&mut connect(), &spread, 0);
        reset(&masters);
        r.spread_sold_out = raw_tries(
            cfg.clients,
            sold_out_per_client,
            connect,
            spread,
            "late",
            Some(-1),
        );
        r.spread_sold_out_usec = server_time(&masters).1;
        rounds.push(r);
    }
    let m = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    let mut md = String::new();
    writeln!(
        md,
        "### One sale over a Redis Cluster (`seckill-client`, {} client threads, unpipelined)\n\n\
         A sale of {stock} units with {} attempts (10 % more than the stock, each a new user, \
         uniform ids): one sale key on one server against {PARTITIONS} partitions over 3 \
         masters. Then {} attempts on the sold-out sale. All four servers share core 0 and \
         the load generator has core 1, so this measures what partitioning costs on the same \
         cores, not what more cores give; median of {} interleaved rounds.\n",
        cfg.clients,
        per_client * cfg.clients,
        sold_out_per_client * cfg.clients,
        super::REPEATS
    )
    .unwrap();
    writeln!(
        md,
        "| row | attempts/s | ratio | server µs per TRY | server µs of all seckill commands per TRY |\n| --- | ---: | ---: | ---: | ---: |"
    )
    .unwrap();
    let (single_ops, part_ops) = (m(|r| r.single), m(|r| r.partitioned));
    let (single_so, part_so) = (m(|r| r.single_sold_out), m(|r| r.partitioned_sold_out));
    writeln!(
        md,
        "| one key, one server: TRY until sold out | {single_ops:.0} | 1.00x | {:.2} | {:.2} |",
        m(|r| r.single_usec),
        m(|r| r.single_usec)
    )
    .unwrap();
    writeln!(md, "| {PARTITIONS} partitions, 3 masters: try_buy until sold out | {part_ops:.0} | {:.2}x | {:.2} | {:.2} |",
        part_ops / single_ops, m(|r| r.partitioned_usec), m(|r| r.partitioned_all_usec)).unwrap();
    writeln!(
        md,
        "| one key, one server: sold-out TRY | {single_so:.0} | 1.00x | {:.2} | {:.2} |",
        m(|r| r.single_sold_out_usec),
        m(|r| r.single_sold_out_usec)
    )
    .unwrap();
    let cluster_so = m(|r| r.cluster_key_sold_out);
    writeln!(md, "| one key in the cluster, cluster client: sold-out TRY | {cluster_so:.0} | {:.2}x | {:.2} | |",
        cluster_so / single_so, m(|r| r.cluster_key_sold_out_usec)).unwrap();
    let spread_so = m(|r| r.spread_sold_out);
    writeln!(md, "| {PARTITIONS} plain sold-out keys spread as the partitions, raw TRY | {spread_so:.0} | {:.2}x | {:.2} | |",
        spread_so / single_so, m(|r| r.spread_sold_out_usec)).unwrap();
    writeln!(
        md,
        "| {PARTITIONS} partitions: sold-out try_buy | {part_so:.0} | {:.2}x | {:.2} | |",
        part_so / single_so,
        m(|r| r.partitioned_sold_out_usec)
    )
    .unwrap();
    let borrow_share = m(|r| r.borrow_share);
    let sold_out_borrows = rounds.iter().map(|r| r.sold_out_borrows).max().unwrap_or(0);
    writeln!(
        md,
        "\nShare of try_buy calls that borrowed (uniform ids, until sold out): {:.3} %. \
         Sold-out attempts that needed more than one round trip: at most {sold_out_borrows} of {} \
         (those that reached a partition before it was sealed: one of them scans the \
         partitions and seals it, the others wait for it and read one INFO); every later one \
         is one TRY.\n",
        borrow_share * 100.0,
        sold_out_per_client * cfg.clients
    )
    .unwrap();
    let targets = format!(
        "| partitioned try_buy: share that borrowed < 1 % (uniform) | {:.3} % | {} |\n\
         | partitioned sold-out try_buy within 10 % of a single-key sold-out TRY, same cluster and client | {:.2}x | {} |\n\
         | the same against one key on a standalone server (plain client) | {:.2}x | {} |\n",
        borrow_share * 100.0,
        if borrow_share < 0.01 { "yes" } else { "**no**" },
        part_so / cluster_so,
        if part_so / cluster_so >= 0.9 {
            "yes"
        } else {
            "**no**"
        },
        part_so / single_so,
        if part_so / single_so >= 0.9 {
            "yes"
        } else {
            "**no**"
        },
    );
    (md, targets)
}
