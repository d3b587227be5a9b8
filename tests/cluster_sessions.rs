//! The cluster sessions under faults, sync ([`ClusterSession`]) and async
//! ([`aio::ClusterSession`]): a SIGKILLed master followed without a new client, a purchase sent
//! only as often as the library sends it (a busy master, a cut connection, ASK, MOVED), and
//! every async call bounded by its deadline, also on a plain `cluster_async` connection stuck
//! on a frozen master.

use redis::cluster::ClusterClient;
use seckill_client::{
    ClusterSession, Error, FlashSale, PartitionedSale, RetryPolicy, Sale, SaleSpec, TryReply, aio,
};
use seckill_harness::topology::{cluster_con, masters, owner_of, replica_of, urls};
use seckill_harness::{
    Server, blocked_clients, cluster_node_id, command_calls, start_cluster,
    start_cluster_with_replicas, wait_until,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const PARTITIONS: u32 = 16;
const STOCK: u64 = 10_000;
const LIMIT: u64 = 2;

/// Which client API the buyers use.
#[derive(Clone, Copy, Debug)]
enum Api {
    Sync,
    Async,
}

/// Calls on a plain `cluster_async` connection (no response timeout: the state a stuck one is
/// in) to a SIGSTOPped master: each returns by its deadline, `OutcomeUnknown` (the purchase
/// was written to the socket) or `Unavailable`, instead of waiting for the master. (With the
/// tokio timeout taken out of the async link, the first call waited past the test's bound.)
#[test]
fn an_async_call_on_a_stuck_cluster_async_connection_returns_by_its_deadline() {
    let nodes = start_cluster(3, &[]);
    let urls = urls(&nodes);
    let mut con = cluster_con(&urls);
    let sale = Sale::create(&mut con, "sale:stuck", &SaleSpec::new(10, 1)).unwrap();
    let owner = owner_of(&urls, sale.key());
    let owner = nodes.iter().find(|n| n.url() == owner).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut plain = runtime
        .block_on(
            ClusterClient::new(urls.clone())
                .unwrap()
                .get_async_connection(),
        )
        .unwrap();
    let deadline = Duration::from_secs(2);
    let handle = aio::Sale::new(sale.key()).with_retry(RetryPolicy {
        deadline,
        ..RetryPolicy::default()
    });
    runtime
        .block_on(aio::FlashSale::try_buy(&handle, &mut plain, "warm", 1))
        .unwrap();
    owner.signal(libc::SIGSTOP);
    let started = Instant::now();
    let answer = runtime.block_on(async {
        // The test's own bound: far past the deadline, so a hang fails here, not forever.
        tokio::time::timeout(
            deadline * 10,
            aio::FlashSale::try_buy(&handle, &mut plain, "u1", 1),
        )
        .await
    });
    let took = started.elapsed();
    let info = runtime.block_on(async {
        tokio::time::timeout(deadline * 10, aio::FlashSale::info(&handle, &mut plain)).await
    });
    let info_took = started.elapsed() - took;
    owner.signal(libc::SIGCONT);
    let answer = answer.expect("try_buy hung past its deadline");
    assert!(
        matches!(answer, Err(Error::OutcomeUnknown { .. })),
        "{answer:?}"
    );
    assert!(took < deadline + Duration::from_secs(2), "took {took:?}");
    assert!(info.expect("info hung past its deadline").is_err());
    assert!(
        info_took < deadline + Duration::from_secs(2),
        "took {info_took:?}"
    );
    println!("try_buy answered in {took:?}, info in {info_took:?} (deadline {deadline:?})");
}

/// Issue 27: a master SIGKILLed (not a graceful failover) mid-sale. The buyers' sessions and
/// the sale handle were made once, before the kill, and go on once the replica is promoted:
/// every purchase answered, every one a replica acknowledged still owned, nobody over LIMIT.
/// A call that blocks in the server (`XREAD BLOCK`) holds its connection: the session's other
/// calls go on the node's other connection meanwhile and are answered while it blocks. (With
/// the calls going round the connections, every other one was written behind the block and
/// waited for it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_past_a_call_that_blocks_on_the_other_connection() {
    let server = Server::start();
    let session = aio::ClusterSession::connect([server.url()]).await.unwrap();
    let mut blocking = session.clone();
    let block = tokio::spawn(async move {
        redis::cmd("XREAD")
            .arg("BLOCK")
            .arg(120_000)
            .arg("STREAMS")
            .arg("stream")
            .arg("$")
            .query_async::<redis::Value>(&mut blocking)
            .await
    });
    wait_until(Duration::from_secs(30), "the XREAD to block", || {
        blocked_clients(&mut server.con()) == 1
    });
    let calls = async {
        for n in 0..20 {
            let mut con = session.clone();
            let set: redis::RedisResult<()> =
                redis::cmd("SET").arg(n).arg(n).query_async(&mut con).await;
            set.unwrap();
        }
    };
    // Far past what 20 calls take; the block lasts 120 s.
    tokio::time::timeout(Duration::from_secs(60), calls)
        .await
        .expect("the calls answered while the XREAD blocks");
    assert!(!block.is_finished(), "answered while it blocks");
    let _: String = redis::cmd("XADD")
        .arg("stream")
        .arg("*")
        .arg("f")
        .arg("v")
        .query(&mut server.con())
        .unwrap();
    let read = block.await.unwrap().unwrap();
    assert_ne!(read, redis::Value::Nil, "the entry added");
}

#[test]
fn a_killed_master_is_followed_without_a_new_client() {
    a_killed_master_is_followed_without_a_new_client_with(Api::Sync);
}

/// The same through the async API, on `aio::ClusterSession`s. On a bare
/// `cluster_async` connection, calls kept going to the killed master until their response
/// timeout for minutes after the promotion (425 s for 2 000 purchases with a 1 s timeout).
#[test]
fn a_killed_master_is_followed_without_a_new_client_async() {
    a_killed_master_is_followed_without_a_new_client_with(Api::Async);
}

const KILL_BUYERS: usize = 20;
const KILL_PER_BUYER: usize = 100;

type Answer = (String, TryReply, u64);

/// One buyer of the kill test, sync: a `ClusterSession`, which connects anew after a failure.
/// Replies its answers and how many times its session connected anew.
fn buy_through_kill_sync(
    sale: &PartitionedSale,
    urls: Vec<String>,
    t: usize,
    progress: &AtomicUsize,
) -> (Vec<Answer>, u64) {
    let mut session =
        ClusterSession::cluster(|| ClusterClient::builder(urls.clone()).retries(2)).unwrap();
    let mut answers = Vec::new();
    for n in 0..KILL_PER_BUYER {
        let user = format!("killed:{t}:{n}");
        // After the kill one shard has no replica left: WAIT then times out.
        let answer = sale.try_buy_acked(&mut session, &user, 1, 1, 200);
        let (reply, acked) = answer.unwrap_or_else(|e| panic!("{user}: {e}"));
        answers.push((user, reply, acked));
        progress.fetch_add(1, Ordering::Relaxed);
    }
    (answers, session.reconnects())
}

/// The kill test's buyers on tokio: KILL_BUYERS tasks, each on an `aio::ClusterSession` of its
/// own (a purchase's `WAIT` holds its connection in the server: 20 tasks sharing one session
/// took 308 s instead of 29, each purchase waiting for the others' WAITs). Replies their
/// answers; an async session never connects anew (0).
fn buy_through_kill_async(
    name: String,
    policy: RetryPolicy,
    urls: Vec<String>,
    progress: Arc<AtomicUsize>,
) -> (Vec<Answer>, u64) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let mut session = aio::ClusterSession::connect(urls.clone()).await.unwrap();
        let sale = aio::PartitionedSale::open(&mut session, &name)
            .await
            .unwrap();
        let sale = Arc::new(sale.with_retry(policy));
        let mut tasks = Vec::new();
        for t in 0..KILL_BUYERS {
            let mut session = session.detached();
            let (sale, progress) = (sale.clone(), progress.clone());
            tasks.push(tokio::spawn(async move {
                let mut answers = Vec::new();
                for n in 0..KILL_PER_BUYER {
                    let user = format!("killed:{t}:{n}");
                    let answer =
                        aio::FlashSale::try_buy_acked(&*sale, &mut session, &user, 1, 1, 200).await;
                    let (reply, acked) = answer.unwrap_or_else(|e| panic!("{user}: {e}"));
                    answers.push((user, reply, acked));
                    progress.fetch_add(1, Ordering::Relaxed);
                }
                answers
            }));
        }
        let mut answers = Vec::new();
        for task in tasks {
            answers.extend(task.await.expect("a buyer failed"));
        }
        (answers, 0)
    })
}

fn a_killed_master_is_followed_without_a_new_client_with(api: Api) {
    let mut nodes = start_cluster_with_replicas(3, 1, &[]);
    let urls = urls(&nodes);
    let mut con = cluster_con(&urls);
    let spec = SaleSpec::new(STOCK, PARTITIONS).limit(LIMIT);
    let sale = PartitionedSale::create(&mut con, "sale:killed", &spec).unwrap();
    let policy = RetryPolicy {
        deadline: Duration::from_secs(60),
        ..RetryPolicy::default()
    };
    let sale = Arc::new(
        PartitionedSale::open(&mut con, sale.name())
            .unwrap()
            .with_retry(policy),
    );
    let hot_master = owner_of(&urls, &sale.partition_keys()[0]);
    let replica = replica_of(&urls, &hot_master);
    let progress = Arc::new(AtomicUsize::new(0));
    let buyers: Vec<_> = match api {
        Api::Sync => (0..KILL_BUYERS)
            .map(|t| {
                let (sale, urls, progress) = (sale.clone(), urls.clone(), progress.clone());
                std::thread::spawn(move || buy_through_kill_sync(&sale, urls, t, &progress))
            })
            .collect(),
        Api::Async => {
            let (name, urls, progress) = (sale.name().to_string(), urls.clone(), progress.clone());
            vec![std::thread::spawn(move || {
                buy_through_kill_async(name, policy, urls, progress)
            })]
        }
    };
    wait_until(Duration::from_secs(60), "first purchases", || {
        progress.load(Ordering::Relaxed) > KILL_BUYERS * KILL_PER_BUYER / 4
    });
    let killed = nodes.iter_mut().find(|n| n.url() == hot_master).unwrap();
    killed.kill();
    let killed_at = Instant::now();
    let answered_before_kill = progress.load(Ordering::Relaxed);
    let mut reconnects = 0;
    let mut answers = Vec::new();
    for buyer in buyers {
        let (mine, made_anew) = buyer.join().expect("a buyer failed");
        answers.extend(mine);
        reconnects += made_anew;
    }
    let after_kill = killed_at.elapsed();
    assert!(masters(&urls).contains(&replica), "the replica took over");
    let mut con = cluster_con(&urls);
    let (mut kept, mut unacked_lost) = (0, 0);
    for (user, reply, acked) in &answers {
        let owned = sale.bought(&mut con, user).unwrap();
        assert!(owned <= LIMIT, "{user} over LIMIT");
        match (reply, acked) {
            (TryReply::Bought { .. }, 1..) => {
                assert_eq!(owned, 1, "{user}: a replicated purchase survives the kill");
                kept += 1;
            }
            (TryReply::Bought { .. }, 0) => unacked_lost += u64::from(owned == 0),
            (_, _) => assert_eq!(owned, 0, "{user}: refused yet owns"),
        }
    }
    let info = sale.info(&mut con).unwrap();
    assert!(info.sold + info.held <= STOCK);
    println!(
        "{} answers through the kill: {kept} replicated purchases kept, {unacked_lost} unreplicated lost, {reconnects} reconnects, done {after_kill:?} after the kill",
        answers.len()
    );
    assert_eq!(answers.len(), KILL_BUYERS * KILL_PER_BUYER);
    assert!(
        answered_before_kill < answers.len(),
        "the kill came after the buyers"
    );
    if matches!(api, Api::Sync) {
        assert!(reconnects > 0, "no sync session had to connect anew");
    }
}

/// redis-rs's cluster connections resend a command whose answer was lost by themselves; a
/// `ClusterSession` sends purchases on a connection of its own that does not, so only the
/// library resends them, within its policy: a purchase through a master busy past the response
/// timeout reaches the server exactly once with no retries allowed, and is bought with them.
/// A redirect ran nothing: the session follows ASK and MOVED itself, with no retry allowed.
#[test]
fn a_cluster_session_sends_a_purchase_only_as_often_as_the_library_does() {
    a_cluster_session_sends_a_purchase_only_as_often_as_the_library_does_with(Api::Sync);
}

#[test]
fn a_cluster_session_sends_a_purchase_only_as_often_as_the_library_does_async() {
    a_cluster_session_sends_a_purchase_only_as_often_as_the_library_does_with(Api::Async);
}

/// A session of either API buying in the one-key sale `key`.
enum Buyer {
    Sync(Box<ClusterSession>),
    Async(aio::ClusterSession, tokio::runtime::Runtime),
}

impl Buyer {
    fn new(api: Api, urls: &[String], response_timeout: Duration) -> Buyer {
        let builder = || ClusterClient::builder(urls.to_vec()).response_timeout(response_timeout);
        match api {
            Api::Sync => Buyer::Sync(Box::new(ClusterSession::cluster(builder).unwrap())),
            Api::Async => {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                let session = aio::ClusterSession::builder(urls.to_vec())
                    .unwrap()
                    .response_timeout(response_timeout)
                    .connect();
                Buyer::Async(runtime.block_on(session).unwrap(), runtime)
            }
        }
    }

    fn try_buy(&mut self, key: &str, policy: RetryPolicy, user: &str) -> Result<TryReply, Error> {
        match self {
            Buyer::Sync(con) => Sale::new(key)
                .with_retry(policy)
                .try_buy(&mut **con, user, 1),
            Buyer::Async(con, runtime) => {
                let sale = aio::Sale::new(key).with_retry(policy);
                runtime.block_on(aio::FlashSale::try_buy(&sale, con, user, 1))
            }
        }
    }
}

fn a_cluster_session_sends_a_purchase_only_as_often_as_the_library_does_with(api: Api) {
    let nodes = start_cluster(3, &[]);
    let urls = urls(&nodes);
    let mut con = cluster_con(&urls);
    let sale = Sale::create(&mut con, "sale:once", &SaleSpec::new(10, 1).limit(2)).unwrap();
    let key = sale.key();
    let mut buyer = Buyer::new(api, &urls, Duration::from_millis(100));
    let owner = owner_of(&urls, key);
    let owner = nodes.iter().find(|n| n.url() == owner).unwrap();
    let tries = || command_calls(&mut owner.con(), "seckill.try");
    let (once, default) = (RetryPolicy::none(), RetryPolicy::default());
    let before = tries();
    let answer = while_busy(owner, || buyer.try_buy(key, once, "u1"));
    assert!(
        matches!(answer, Err(Error::OutcomeUnknown { .. })),
        "{answer:?}"
    );
    assert_eq!(tries() - before, 1, "sent once: no retry was allowed");
    assert_eq!(sale.bought(&mut con, "u1").unwrap(), 1, "and it ran");
    // The timed-out connection was dropped: make the next one before the server is busy.
    buyer.try_buy(key, default, "u2").unwrap();
    let before = tries();
    let answer = while_busy(owner, || buyer.try_buy(key, default, "u2"));
    assert!(matches!(answer, Ok(TryReply::Bought { .. })), "{answer:?}");
    let sends = tries() - before;
    assert!(sends >= 2, "resent by the library: {sends}");
    assert_eq!(sale.bought(&mut con, "u2").unwrap(), 2, "counted once");
    println!("bought through the busy spell in {sends} sends");

    // Its connection cut while the purchase waits in the server (writes paused): the command
    // never ran, and nothing sends it again but the library (redis-rs reconnects and resends).
    // No response timeout here: the cut is the failure the call meets.
    let mut buyer = Buyer::new(api, &urls, Duration::from_secs(10));
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2000)
        .arg("WRITE")
        .query(&mut owner.con())
        .unwrap();
    let killer = {
        let mut admin = owner.con();
        std::thread::spawn(move || {
            let mut waiting = None;
            wait_until(Duration::from_secs(5), "a paused purchase", || {
                let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
                waiting = clients
                    .lines()
                    .find(|c| c.contains(" flags=b ") && c.contains(" cmd=seckill.try "))
                    .and_then(|c| c.split(' ').find_map(|f| f.strip_prefix("id=")))
                    .map(String::from);
                waiting.is_some()
            });
            let id = waiting.unwrap();
            let _: () = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query(&mut admin)
                .unwrap();
        })
    };
    let answer = buyer.try_buy(key, once, "u5");
    killer.join().unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut owner.con())
        .unwrap();
    assert!(
        matches!(answer, Err(Error::OutcomeUnknown { .. })),
        "cut: {answer:?}"
    );
    assert_eq!(
        sale.bought(&mut con, "u5").unwrap(),
        0,
        "never ran, never resent"
    );

    let target = nodes.iter().find(|n| n.url() != owner.url()).unwrap();
    let (from, to) = (cluster_node_id(owner), cluster_node_id(target));
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut owner.con())
        .unwrap();
    let setslot = |node: &Server, state: &str, id: &str| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id)
            .query(&mut node.con())
            .unwrap();
    };
    setslot(target, "IMPORTING", &from);
    setslot(owner, "MIGRATING", &to);
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg(key)
        .arg(0)
        .arg(5000)
        .query(&mut owner.con())
        .unwrap();
    let asked = command_calls(&mut target.con(), "asking");
    let answer = buyer.try_buy(key, once, "u3");
    assert!(
        matches!(answer, Ok(TryReply::Bought { .. })),
        "ASK: {answer:?}"
    );
    assert_eq!(command_calls(&mut target.con(), "asking"), asked + 1);
    for node in &nodes {
        setslot(node, "NODE", &to);
    }
    let answer = buyer.try_buy(key, once, "u4");
    assert!(
        matches!(answer, Ok(TryReply::Bought { .. })),
        "MOVED: {answer:?}"
    );
    assert_eq!(sale.bought(&mut cluster_con(&urls), "u4").unwrap(), 1);
}

/// Runs `call` while `server` sleeps 500 ms in DEBUG SLEEP (under way before `call` starts);
/// returns once the sleep is over, with every command sent meanwhile run.
fn while_busy<T>(server: &Server, call: impl FnOnce() -> T) -> T {
    // Both connected first: a connection's handshake would wait out the sleep.
    let (mut sleeper, mut probe) = (server.con(), server.con());
    let busy = std::thread::spawn(move || {
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.5")
            .query(&mut sleeper)
            .unwrap();
    });
    probe
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    wait_until(Duration::from_secs(5), "the server busy", || {
        redis::cmd("PING").query::<String>(&mut probe).is_err()
    });
    let answer = call();
    busy.join().unwrap();
    answer
}
