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
        let mut con = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
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
