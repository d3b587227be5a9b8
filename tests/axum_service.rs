//! `examples/axum_buy.rs` as a service runs: real HTTP requests from 40 threads, each buyer
//! asking again after a 503 as a shop's page would, while Redis restarts (one server, AOF on)
//! or a cluster's master is SIGKILLed and its replica promoted. The sale sells out exactly,
//! everyone who owns a unit was told "bought" (or that the outcome was unknown), no request
//! waits past the sale's deadline, and the service restarts onto the same sale and stops
//! cleanly on SIGTERM.

use seckill_client::{FlashSale, PartitionedSale};
use seckill_harness::topology::{cluster_con, owner_of, urls};
use seckill_harness::{Server, start_cluster_with_replicas};
use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const STOCK: u64 = 1_000;
const USERS: usize = 2_000;
const THREADS: usize = 40;
const DEADLINE_MS: u64 = 15_000;

/// The service on `nodes`, once it listens: the child and its address.
/// The service's process, killed if a failed assertion leaves it running.
struct Service(Option<Child>);

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start_service(nodes: &str) -> (Service, String) {
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/examples/axum_buy");
    assert!(
        program.exists(),
        "{} is missing: run `make test`",
        program.display()
    );
    let mut service = Command::new(&program)
        .args([nodes, "127.0.0.1:0", &STOCK.to_string(), "sale:web"])
        .env("SECKILL_DEADLINE_MS", DEADLINE_MS.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the service");
    let mut line = String::new();
    std::io::BufReader::new(service.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    (Service(Some(service)), address)
}

/// SIGTERM: the service finishes and exits 0.
fn stop_service(mut service: Service) {
    let mut service = service.0.take().expect("a running service");
    let pid = service.id() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = service.wait().unwrap();
    assert!(status.success(), "stopped with {status}");
    let mut rest = String::new();
    service
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut rest)
        .unwrap();
    assert!(rest.contains("stopped"), "{rest:?}");
}

/// One HTTP/1.1 request on a fresh connection: the status code and the body.
fn http(address: &str, method: &str, path: &str) -> (u16, String) {
    seckill_harness::http::request(address, method, path).expect("an HTTP answer")
}

/// What the buyers were told, per user: the last answer, whether any answer was "outcome
/// unknown", how many 503s; and the slowest request.
#[derive(Default)]
struct Told {
    last: HashMap<String, (u16, String)>,
    unknown: Vec<String>,
    unavailable: usize,
    slowest: Duration,
}

/// Every user buys once, asking again after a 503 (at most 200 times, 50 ms apart); `fault`
/// runs on this thread once `answered` requests were answered.
fn buy_over_http(address: &str, fault_after: usize, fault: impl FnOnce()) -> Told {
    let answered = AtomicUsize::new(0);
    let told = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let answered = &answered;
                scope.spawn(move || {
                    let mut told = Told::default();
                    for n in (t..USERS).step_by(THREADS) {
                        let user = format!("user-{n}");
                        for _ in 0..200 {
                            let started = Instant::now();
                            let (status, body) = http(address, "POST", &format!("/buy/{user}"));
                            told.slowest = told.slowest.max(started.elapsed());
                            answered.fetch_add(1, Ordering::Relaxed);
                            if body.starts_with("outcome unknown") {
                                told.unknown.push(user.clone());
                            }
                            let again = status == 503;
                            told.unavailable += usize::from(again);
                            told.last.insert(user.clone(), (status, body));
                            if !again {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                    told
                })
            })
            .collect();
        seckill_harness::wait_until(Duration::from_secs(60), "the first answers", || {
            answered.load(Ordering::Relaxed) >= fault_after
        });
        fault();
        let mut all = Told::default();
        for thread in threads {
            let mine = thread.join().unwrap();
            all.last.extend(mine.last);
            all.unknown.extend(mine.unknown);
            all.unavailable += mine.unavailable;
            all.slowest = all.slowest.max(mine.slowest);
        }
        all
    });
    println!(
        "{} 503s, {} outcomes unknown, slowest request {:?}",
        told.unavailable,
        told.unknown.len(),
        told.slowest
    );
    told
}

/// The sale sold out exactly; every owner was told "bought" or "outcome unknown"; everyone
/// got a final answer; nobody waited past the deadline (and the time the service takes to
/// answer). Returns how many were told "bought" but own nothing (a failover's lost writes).
fn check(told: &Told, owners: &HashMap<String, u64>, sold: u64) -> usize {
    assert_eq!(sold, STOCK, "sold out exactly");
    assert_eq!(owners.values().sum::<u64>(), STOCK);
    assert!(owners.values().all(|&qty| qty == 1), "one unit each");
    for user in owners.keys() {
        let (status, body) = &told.last[user];
        assert!(
            *status == 200 || told.unknown.contains(user) || body == "over limit",
            "{user} owns a unit but was told {status} {body}"
        );
    }
    for (user, (status, body)) in &told.last {
        assert!(
            *status == 200 || (*status == 409 && (body == "sold out" || body == "over limit")),
            "{user}: no final answer: {status} {body}"
        );
    }
    assert!(
        told.slowest < Duration::from_millis(DEADLINE_MS) + Duration::from_secs(3),
        "a request took {:?}",
        told.slowest
    );
    told.last
        .iter()
        .filter(|(user, (status, _))| *status == 200 && !owners.contains_key(*user))
        .count()
}

fn owners_of(sale: &PartitionedSale, con: &mut impl redis::ConnectionLike) -> HashMap<String, u64> {
    sale.buyers(con)
        .unwrap()
        .into_iter()
        .map(|b| (String::from_utf8(b.user).unwrap(), b.qty))
        .collect()
}

#[test]
fn the_service_sells_exactly_through_a_redis_restart_and_restarts_onto_its_sale() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let (service, address) = start_service(&server.url());
    let told = buy_over_http(&address, 300, || server.kill_and_restart_on_its_port());
    let mut con = server.con();
    let sale = PartitionedSale::open(&mut con, "sale:web").unwrap();
    let owners = owners_of(&sale, &mut con);
    let sold = sale.info(&mut con).unwrap().sold;
    let lost = check(&told, &owners, sold);
    assert_eq!(
        lost, 0,
        "one server with appendfsync always loses nothing told"
    );
    stop_service(service);
    // Started again, it opens the sale it made (no DEL): sold out, and says so.
    let (service, address) = start_service(&server.url());
    assert_eq!(
        http(&address, "POST", "/buy/late"),
        (409, "sold out".to_string())
    );
    assert_eq!(http(&address, "GET", "/bought/user-0").0, 200);
    stop_service(service);
}

#[test]
fn the_service_sells_exactly_through_a_killed_cluster_master() {
    let mut nodes = start_cluster_with_replicas(3, 1, &[]);
    let urls = urls(&nodes);
    let (service, address) = start_service(&urls.join(","));
    let victim = owner_of(&urls, "{sale:web/0}");
    let told = buy_over_http(&address, 300, || {
        nodes.iter_mut().find(|n| n.url() == victim).unwrap().kill();
    });
    let live: Vec<String> = urls.iter().filter(|u| **u != victim).cloned().collect();
    let mut con = cluster_con(&live);
    let sale = PartitionedSale::open(&mut con, "sale:web").unwrap();
    if let Err(e) = sale.buyers(&mut con) {
        // Seen once in CI, under a loaded machine: a partition missing after the failover.
        // What each live node says, to tell a replica promoted without the data.
        for node in &live {
            let mut node_con = redis::Client::open(node.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let replication: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut node_con)
                .unwrap();
            let keys: i64 = redis::cmd("DBSIZE").query(&mut node_con).unwrap();
            println!("{node}: {keys} keys\n{replication}");
        }
        panic!("buyers after the failover: {e}");
    }
    let owners = owners_of(&sale, &mut con);
    let sold = sale.info(&mut con).unwrap().sold;
    let lost = check(&told, &owners, sold);
    // Redis Cluster may lose a write its master acknowledged before the replica had it.
    println!("{lost} told \"bought\" lost to the failover (unreplicated writes)");
    stop_service(service);
}
