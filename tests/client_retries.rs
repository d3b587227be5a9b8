//! The Rust client's side of issue 27 against real servers: purchases retried through a busy
//! server buy exactly once; `create` checks everything before it writes, gives its name back
//! when cut half way, and names a server without the module.

use seckill_client::{Error, FlashSale, PartitionedSale, RetryPolicy, SaleSpec, Session, TryReply};
use seckill_harness::{PlainServer, Server, busy_spells, int, wait_until};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn session(server: &Server) -> Session<redis::Connection> {
    let client = redis::Client::open(server.url()).unwrap();
    Session::server(client, Some(Duration::from_millis(200))).unwrap()
}

/// 50 buyers on their own sessions (200 ms timeouts) buy and cancel through the library
/// while the server is made busy past that timeout four times: each owns exactly what its
/// answers said, nobody over LIMIT, no unit lost or created; the library did retry.
#[test]
fn purchases_through_a_busy_server_are_retried_and_applied_once() {
    const BUYERS: usize = 50;
    const LIMIT: u64 = 3;
    const STOCK: u64 = 80;
    let server = Server::start();
    let sale = Arc::new(
        PartitionedSale::create(
            &mut session(&server),
            "busy",
            &SaleSpec::new(STOCK, 4).limit(LIMIT),
        )
        .unwrap()
        .with_retry(RetryPolicy {
            deadline: Duration::from_secs(30),
            ..RetryPolicy::default()
        }),
    );
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(BUYERS + 1));
    let busy = busy_spells(&server, 4, start.clone(), done.clone());
    let buyers: Vec<_> = (0..BUYERS)
        .map(|b| {
            let (sale, start, done) = (sale.clone(), start.clone(), done.clone());
            let mut session = session(&server);
            std::thread::spawn(move || {
                let user = format!("buyer-{b}");
                start.wait();
                let (mut told, mut round) = (0i64, 0);
                while !done.load(Ordering::Relaxed) {
                    match sale.try_buy(&mut session, &user, 1).unwrap() {
                        TryReply::Bought { .. } => told += 1,
                        TryReply::SoldOut | TryReply::OverLimit => {}
                        other => panic!("{other:?}"),
                    }
                    if round % 2 == 1 {
                        told -= sale.cancel(&mut session, &user, Some(1)).unwrap() as i64;
                    }
                    round += 1;
                }
                (user, told, session.reconnects())
            })
        })
        .collect();
    let answers: Vec<_> = buyers.into_iter().map(|b| b.join().unwrap()).collect();
    busy.join().unwrap();
    let mut con = session(&server);
    let (mut owned_total, mut reconnects) = (0, 0);
    for (user, told, made_anew) in &answers {
        let owned = sale.bought(&mut con, user).unwrap();
        assert_eq!(
            owned as i64, *told,
            "{user}: owns what its answers said it bought"
        );
        assert!(owned <= LIMIT);
        owned_total += owned;
        reconnects += made_anew;
    }
    let info = sale.info(&mut con).unwrap();
    assert_eq!(
        owned_total + info.remaining,
        STOCK,
        "no unit lost or created"
    );
    println!("{BUYERS} buyers: {owned_total} units owned as told, {reconnects} reconnects");
    assert!(
        reconnects > 0,
        "no call had to be retried: the busy spells missed"
    );
}

#[test]
fn create_checks_every_setting_before_it_writes() {
    let server = Server::start();
    let mut con = server.con();
    let refused = [
        SaleSpec::new(10, 2).limit(0),
        SaleSpec::new(10, 0),
        SaleSpec::new(10, 16_385),
        SaleSpec::new(u64::MAX, 2),
        SaleSpec::new(10, 2).hold_ms(0),
        SaleSpec::new(10, 2).window(Some(2_000), Some(1_000)),
        SaleSpec {
            events_maxlen: Some(10),
            ..SaleSpec::new(10, 2)
        },
    ];
    for spec in refused {
        match PartitionedSale::create(&mut con, "checked", &spec) {
            Err(Error::InvalidArgument(why)) => assert!(!why.starts_with("ERR"), "{why}"),
            other => panic!("{spec:?}: {:?}", other.map(|s| s.name().to_string())),
        }
        let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
        assert_eq!(keys, 0, "{spec:?} wrote something");
    }
    let sale = PartitionedSale::create(&mut con, "checked", &SaleSpec::new(10, 2)).unwrap();
    assert_eq!(
        sale.try_buy(&mut con, "u", 1).unwrap(),
        TryReply::Bought { remaining: 4 }
    );
    assert!(matches!(sale.confirm(&mut con, "u"), Err(Error::NoHolds)));
}

/// A create whose connection is cut half way (CLIENT KILL): the name is claimed, then given
/// back by the claim's expiry; a create with good arguments then succeeds and opens.
#[test]
fn a_create_cut_half_way_gives_its_name_back() {
    const PARTITIONS: u32 = 4_000;
    let server = Server::start();
    let creator = {
        let mut con = server.con();
        std::thread::spawn(move || {
            PartitionedSale::create(&mut con, "half", &SaleSpec::new(8_000, PARTITIONS)).err()
        })
    };
    let mut con = server.con();
    wait_until(Duration::from_secs(20), "a hundred partitions", || {
        int(&mut con, &["EXISTS", "{half/100}"]) == 1
    });
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut con)
        .unwrap();
    assert!(killed >= 1);
    assert!(creator.join().unwrap().is_some(), "the cut create failed");
    assert!(matches!(
        PartitionedSale::open(&mut con, "half"),
        Err(Error::BadManifest(_) | Error::NoSale(_))
    ));
    wait_until(Duration::from_secs(15), "the claim to lapse", || {
        int(&mut con, &["EXISTS", "half"]) == 0
    });
    let sale = PartitionedSale::create(&mut con, "half", &SaleSpec::new(8, 2)).unwrap();
    let opened = PartitionedSale::open(&mut con, "half").unwrap();
    assert_eq!(opened.spec(), sale.spec());
    assert_eq!(sale.info(&mut con).unwrap().remaining, 8);
}

#[test]
fn a_server_without_the_module_is_named_before_any_write() {
    let plain = PlainServer::start();
    let mut con = redis::Client::open(plain.url())
        .unwrap()
        .get_connection()
        .unwrap();
    match PartitionedSale::create(&mut con, "nomodule", &SaleSpec::new(10, 2)) {
        Err(e @ Error::ModuleMissing) => assert!(e.to_string().contains("--loadmodule")),
        other => panic!("{:?}", other.map(|s| s.name().to_string())),
    }
    // A lock too (it said "unknown command" before 0.9).
    let lock =
        seckill_client::Lock::new(redis::Client::open(plain.url()).unwrap(), "lock:x", 1_000);
    let held = lock.unwrap().hold(0).err();
    assert!(matches!(held, Some(Error::ModuleMissing)), "{held:?}");
    let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, 0, "nothing written");
}
