//! Durability (#51): "bought" means kept by a failover, by default. A handle's `Durability`
//! (`Replica` unless set) answers a purchase once a replica acknowledged it, `NotReplicated`
//! when none did in time, sends no `WAIT` to a master with no replica, and shares one `WAIT`
//! between the concurrent purchases on an `aio::ClusterSession`.

use seckill_client::aio;
use seckill_client::{
    Durability, Error, FlashSale, PartitionedSale, RetryPolicy, Sale, SaleSpec, Session, TryReply,
};
use seckill_harness::{Server, blocked_clients, command_calls, replicate, wait_until};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn waits(server: &Server) -> i64 {
    command_calls(&mut server.con(), "wait")
}

fn bought_on(server: &Server, user: &str) -> i64 {
    seckill_harness::int(&mut server.con(), &["SECKILL.BOUGHT", "s", user])
}

/// A master and its replica, in sync.
fn master_with_replica() -> (Server, Server) {
    let master = Server::start();
    let replica = Server::start();
    replicate(&replica, &master);
    (master, replica)
}

fn link_up(replica: &Server) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut replica.con())
        .unwrap();
    info.contains("master_link_status:up")
}

#[test]
fn a_master_that_never_had_a_replica_is_answered_without_a_wait() {
    let server = Server::start();
    let mut con = server.con();
    let sale = Sale::create(&mut con, "s", &SaleSpec::new(10, 1).hold_ms(60_000)).unwrap();
    for left in (5..10).rev() {
        let reply = sale.try_buy(&mut con, format!("u{left}"), 1).unwrap();
        assert_eq!(reply, TryReply::Bought { remaining: left });
    }
    assert!(sale.confirm(&mut con, "u9").unwrap());
    assert_eq!(sale.cancel(&mut con, "u8", None).unwrap(), 1);
    sale.restock(&mut con, 2).unwrap();
    assert_eq!(waits(&server), 0);
}

/// The sale "s" of `units` units, one per buyer, created on `session`.
/// A session on `master` whose replies are bounded by `response_timeout`.
async fn session_bounded(master: &Server, response_timeout: Duration) -> aio::ClusterSession {
    aio::ClusterSession::builder([master.url()])
        .unwrap()
        .response_timeout(response_timeout)
        .connect()
        .await
        .unwrap()
}

async fn sale_on(session: &aio::ClusterSession, units: u64) -> aio::Sale {
    aio::Sale::create(&mut session.clone(), "s", &SaleSpec::new(units, 1))
        .await
        .unwrap()
}

/// `count` purchases at once on clones of `session`, by buyers `{prefix}0`, `{prefix}1`, ...:
/// their replies in the buyers' order.
async fn buy_at_once(
    sale: &Arc<aio::Sale>,
    session: &aio::ClusterSession,
    prefix: &str,
    count: usize,
) -> Vec<seckill_client::Result<TryReply>> {
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let (sale, mut con, user) = (sale.clone(), session.clone(), format!("{prefix}{i}"));
            tokio::spawn(async move { aio::FlashSale::try_buy(&*sale, &mut con, user, 1).await })
        })
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }
    replies
}

#[tokio::test]
async fn concurrent_purchases_on_a_session_share_their_waits() {
    let (master, replica) = master_with_replica();
    let session = aio::ClusterSession::connect([master.url()]).await.unwrap();
    let sale = Arc::new(sale_on(&session, 300).await);
    let (before, sent_before) = (waits(&master), session.waits());
    for reply in buy_at_once(&sale, &session, "u", 256).await {
        assert!(matches!(reply, Ok(TryReply::Bought { .. })));
    }
    let sent = waits(&master) - before;
    println!("{sent} WAITs for 256 purchases");
    assert!((1..=32).contains(&sent), "{sent} WAITs for 256 purchases");
    assert_eq!(
        sent as u64,
        session.waits() - sent_before,
        "counted by the session too"
    );
    let sold = seckill_harness::field(&mut replica.con(), &["SECKILL.INFO", "s"], "sold");
    assert_eq!(sold, 256, "every purchase answered is on the replica");
}

/// Purchases sent while a `WAIT` holds each of a session's connections (the replica frozen)
/// are not written behind it one write at a time, each with a `WAIT` of its own answered a
/// replica's round trip after the one before: the connection's writer holds them until the
/// `WAIT` answers and writes them together, with one `WAIT`.
#[tokio::test]
async fn purchases_sent_behind_a_wait_share_the_next_one() {
    let (master, replica) = master_with_replica();
    let session = aio::ClusterSession::connect([master.url()]).await.unwrap();
    let sale = Arc::new(
        sale_on(&session, 100)
            .await
            .ack_timeout(Duration::from_secs(30)),
    );
    replica.signal(libc::SIGSTOP);
    let before = waits(&master);
    let mut buyers = Vec::new();
    let mut buy = |user: String| {
        let (sale, mut con) = (sale.clone(), session.clone());
        buyers.push(tokio::spawn(async move {
            aio::FlashSale::try_buy(&*sale, &mut con, user, 1).await
        }));
    };
    // The session's two connections to the master, each held by a purchase's WAIT.
    buy("first".into());
    wait_held(&master, 1).await;
    buy("second".into());
    wait_held(&master, 2).await;
    // Ten more, each sent on its own (20 ms apart): all wait behind the two WAITs.
    for i in 0..10 {
        buy(format!("late{i}"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    replica.signal(libc::SIGCONT);
    for buyer in buyers {
        let reply = buyer.await.unwrap();
        assert!(matches!(reply, Ok(TryReply::Bought { .. })), "{reply:?}");
    }
    let sent = waits(&master) - before;
    println!("{sent} WAITs for 12 purchases, 10 of them sent behind a WAIT");
    // The two that held the connections, then one per connection for the ten.
    assert!(sent <= 4, "{sent} WAITs for 12 purchases");
    let sold = seckill_harness::field(&mut replica.con(), &["SECKILL.INFO", "s"], "sold");
    assert_eq!(sold, 12, "every purchase answered is on the replica");
}

/// A connection the session dropped while its writer held a purchase behind a `WAIT` (the
/// master frozen: every call on it timed out) writes nothing more: the purchase given up there
/// never runs later, and the connection closes.
#[tokio::test]
async fn a_purchase_held_on_a_dropped_connection_never_runs() {
    let (master, replica) = master_with_replica();
    let session = session_bounded(&master, Duration::from_millis(200)).await;
    let sale = Arc::new(
        sale_on(&session, 100)
            .await
            // Long enough that the three purchases are sent while the first two hold both
            // connections, however busy the machine.
            .ack_timeout(Duration::from_secs(5))
            .with_retry(RetryPolicy::none()),
    );
    replica.signal(libc::SIGSTOP);
    let buy = |user: &str| {
        let (sale, mut con, user) = (sale.clone(), session.clone(), user.to_string());
        tokio::spawn(async move { aio::FlashSale::try_buy(&*sale, &mut con, user, 1).await })
    };
    let first = buy("first");
    wait_held(&master, 1).await;
    let second = buy("second");
    wait_held(&master, 2).await;
    // Both connections held: the late purchase waits in a writer (queued at its first poll).
    let late = buy("late");
    tokio::task::yield_now().await;
    drop(session);
    master.signal(libc::SIGSTOP);
    for buyer in [first, second, late] {
        let reply = buyer.await.unwrap();
        assert!(reply.is_err(), "{reply:?}");
    }
    master.signal(libc::SIGCONT);
    replica.signal(libc::SIGCONT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while session_clients(&master) > 0 {
        assert!(
            Instant::now() < deadline,
            "the session's connections stayed open"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(bought_on(&master, "late"), 0, "the given-up purchase ran");
}

/// A kept purchase on a session whose master froze ends by its own budget (the handle's
/// deadline for the write, its acknowledgement timeout and a grace for the `WAIT`: 2.1 s
/// here), not by the session's bound of a reply (20 s here): the session bounds the write and
/// its `WAIT` by both under one timer (`session::nodes::Deadline`; the session's bound alone,
/// shown, took the 20 s).
#[tokio::test]
async fn a_kept_purchase_on_a_frozen_master_ends_by_its_budget_not_the_sessions_bound() {
    let (master, _replica) = master_with_replica();
    let session = session_bounded(&master, Duration::from_secs(20)).await;
    let deadline = Duration::from_millis(500);
    let sale = sale_on(&session, 100).await.with_retry(RetryPolicy {
        deadline,
        ..RetryPolicy::default()
    });
    let warm = aio::FlashSale::try_buy(&sale, &mut session.clone(), "warm", 1).await;
    assert!(matches!(warm, Ok(TryReply::Bought { .. })), "{warm:?}");
    assert!(
        waits(&master) > 0,
        "a kept purchase: the handle saw the replica"
    );
    master.signal(libc::SIGSTOP);
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        aio::FlashSale::try_buy(&sale, &mut session.clone(), "u", 1),
    )
    .await;
    let took = started.elapsed();
    master.signal(libc::SIGCONT);
    let answer = answer.expect("the purchase hung past the test's bound");
    println!("ended in {took:?} (deadline {deadline:?}): {answer:?}");
    assert!(
        matches!(answer, Err(Error::OutcomeUnknown { .. })),
        "{answer:?}"
    );
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: the session's 20 s, not the purchase's budget"
    );
}

/// `server`'s clients but the asking one and its replicas.
fn session_clients(server: &Server) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.con())
        .unwrap();
    list.lines()
        .filter(|client| !client.contains("flags=S") && !client.contains("cmd=client|list"))
        .count()
}

/// Until `count` clients of `server` are blocked (a WAIT each).
async fn wait_held(server: &Server, count: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while blocked_clients(&mut server.con()) < count {
        assert!(Instant::now() < deadline, "no {count} WAITs blocked");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// While purchases succeed, an `aio::ClusterSession` connection ends each write of kept
/// purchases with their `WAIT` (a round trip less); once they are refused, it does not: a
/// sold-out sale's refusals never wait behind a `WAIT` for a frozen replica.
#[tokio::test]
async fn refusals_send_no_wait_even_behind_a_frozen_replica() {
    let (master, replica) = master_with_replica();
    let session = aio::ClusterSession::connect([master.url()]).await.unwrap();
    // The default acknowledgement timeout (1 s): 500 ms is a loaded machine's WAIT at times.
    let sale = Arc::new(sale_on(&session, 200).await);
    // Sold out by 256 buyers: 200 bought, each kept.
    let replies = buy_at_once(&sale, &session, "u", 256).await;
    let bought = replies
        .iter()
        .filter(|r| matches!(r, Ok(TryReply::Bought { .. })))
        .count();
    assert_eq!(bought, 200, "{replies:?}");
    assert!(
        replies
            .iter()
            .all(|r| matches!(r, Ok(TryReply::Bought { .. } | TryReply::SoldOut)))
    );
    replica.signal(libc::SIGSTOP);
    let before = waits(&master);
    for round in 0..5 {
        let replies = buy_at_once(&sale, &session, ["a", "b", "c", "d", "e"][round], 200).await;
        assert!(
            replies.iter().all(|r| matches!(r, Ok(TryReply::SoldOut))),
            "{replies:?}"
        );
    }
    let sent = waits(&master) - before;
    replica.signal(libc::SIGCONT);
    // A connection whose last kept purchase was bought may end its next write with a WAIT:
    // one per connection at most (the session has 2 per node).
    assert!(sent <= 2, "{sent} WAITs for 1 000 refusals");
}

#[test]
fn a_cut_replica_makes_a_purchase_not_replicated_and_the_same_attempt_is_kept_later() {
    let (master, replica) = master_with_replica();
    let mut con = Session::server(redis::Client::open(master.url()).unwrap(), None).unwrap();
    // The default acknowledgement timeout (1 s) while the replica is up: a loaded machine's
    // replica took more than 300 ms to acknowledge a sale's INIT once (the Python twin).
    let sale = Sale::create(&mut con, "s", &SaleSpec::new(10, 1)).unwrap();
    assert_eq!(
        sale.try_buy(&mut con, "alice", 1).unwrap(),
        TryReply::Bought { remaining: 9 }
    );
    assert!(waits(&master) >= 1);
    assert_eq!(
        bought_on(&replica, "alice"),
        1,
        "on the replica when answered"
    );
    // The replica frozen and its link cut, 300 ms to acknowledge.
    let sale = sale.ack_timeout(Duration::from_millis(300));
    replica.signal(libc::SIGSTOP);
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut master.con())
        .unwrap();
    let started = Instant::now();
    let attempt = match sale.try_buy(&mut con, "bob", 1) {
        Err(e @ Error::NotReplicated { reply: 8, .. }) => {
            assert!(e.is_outcome_unknown());
            let Error::NotReplicated { attempt_id, .. } = e else {
                unreachable!()
            };
            attempt_id.expect("a purchase's attempt id")
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    };
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited");
    // A handle asking for the master's answer only gets it without a WAIT.
    let before = waits(&master);
    let master_only = Sale::new("s").durability(Durability::Master);
    assert_eq!(
        master_only.try_buy(&mut con, "carol", 1).unwrap(),
        TryReply::Bought { remaining: 7 }
    );
    assert_eq!(waits(&master), before);
    // Back: the same attempt answers the purchase again (not a second one), and is kept.
    replica.signal(libc::SIGCONT);
    wait_until(Duration::from_secs(30), "the replica's link", || {
        link_up(&replica)
    });
    let sale = sale.ack_timeout(Duration::from_secs(1));
    let again = sale.try_buy_again(&mut con, "bob", 1, &attempt).unwrap();
    assert_eq!(again, TryReply::Bought { remaining: 7 });
    assert_eq!(bought_on(&replica, "bob"), 1);
    assert_eq!(sale.info(&mut con).unwrap().sold, 3);
}

/// Handles still pointed at a master that turned replica (the old master back as a replica of
/// the promoted one) whose replicas take writes (`replica-read-only no`): a purchase runs
/// there and the `WAIT` after it is refused ("WAIT cannot be used with replica instances"). It
/// is sent again under its attempt id (the write ran: the outcome is unknown), never told
/// "bought" for a unit the new master never had: sync, and on an `aio::ClusterSession` (the
/// write and its `WAIT` in one write). A failover between a write and its `WAIT` meets the
/// same refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_answered_by_a_master_turned_replica_is_never_told_bought() {
    let (old, new) = master_with_replica();
    let retry = RetryPolicy {
        deadline: Duration::from_secs(1),
        ..RetryPolicy::default()
    };
    let session = aio::ClusterSession::connect([old.url()]).await.unwrap();
    let asale = sale_on(&session, 10).await.with_retry(retry);
    let bought = aio::FlashSale::try_buy(&asale, &mut session.clone(), "alice", 1).await;
    assert_eq!(bought.unwrap(), TryReply::Bought { remaining: 9 });
    let client = redis::Client::open(old.url()).unwrap();
    let sale = Sale::new("s").with_retry(retry);
    let blocking = tokio::task::spawn_blocking(move || {
        let mut con = Session::server(client, None).unwrap();
        let first = sale.try_buy(&mut con, "carol", 1);
        (sale, con, first)
    });
    let (sale, mut con, first) = blocking.await.unwrap();
    assert_eq!(first.unwrap(), TryReply::Bought { remaining: 8 });
    // The failover: the replica promoted, the old master following it and taking writes.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut new.con())
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query(&mut old.con())
        .unwrap();
    replicate(&old, &new);
    let unknown = |reply: seckill_client::Result<TryReply>| match reply {
        Err(e) => assert!(
            e.is_outcome_unknown() && !matches!(e, Error::NotReplicated { .. }),
            "{e:?}"
        ),
        Ok(reply) => panic!("told {reply:?} by a replica"),
    };
    unknown(aio::FlashSale::try_buy(&asale, &mut session.clone(), "bob", 1).await);
    let blocking = tokio::task::spawn_blocking(move || sale.try_buy(&mut con, "dave", 1));
    unknown(blocking.await.unwrap());
    let on_new: Vec<_> = ["alice", "carol", "bob", "dave"]
        .map(|user| bought_on(&new, user))
        .into();
    assert_eq!(on_new, [1, 1, 0, 0]);
}

/// The incident in small: buyers on a master whose replica is frozen and cut off for 0.4 s,
/// then the master dies and the replica is promoted. `Durability::Master` buyers are told "bought" for
/// units the promoted replica never had (the failure this guards against); the default
/// handle's buyers only for units it has.
#[test]
fn whoever_was_told_bought_owns_the_unit_after_the_failover() {
    let (mut master, replica) = master_with_replica();
    seckill_harness::ok(&mut master.con(), &["SECKILL.INIT", "s", "100000"]);
    seckill_harness::wait_replicas(&mut master.con(), 1);
    let stop = Arc::new(AtomicBool::new(false));
    let told: Arc<Mutex<Vec<(Durability, String)>>> = Arc::default();
    let buyers: Vec<_> = [Durability::Replica, Durability::Master]
        .into_iter()
        .flat_map(|durability| [(durability, 0), (durability, 1)])
        .map(|(durability, n)| {
            let (stop, told, url) = (stop.clone(), told.clone(), master.url());
            std::thread::spawn(move || {
                let client = redis::Client::open(url).unwrap();
                let Ok(mut con) = Session::server(client, Some(Duration::from_secs(2))) else {
                    return;
                };
                let sale = Sale::new("s")
                    .durability(durability)
                    .ack_timeout(Duration::from_millis(100))
                    .with_retry(RetryPolicy {
                        deadline: Duration::from_millis(500),
                        ..RetryPolicy::default()
                    });
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let user = format!("{durability:?}-{n}-{i}");
                    i += 1;
                    if let Ok(TryReply::Bought { .. }) = sale.try_buy(&mut con, &user, 1) {
                        told.lock().unwrap().push((durability, user));
                    }
                }
            })
        })
        .collect();
    let count = |d: Durability| {
        told.lock()
            .unwrap()
            .iter()
            .filter(|(of, _)| *of == d)
            .count()
    };
    wait_until(Duration::from_secs(30), "purchases on both handles", || {
        count(Durability::Replica) >= 20 && count(Durability::Master) >= 20
    });
    // Frozen and cut: what the master writes from now on never reaches it.
    seckill_harness::isolate_replica(&replica, &mut master.con());
    std::thread::sleep(Duration::from_millis(400)); // the fault's length
    master.kill();
    stop.store(true, Ordering::Relaxed);
    for buyer in buyers {
        buyer.join().unwrap();
    }
    replica.signal(libc::SIGCONT);
    let mut promoted = replica.con();
    seckill_harness::promote(&mut promoted);
    let lost = |d: Durability| {
        let told = told.lock().unwrap();
        let of = told.iter().filter(|(of, _)| *of == d);
        of.filter(|(_, user)| bought_on(&replica, user) != 1)
            .count()
    };
    assert_eq!(
        lost(Durability::Replica),
        0,
        "buyers told bought own nothing"
    );
    assert!(
        lost(Durability::Master) > 0,
        "master-only answers lost (the test's premise)"
    );
}

/// `Durability::Aof` waits for the master's AOF (and a replica's, when it has one): refused
/// with `InvalidArgument` on a server without WAITAOF (Redis 7.0) or without an AOF.
#[test]
fn aof_durability_needs_waitaof_and_an_aof() {
    let server = Server::start();
    let mut con = server.con();
    seckill_harness::ok(&mut con, &["SECKILL.INIT", "s", "10"]);
    let sale = Sale::new("s").durability(Durability::Aof);
    let waitaof = redis::cmd("WAITAOF")
        .arg(0)
        .arg(0)
        .arg(1)
        .query::<redis::Value>(&mut con);
    let unknown =
        matches!(&waitaof, Err(e) if e.to_string().to_lowercase().contains("unknown command"));
    match sale.try_buy(&mut con, "alice", 1) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("WAITAOF"), "{why}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(
        sale.bought(&mut con, "alice").unwrap(),
        0,
        "refused before it was sent"
    );
    if unknown {
        println!("this server has no WAITAOF (Redis 7.2+, Valkey 8+): refused, as it must be");
        return;
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut con)
        .unwrap();
    wait_until(Duration::from_secs(30), "the AOF", || {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut con)
            .unwrap();
        info.contains("aof_rewrite_in_progress:0")
    });
    assert_eq!(
        sale.try_buy(&mut con, "bob", 1).unwrap(),
        TryReply::Bought { remaining: 9 }
    );
    assert!(command_calls(&mut con, "waitaof") >= 2);
}

/// A mover LENT units out of one partition and died before ABSORB. Absorbed by `recover`
/// while no replica has that LEND, a failover of the source would give the units back while
/// the target sells them too. Recover sends the LEND again as a kept write first (it moves
/// nothing, and the module propagates a marker so that the WAIT covers the LEND: on Valkey 9,
/// without it, the WAIT on a connection whose own writes were acknowledged answers at once).
#[test]
fn recover_absorbs_a_crashed_movers_transfer_only_once_a_replica_has_its_lend() {
    let (master, replica) = master_with_replica();
    let mut con = Session::server(redis::Client::open(master.url()).unwrap(), None).unwrap();
    // The default acknowledgement timeout while the replica is up (see above); 300 ms for the
    // recover that must not finish.
    let sale = PartitionedSale::create(&mut con, "drop", &SaleSpec::new(10, 2)).unwrap();
    let (source, target) = (
        sale.partition_keys()[0].clone(),
        sale.partition_keys()[1].clone(),
    );
    // A purchase the replica acknowledged: the connection has a write of its own.
    assert!(matches!(
        sale.try_buy(&mut con, "alice", 1).unwrap(),
        TryReply::Bought { .. }
    ));
    // Frozen with its link up: counted by the master, every write before the LEND acknowledged.
    let sale = sale.ack_timeout(Duration::from_millis(300));
    replica.signal(libc::SIGSTOP);
    let lent: i64 = redis::cmd("SECKILL.LEND")
        .arg(&source)
        .arg("crashed-1")
        .arg(4)
        .arg("TO")
        .arg(&target)
        .query(&mut master.con())
        .unwrap();
    assert_eq!(lent, 4);
    assert_eq!(
        sale.recover(&mut con).unwrap(),
        0,
        "not finished while no replica has the LEND"
    );
    let infos = sale.partition_infos(&mut con).unwrap();
    assert_eq!((infos[0].pending_out, infos[1].absorbed), (4, 0));
    replica.signal(libc::SIGCONT);
    wait_until(Duration::from_secs(30), "the replica's link", || {
        link_up(&replica)
    });
    let sale = sale.ack_timeout(Duration::from_secs(1));
    assert_eq!(sale.recover(&mut con).unwrap(), 1);
    let infos = sale.partition_infos(&mut con).unwrap();
    assert_eq!((infos[0].pending_out, infos[1].absorbed), (0, 4));
    assert_eq!(
        infos.iter().map(|i| i.remaining).sum::<u64>(),
        9,
        "every unit once: 10, one sold"
    );
}
