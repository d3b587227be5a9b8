//! Every module or server error the crate can meet is typed (#42; a lock on a server without
//! the module is `Error::ModuleMissing` like a sale: tests/client_retries.rs): a key of another
//! type is
//! `Error::WrongType` from `open`, `create`, `try_buy`, `bought` and `Lock::hold`, sync and
//! async; a one-key sale opened as a partitioned one is `Error::BadManifest`. Nothing is
//! written.

use seckill_client::{Error, FlashSale, Lock, PartitionedSale, Sale, SaleSpec, aio};
use seckill_harness::Server;

#[test]
fn a_key_of_another_type_is_a_wrong_type_error_everywhere() {
    let server = Server::start();
    let mut con = server.con();
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("a string")
        .query(&mut con)
        .unwrap();
    let before = seckill_harness::dump(&mut con, "plain");
    let spec = SaleSpec::new(1, 1);
    let sale = Sale::new("plain");
    let outcomes = [
        ("open", Sale::open(&mut con, "plain").err()),
        ("create", Sale::create(&mut con, "plain", &spec).err()),
        ("try_buy", sale.try_buy(&mut con, "u", 1).err()),
        ("bought", sale.bought(&mut con, "u").err()),
        (
            "hold",
            Lock::new(redis::Client::open(server.url()).unwrap(), "plain", 1_000)
                .unwrap()
                .hold(0)
                .err(),
        ),
    ];
    for (what, outcome) in outcomes {
        assert!(
            matches!(outcome, Some(Error::WrongType(_))),
            "{what}: {outcome:?}"
        );
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let async_outcome = runtime.block_on(async {
        let mut con = server.async_con().await;
        aio::FlashSale::try_buy(&aio::Sale::new("plain"), &mut con, "u", 1)
            .await
            .err()
    });
    assert!(
        matches!(async_outcome, Some(Error::WrongType(_))),
        "{async_outcome:?}"
    );
    assert_eq!(seckill_harness::dump(&mut con, "plain"), before);
    Sale::create(&mut con, "one-key", &spec).unwrap();
    let opened = PartitionedSale::open(&mut con, "one-key").err();
    assert!(matches!(opened, Some(Error::BadManifest(_))), "{opened:?}");
}

/// The argument policy, one table for every call with a user or a quantity (the types keep
/// out the rest): an empty or 513-byte user id, a quantity of 0 or past 2^63 - 1, is
/// `Error::InvalidArgument` before anything is sent, sync and async; the keyspace is the same
/// after (DUMP of every key).
#[test]
fn every_bad_argument_is_refused_before_anything_is_sent() {
    let server = Server::start();
    let mut con = server.con();
    let spec = SaleSpec::new(5, 1).limit(2).hold_ms(60_000);
    let sale = Sale::create(&mut con, "args", &spec).unwrap();
    let partitioned = PartitionedSale::create(&mut con, "args-p", &SaleSpec::new(5, 2)).unwrap();
    let keyspace = |con: &mut redis::Connection| -> Vec<(String, Vec<u8>)> {
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
        keys.sort();
        keys.into_iter()
            .map(|k| {
                let dump = seckill_harness::dump(con, &k);
                (k, dump)
            })
            .collect()
    };
    let before = keyspace(&mut con);
    let long = vec![b'u'; seckill_client::MAX_USER_BYTES + 1];
    let mut refused = 0;
    for user in [&b""[..], &long[..]] {
        for outcome in [
            sale.try_buy(&mut con, user, 1).err(),
            sale.try_buy_acked(&mut con, user, 1, 1, 10).err(),
            sale.confirm(&mut con, user).err(),
            sale.cancel(&mut con, user, None).err(),
            sale.bought(&mut con, user).err(),
            partitioned.try_buy(&mut con, user, 1).err(),
            partitioned.bought(&mut con, user).err(),
        ] {
            assert!(
                matches!(outcome, Some(Error::InvalidArgument(_))),
                "{outcome:?}"
            );
            refused += 1;
        }
    }
    for qty in [0, 1 << 63] {
        for outcome in [
            sale.try_buy(&mut con, "u", qty).err(),
            sale.cancel(&mut con, "u", Some(qty)).err(),
            sale.restock(&mut con, qty).err(),
            partitioned.try_buy(&mut con, "u", qty).err(),
        ] {
            assert!(
                matches!(outcome, Some(Error::InvalidArgument(_))),
                "{outcome:?}"
            );
            refused += 1;
        }
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let async_outcome = runtime.block_on(async {
        let mut con = server.async_con().await;
        aio::FlashSale::try_buy(&aio::Sale::new("args"), &mut con, "", 1)
            .await
            .err()
    });
    assert!(
        matches!(async_outcome, Some(Error::InvalidArgument(_))),
        "{async_outcome:?}"
    );
    assert!(refused >= 20);
    assert_eq!(keyspace(&mut con), before, "nothing written");
}
