//! The Rust client's locks (`seckill_client::Lock`, `seckill_client::aio::Lock`) against a
//! real server and real faults: a holder stalled ten TTLs keeps its lock, a release hands it on
//! in FIFO order at once, a paused server ends the lease within a TTL (and `run` drops the
//! work), a hundred threads and a hundred tasks hold one lock one at a time in fence order and
//! leave no watchdog behind, and bad settings are refused before anything is sent. (The frozen
//! holder with a fenced SQLite write and the failovers are the Python package's tests, on the
//! same shared code shape.)

use seckill_client::{Error, Lock, LockOptions};
use seckill_harness::{Server, wait_until};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn client(server: &Server) -> redis::Client {
    redis::Client::open(server.url()).unwrap()
}

/// LOCK.INFO's owner (None when free) and waiters.
fn owner_and_waiters(con: &mut redis::Connection, name: &str) -> (Option<String>, i64) {
    let reply: Vec<redis::Value> = redis::cmd("LOCK.INFO").arg(name).query(con).unwrap();
    let (mut owner, mut waiters) = (None, 0);
    for pair in reply.chunks(2) {
        match (&pair[0], &pair[1]) {
            (redis::Value::BulkString(k), redis::Value::BulkString(v)) if k == b"owner" => {
                owner = Some(String::from_utf8(v.clone()).unwrap())
            }
            (redis::Value::BulkString(k), redis::Value::Int(n)) if k == b"waiters" => waiters = *n,
            _ => {}
        }
    }
    (owner, waiters)
}

#[test]
fn bad_settings_are_refused_before_anything_is_sent() {
    // Nobody listens there: anything sent would be an I/O error, not InvalidArgument.
    let port = seckill_harness::free_port();
    let nowhere = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let bad = [
        ("", LockOptions::default()),
        (
            "k",
            LockOptions {
                ttl_ms: 2,
                ..LockOptions::default()
            },
        ),
        (
            "k",
            LockOptions {
                ttl_ms: 1_000,
                renew_ms: Some(990),
                ..LockOptions::default()
            },
        ),
        (
            "k",
            LockOptions {
                max_hold_ms: Some(0),
                ..LockOptions::default()
            },
        ),
    ];
    for (name, options) in bad {
        let sync = Lock::with_options(nowhere.clone(), name, options.clone());
        assert!(
            matches!(sync, Err(Error::InvalidArgument(_))),
            "{name:?} {options:?}"
        );
        let other = seckill_client::aio::Lock::with_options(nowhere.clone(), name, options);
        assert!(matches!(other, Err(Error::InvalidArgument(_))));
    }
    // A lock that is fine to build: its first call is what reaches the network.
    let lock = Lock::new(nowhere, "k", 1_000).unwrap();
    assert!(matches!(lock.hold(0), Err(Error::LockTimeout { .. })));
}

#[test]
fn a_holder_stalled_ten_ttls_keeps_the_lock() {
    let server = Server::start();
    let mut con = server.con();
    let lock = Lock::new(client(&server), "lock:stall", 200).unwrap();
    let guard = lock.hold(0).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let contender = {
        let (lock, stop) = (lock.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut refused, mut granted) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                match lock.hold(0) {
                    Err(Error::LockTimeout { .. }) => refused += 1,
                    _ => granted += 1,
                }
            }
            (refused, granted)
        })
    };
    std::thread::sleep(Duration::from_secs(2)); // the holder's slow call: 10x the TTL
    stop.store(true, Ordering::Relaxed);
    let (refused, granted) = contender.join().unwrap();
    guard.check().unwrap();
    assert_eq!(
        owner_and_waiters(&mut con, "lock:stall").0.as_deref(),
        Some(guard.token())
    );
    assert!(
        refused > 0 && granted == 0,
        "nobody else was granted it: {refused} refused, {granted} granted"
    );
    assert!(guard.release());
    assert_eq!(owner_and_waiters(&mut con, "lock:stall").0, None);
}

#[test]
fn a_release_hands_the_lock_to_the_waiters_at_once_in_fifo_order() {
    let server = Server::start();
    let mut con = server.con();
    // A 60 s lease: a grant within the second below is a handoff, not an expiry.
    let lock = Lock::new(client(&server), "lock:fifo", 60_000).unwrap();
    let guard = lock.hold(0).unwrap();
    let granted = Arc::new(Mutex::new(Vec::new()));
    let waiter = |tag: &'static str| {
        let (lock, granted) = (lock.clone(), Arc::clone(&granted));
        std::thread::spawn(move || {
            let guard = lock.hold(30_000).unwrap();
            granted
                .lock()
                .unwrap()
                .push((tag, guard.fence(), guard.token().to_string()));
            guard
        })
    };
    let first = waiter("first");
    wait_until(Duration::from_secs(10), "the first waiter to queue", || {
        owner_and_waiters(&mut con, "lock:fifo").1 == 1
    });
    let second = waiter("second");
    wait_until(
        Duration::from_secs(10),
        "the second waiter to queue",
        || owner_and_waiters(&mut con, "lock:fifo").1 == 2,
    );
    let fence = guard.fence();
    assert!(guard.release());
    let first = first.join().unwrap();
    let released_first = Instant::now();
    {
        let granted = granted.lock().unwrap();
        assert_eq!(granted.len(), 1, "the second still waits");
        assert_eq!(granted[0].0, "first");
        assert!(granted[0].1 > fence);
    }
    assert!(first.release());
    let second = second.join().unwrap();
    assert!(
        released_first.elapsed() < Duration::from_secs(1),
        "handed over at release"
    );
    assert!(second.fence() > granted.lock().unwrap()[0].1);
    assert!(second.release());
}

/// `CLIENT UNBLOCK .. ERROR` lets a blocked waiter go with `UNBLOCKED`, as a master turning
/// replica in a failover does (the faults run met it 45 times in 20 minutes): nothing was
/// granted, so the waiter asks again within its wait and gets the lock at the release.
#[test]
fn a_waiter_unblocked_by_the_server_waits_on_and_gets_the_lock() {
    let server = Server::start();
    let mut con = server.con();
    let lock = Lock::new(client(&server), "lock:unblocked", 60_000).unwrap();
    let guard = lock.hold(0).unwrap();
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.hold(30_000))
    };
    let blocked = |con: &mut redis::Connection| -> Vec<String> {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
        list.lines()
            .filter(|l| l.contains("cmd=lock.acquire") && l.contains(" flags=b"))
            .filter_map(|l| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix("id="))
                    .map(String::from)
            })
            .collect()
    };
    wait_until(Duration::from_secs(10), "the waiter to block", || {
        !blocked(&mut con).is_empty()
    });
    for id in blocked(&mut con) {
        let unblocked: i64 = redis::cmd("CLIENT")
            .arg("UNBLOCK")
            .arg(&id)
            .arg("ERROR")
            .query(&mut con)
            .unwrap();
        assert_eq!(unblocked, 1);
    }
    wait_until(Duration::from_secs(10), "the waiter to block again", || {
        !blocked(&mut con).is_empty()
    });
    let fence = guard.fence();
    assert!(guard.release());
    let second = waiter.join().unwrap().expect("granted after the release");
    assert!(second.fence() > fence);
    assert!(second.release());
}

/// The lease ends no later than its TTL after the server stopped answering.
fn assert_lost_within(ttl: Duration, paused: Instant, lost_at: Instant) {
    let after = lost_at - paused;
    println!("lost {after:?} after the pause; bound {ttl:?}");
    assert!(
        after <= ttl + Duration::from_millis(50),
        "lost {after:?} after the pause"
    );
}

#[test]
fn a_paused_server_ends_the_lease_within_a_ttl() {
    let server = Server::start();
    let mut admin = server.con();
    let lock = Lock::new(client(&server), "lock:paused", 300).unwrap();
    let guard = lock.hold(0).unwrap();
    std::thread::sleep(Duration::from_millis(250)); // a renewal or two on the way
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_000)
        .arg("ALL")
        .exec(&mut admin)
        .unwrap();
    let paused = Instant::now();
    wait_until(Duration::from_secs(5), "the loss", || guard.is_lost());
    assert_lost_within(Duration::from_millis(300), paused, Instant::now());
    assert!(matches!(guard.check(), Err(Error::LockLost { .. })));
}

#[tokio::test]
async fn run_drops_the_work_the_moment_the_lease_is_lost() {
    let server = Server::start();
    let lock = seckill_client::aio::Lock::new(client(&server), "lock:run", 300).unwrap();
    let guard = lock.hold(0).await.unwrap();
    assert_eq!(guard.run(async { 7 }).await.unwrap(), 7);
    let mut admin = client(&server)
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_000)
        .arg("ALL")
        .exec_async(&mut admin)
        .await
        .unwrap();
    let paused = Instant::now();
    let dropped = Arc::new(AtomicBool::new(false));
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let flag = Flag(Arc::clone(&dropped));
    let outcome = guard
        .run(async move {
            let _flag = flag;
            tokio::time::sleep(Duration::from_secs(10)).await;
        })
        .await;
    assert_lost_within(Duration::from_millis(300), paused, Instant::now());
    assert!(
        matches!(outcome, Err(Error::LockLost { .. })),
        "{outcome:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the work was dropped");
    assert!(guard.is_lost());
    guard.lost().await; // resolves at once now
}

/// Threads of this process whose name starts with `prefix` (Linux keeps 15 characters).
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

#[test]
fn a_hundred_threads_hold_one_lock_one_at_a_time_in_fence_order() {
    let server = Server::start();
    // "many": its watchdog threads are "seckill-lock:ma", no other test's.
    let lock = Lock::new(client(&server), "many", 300).unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let holders: Vec<_> = (0..100)
        .map(|_| {
            let (lock, inside, fences) = (lock.clone(), Arc::clone(&inside), Arc::clone(&fences));
            std::thread::spawn(move || {
                let guard = lock.hold(60_000).unwrap();
                let overlap = inside.fetch_add(1, Ordering::SeqCst);
                fences.lock().unwrap().push(guard.fence());
                std::thread::sleep(Duration::from_millis(2));
                guard.check().unwrap();
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.release());
                overlap
            })
        })
        .collect();
    let overlaps: Vec<usize> = holders.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        overlaps.iter().all(|&n| n == 0),
        "never two holders at once"
    );
    let fences = fences.lock().unwrap();
    assert_eq!(fences.len(), 100);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences strictly increase in grant order"
    );
    assert_eq!(
        threads_named("seckill-lock:ma"),
        0,
        "no watchdog thread outlives its guard"
    );
}

#[test]
fn a_hundred_tasks_hold_one_lock_one_at_a_time_in_fence_order() {
    let server = Server::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // A 5 s lease: a watchdog left running would renew long after the check below.
        let lock = seckill_client::aio::Lock::new(client(&server), "lock:tasks", 5_000).unwrap();
        let inside = Arc::new(AtomicUsize::new(0));
        let fences = Arc::new(Mutex::new(Vec::new()));
        let holders: Vec<_> = (0..100)
            .map(|_| {
                let (lock, inside, fences) =
                    (lock.clone(), Arc::clone(&inside), Arc::clone(&fences));
                tokio::spawn(async move {
                    let guard = lock.hold(60_000).await.unwrap();
                    let overlap = inside.fetch_add(1, Ordering::SeqCst);
                    fences.lock().unwrap().push(guard.fence());
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    guard.check().unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await);
                    overlap
                })
            })
            .collect();
        for holder in holders {
            assert_eq!(holder.await.unwrap(), 0, "never two holders at once");
        }
        let fences = fences.lock().unwrap().clone();
        assert_eq!(fences.len(), 100);
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "fences strictly increase in grant order"
        );
        // What is left is the lock's idle connections' drivers; with the lock gone, nothing.
        drop(lock);
        let metrics = tokio::runtime::Handle::current().metrics();
        let deadline = Instant::now() + Duration::from_secs(1);
        while metrics.num_alive_tasks() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(
            metrics.num_alive_tasks(),
            0,
            "no watchdog task outlives its guard"
        );
    });
}

#[test]
fn on_a_cluster_the_lock_follows_moved_to_the_master_of_its_key_with_replicated_grants() {
    let nodes = seckill_harness::start_cluster_with_replicas(3, 1, &[]);
    let seed = client(&nodes[0]);
    let cluster = redis::cluster::ClusterClient::new(vec![nodes[0].url()]).unwrap();
    let mut routed = cluster.get_connection().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for n in 0..6 {
        let name = format!("lock:cluster:{n}");
        // Most of these keys live on another master than the one the lock was given.
        let guard = Lock::new(seed.clone(), &name, 10_000)
            .unwrap()
            .hold(5_000)
            .unwrap();
        let reply: Vec<redis::Value> = redis::cmd("LOCK.INFO")
            .arg(&name)
            .query(&mut routed)
            .unwrap();
        assert_eq!(
            reply[1],
            redis::Value::BulkString(guard.token().as_bytes().to_vec())
        );
        guard.check().unwrap();
        let fence = guard.fence();
        assert!(guard.release());
        let lock = seckill_client::aio::Lock::new(seed.clone(), &name, 10_000).unwrap();
        runtime.block_on(async {
            let guard = lock.hold(5_000).await.unwrap();
            assert!(guard.fence() > fence);
            guard.check().unwrap();
            assert!(guard.release().await);
        });
    }
}
