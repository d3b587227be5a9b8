//! A history checker under faults, in the manner of Jepsen but in process: client threads
//! record every call (start, end, result) while a driver freezes the replica, cuts its link,
//! kills the master with SIGKILL, promotes the replica and restarts the old master from its
//! AOF as the new replica, round after round. The checker then judges the history alone:
//! - fences: a grant that began after another grant ended has a greater fence, and no fence is
//!   handed out twice;
//! - purchases acknowledged and replicated (`WAIT 1` answered 1) are all in the final sale,
//!   never more of them than the stock, never more than LIMIT per user;
//! - the final sale is not oversold and holds no user over LIMIT.
//!
//! Purchases acknowledged but not replicated may be lost by a failover: they are counted and
//! reported, not judged. The checker is shown to fail on planted bugs: on a real run with the
//! plain counter fences, and on synthetic histories for each rule.

use seckill_harness::{Server, replicate};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const STOCK: i64 = 200;
const LIMIT: i64 = 2;
/// 150 users x LIMIT 2 = 300 units wanted of 200: demand exceeds stock.
const USERS: usize = 150;
const CLIENTS: usize = 4;
const LOCK_KEY: &str = "history:lock";

#[derive(Clone, Debug)]
enum Outcome {
    Grant {
        fence: i64,
    },
    Purchase {
        sale: String,
        user: String,
        replicas: i64,
    },
}

#[derive(Clone, Debug)]
struct Call {
    start: Instant,
    end: Instant,
    outcome: Outcome,
}

/// The state the history is judged against, read from the last master.
struct Final {
    bought: HashMap<(String, String), i64>,
    sold: HashMap<String, i64>,
}

#[derive(Debug, Default)]
struct Verdict {
    violations: Vec<String>,
    grants: usize,
    purchases: usize,
    replicated: usize,
    /// Acknowledged but not replicated, and missing from the final sale.
    lost_unreplicated: i64,
}

fn check(history: &[Call], last: &Final) -> Verdict {
    let mut verdict = Verdict::default();
    let origin = history.iter().map(|c| c.start).min();
    let at = |t: Instant| origin.map_or(0, |o| t.duration_since(o).as_millis());

    let mut grants: Vec<(&Call, i64)> = history
        .iter()
        .filter_map(|c| match c.outcome {
            Outcome::Grant { fence } => Some((c, fence)),
            _ => None,
        })
        .collect();
    verdict.grants = grants.len();
    let mut by_end = grants.clone();
    by_end.sort_by_key(|(c, _)| c.end);
    grants.sort_by_key(|(c, _)| c.start);
    let mut ended = by_end.iter().peekable();
    let mut highest_ended: Option<(i64, Instant)> = None;
    for (call, fence) in &grants {
        while let Some((done, done_fence)) = ended.next_if(|(done, _)| done.end < call.start) {
            if highest_ended.is_none_or(|(f, _)| *done_fence > f) {
                highest_ended = Some((*done_fence, done.end));
            }
        }
        if let Some((high, when)) = highest_ended
            && *fence <= high
        {
            verdict.violations.push(format!(
                "fence went back: a grant begun at {} ms got {fence}, after a grant with fence \
                 {high} had ended at {} ms",
                at(call.start),
                at(when)
            ));
        }
    }
    let mut seen: HashMap<i64, usize> = HashMap::new();
    for (_, fence) in &grants {
        *seen.entry(*fence).or_default() += 1;
    }
    for (fence, times) in seen.into_iter().filter(|(_, n)| *n > 1) {
        verdict
            .violations
            .push(format!("fence {fence} granted {times} times"));
    }

    let mut acked: HashMap<(String, String), (i64, i64)> = HashMap::new();
    let mut replicated_per_sale: HashMap<String, i64> = HashMap::new();
    for call in history {
        if let Outcome::Purchase {
            sale,
            user,
            replicas,
        } = &call.outcome
        {
            verdict.purchases += 1;
            let entry = acked.entry((sale.clone(), user.clone())).or_default();
            entry.0 += 1;
            if *replicas >= 1 {
                verdict.replicated += 1;
                entry.1 += 1;
                *replicated_per_sale.entry(sale.clone()).or_default() += 1;
            }
        }
    }
    for ((sale, user), (all, replicated)) in &acked {
        let kept = last
            .bought
            .get(&(sale.clone(), user.clone()))
            .copied()
            .unwrap_or(0);
        if *replicated > kept {
            verdict.violations.push(format!(
                "{sale}: {user} had {replicated} replicated purchases acknowledged, {kept} kept"
            ));
        }
        if *replicated > LIMIT {
            verdict.violations.push(format!(
                "{sale}: {user} over the limit among replicated acknowledgements ({replicated})"
            ));
        }
        verdict.lost_unreplicated += (all - kept).max(0);
    }
    for (sale, replicated) in &replicated_per_sale {
        if *replicated > STOCK {
            verdict.violations.push(format!(
                "{sale}: {replicated} replicated acknowledgements for {STOCK} units"
            ));
        }
    }
    for (sale, sold) in &last.sold {
        if *sold > STOCK {
            verdict
                .violations
                .push(format!("{sale}: oversold, {sold} of {STOCK}"));
        }
    }
    for ((sale, user), bought) in &last.bought {
        if *bought > LIMIT {
            verdict
                .violations
                .push(format!("{sale}: {user} holds {bought}, over LIMIT {LIMIT}"));
        }
    }
    verdict
}

struct Shared {
    master_port: AtomicU16,
    sale: Mutex<String>,
    history: Mutex<Vec<Call>>,
    stop: AtomicBool,
}

impl Shared {
    fn record(&self, start: Instant, outcome: Outcome) {
        let end = Instant::now();
        self.history.lock().unwrap().push(Call {
            start,
            end,
            outcome,
        });
    }

    fn calls_since(&self, mark: Instant, want: impl Fn(&Outcome) -> bool) -> usize {
        let history = self.history.lock().unwrap();
        history
            .iter()
            .filter(|c| c.start > mark && want(&c.outcome))
            .count()
    }
}

fn connect(port: u16) -> Option<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(con)
}

/// One client: lock grants (released at once) and single-unit purchases, each followed by
/// `WAIT 1 100` in the same pipeline: one round trip says whether the write reached the replica.
fn client(shared: Arc<Shared>, id: usize) {
    let mut rng = id as u64 * 0x9e37_79b9 + 1;
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let mut current: Option<(u16, redis::Connection)> = None;
    let mut n = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let port = shared.master_port.load(Ordering::Relaxed);
        if current.as_ref().is_none_or(|(p, _)| *p != port) {
            current = connect(port).map(|con| (port, con));
        }
        let Some((_, con)) = current.as_mut() else {
            // The master is down: back off until the driver names the next one.
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        n += 1;
        let start = Instant::now();
        let failed = if n.is_multiple_of(2) {
            let token = format!("c{id}-{n}");
            let granted: redis::RedisResult<Option<i64>> = redis::cmd("LOCK.ACQUIRE")
                .arg(LOCK_KEY)
                .arg(&token)
                .arg(1000)
                .query(con);
            match granted {
                Ok(Some(fence)) => {
                    shared.record(start, Outcome::Grant { fence });
                    redis::cmd("LOCK.RELEASE")
                        .arg(LOCK_KEY)
                        .arg(&token)
                        .query::<i64>(con)
                        .is_err()
                }
                Ok(None) => false,
                Err(_) => true,
            }
        } else {
            let sale = shared.sale.lock().unwrap().clone();
            let user = format!("u{}", next(USERS));
            let replies: redis::RedisResult<(i64, i64)> = redis::pipe()
                .cmd("SECKILL.TRY")
                .arg(&sale)
                .arg(&user)
                .arg(1)
                .cmd("WAIT")
                .arg(1)
                .arg(100)
                .query(con);
            match replies {
                Ok((remaining, replicas)) => {
                    if remaining >= 0 {
                        let outcome = Outcome::Purchase {
                            sale,
                            user,
                            replicas,
                        };
                        shared.record(start, outcome);
                    }
                    false
                }
                Err(_) => true,
            }
        };
        if failed {
            current = None;
        }
    }
}

fn is_grant(o: &Outcome) -> bool {
    matches!(o, Outcome::Grant { .. })
}

fn is_purchase(o: &Outcome) -> bool {
    matches!(o, Outcome::Purchase { .. })
}

/// Runs `rounds` failovers under load and returns the history and the last master's state.
fn run(module_args: &[&str], rounds: usize) -> (Vec<Call>, Final) {
    let mut args = module_args.to_vec();
    args.extend(["--appendonly", "yes", "--appendfsync", "always"]);
    let mut master = Server::start_with(&args);
    let mut replica = Server::start_with(&args);
    replicate(&replica, &master);
    let shared = Arc::new(Shared {
        master_port: AtomicU16::new(master.port),
        sale: Mutex::new(String::new()),
        history: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    });
    let wait = Duration::from_secs(60);
    let mut sales = Vec::new();
    let mut threads = Vec::new();
    for round in 0..rounds {
        let sale = format!("history:sale:{round}");
        let mut con = master.con();
        let _: () = redis::cmd("SECKILL.INIT")
            .arg(&sale)
            .arg(STOCK)
            .arg("LIMIT")
            .arg(LIMIT)
            .query(&mut con)
            .unwrap();
        seckill_harness::wait_replicas(&mut con, 1);
        *shared.sale.lock().unwrap() = sale.clone();
        sales.push(sale.clone());
        if threads.is_empty() {
            threads = (0..CLIENTS)
                .map(|id| {
                    let shared = shared.clone();
                    std::thread::spawn(move || client(shared, id))
                })
                .collect();
        }
        let mark = Instant::now();
        seckill_harness::wait_until(wait, "replicated traffic", || {
            shared.calls_since(mark, is_grant) >= 5 && shared.calls_since(mark, is_purchase) >= 5
        });
        // Writes from here on stay on the master.
        seckill_harness::isolate_replica(&replica, &mut con);
        let frozen = Instant::now();
        seckill_harness::wait_until(wait, "writes the replica misses", || {
            shared.calls_since(frozen, is_grant) >= 1
                && shared.calls_since(frozen, is_purchase) >= 1
        });
        master.kill();
        replica.signal(libc::SIGCONT);
        seckill_harness::promote(&mut replica.con());
        std::mem::swap(&mut master, &mut replica);
        shared.master_port.store(master.port, Ordering::Relaxed);
        let promoted = Instant::now();
        // The old master comes back from its AOF (with the writes nobody else saw) and
        // becomes the new replica, which discards them.
        replica.kill_and_restart();
        replicate(&replica, &master);
        seckill_harness::wait_until(wait, "traffic on the promoted master", || {
            shared.calls_since(promoted, is_grant) >= 5
        });
        seckill_harness::wait_until(wait, "the round's sale sold out", || {
            seckill_harness::field(&mut master.con(), &["SECKILL.INFO", &sale], "sold_out") == 1
        });
    }
    shared.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("client thread");
    }
    let mut con = master.con();
    let mut last = Final {
        bought: HashMap::new(),
        sold: HashMap::new(),
    };
    for sale in &sales {
        let sold = seckill_harness::field(&mut con, &["SECKILL.INFO", sale], "sold");
        last.sold.insert(sale.clone(), sold);
        for u in 0..USERS {
            let user = format!("u{u}");
            let bought = seckill_harness::int(&mut con, &["SECKILL.BOUGHT", sale, &user]);
            last.bought.insert((sale.clone(), user), bought);
        }
    }
    let history = std::mem::take(&mut *shared.history.lock().unwrap());
    (history, last)
}

fn rounds() -> usize {
    if std::env::var_os("SECKILL_SOAK").is_some() {
        20
    } else {
        3
    }
}

#[test]
fn history_under_failovers_holds_every_rule() {
    let (history, last) = run(&[], rounds());
    let verdict = check(&history, &last);
    println!(
        "[history] {} grants, {} purchases acknowledged ({} replicated, kept; {} not \
         replicated and lost)",
        verdict.grants, verdict.purchases, verdict.replicated, verdict.lost_unreplicated
    );
    assert!(verdict.grants > 0 && verdict.replicated > 0);
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
}

#[test]
fn checker_catches_the_counter_fences_planted_bug() {
    let (history, last) = run(&["fences", "counter"], 2);
    let verdict = check(&history, &last);
    println!("[history, counter fences] {:#?}", verdict.violations);
    assert!(
        verdict
            .violations
            .iter()
            .any(|v| v.starts_with("fence went back")),
        "{verdict:#?}"
    );
}

/// Synthetic histories: each rule fails when broken, and passes when not.
fn at(origin: Instant, from_ms: u64, to_ms: u64, outcome: Outcome) -> Call {
    Call {
        start: origin + Duration::from_millis(from_ms),
        end: origin + Duration::from_millis(to_ms),
        outcome,
    }
}

fn purchase(sale: &str, user: &str, replicas: i64) -> Outcome {
    Outcome::Purchase {
        sale: sale.into(),
        user: user.into(),
        replicas,
    }
}

fn final_state(bought: &[(&str, &str, i64)], sold: &[(&str, i64)]) -> Final {
    Final {
        bought: bought
            .iter()
            .map(|(s, u, n)| ((s.to_string(), u.to_string()), *n))
            .collect(),
        sold: sold.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
    }
}

#[test]
fn checker_rules_each_fail_on_a_planted_bug() {
    let o = Instant::now();
    let grant = |fence| Outcome::Grant { fence };
    let empty = final_state(&[], &[]);
    // Overlapping grants may come in any order; sequential ones must grow.
    let fine = [
        at(o, 0, 10, grant(5)),
        at(o, 5, 8, grant(4)),
        at(o, 11, 12, grant(6)),
    ];
    assert!(check(&fine, &empty).violations.is_empty());
    let back = [at(o, 0, 10, grant(5)), at(o, 11, 12, grant(5))];
    let v = check(&back, &empty).violations;
    assert!(v.iter().any(|v| v.starts_with("fence went back")), "{v:?}");
    assert!(v.iter().any(|v| v.contains("granted 2 times")), "{v:?}");

    let kept = final_state(&[("s", "a", 1)], &[("s", 1)]);
    let replicated = [at(o, 0, 1, purchase("s", "a", 1))];
    assert!(check(&replicated, &kept).violations.is_empty());
    let lost_replicated = check(&replicated, &final_state(&[("s", "a", 0)], &[("s", 0)]));
    assert!(lost_replicated.violations[0].contains("1 replicated purchases acknowledged, 0 kept"));
    let unreplicated = [at(o, 0, 1, purchase("s", "a", 0))];
    let maybe_lost = check(&unreplicated, &final_state(&[("s", "a", 0)], &[("s", 0)]));
    assert!(maybe_lost.violations.is_empty());
    assert_eq!(maybe_lost.lost_unreplicated, 1, "reported, not judged");

    let over_limit: Vec<Call> = (0..3)
        .map(|i| at(o, i, i + 1, purchase("s", "a", 1)))
        .collect();
    let v = check(&over_limit, &final_state(&[("s", "a", 3)], &[("s", 3)])).violations;
    assert!(v.iter().any(|v| v.contains("over the limit")), "{v:?}");
    assert!(v.iter().any(|v| v.contains("over LIMIT")), "{v:?}");

    let oversold: Vec<Call> = (0..=STOCK as u64)
        .map(|i| at(o, i, i + 1, purchase("s", &format!("u{i}"), 1)))
        .collect();
    let bought: Vec<(String, i64)> = (0..=STOCK).map(|i| (format!("u{i}"), 1)).collect();
    let last = Final {
        bought: bought
            .iter()
            .map(|(u, n)| (("s".to_string(), u.clone()), *n))
            .collect(),
        sold: [("s".to_string(), STOCK + 1)].into(),
    };
    let v = check(&oversold, &last).violations;
    assert!(
        v.iter()
            .any(|v| v.contains("replicated acknowledgements for")),
        "{v:?}"
    );
    assert!(v.iter().any(|v| v.contains("oversold")), "{v:?}");
}
