//! `Sale::replace` / `PartitionedSale::replace` (Python's `create(..., replace=True)`), sync and
//! async: a sale of that name (buyers, events, partitions) is reset to the new spec, where
//! `create` refuses it with `SaleExists`; so an example or a service runs twice in a row.

use seckill_client::{Error, FlashSale, PartitionedSale, Sale, SaleSpec, TryReply, aio};
use seckill_harness::Server;

fn events_keys(con: &mut redis::Connection) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*events*").query(con).unwrap();
    keys
}

#[test]
fn replace_resets_a_one_key_sale_where_create_refuses_it() {
    let server = Server::start();
    let mut con = server.con();
    let spec = SaleSpec::new(3, 1).events(None);
    let sale = Sale::create(&mut con, "sale:again", &spec).unwrap();
    assert!(matches!(
        sale.try_buy(&mut con, "alice", 1).unwrap(),
        TryReply::Bought { .. }
    ));
    assert!(matches!(
        Sale::create(&mut con, "sale:again", &spec),
        Err(Error::SaleExists(_))
    ));
    let fresh = Sale::replace(&mut con, "sale:again", &SaleSpec::new(5, 1)).unwrap();
    let info = fresh.info(&mut con).unwrap();
    assert_eq!((info.stock, info.sold, info.remaining), (5, 0, 5));
    assert_eq!(fresh.bought(&mut con, "alice").unwrap(), 0);
    assert!(
        events_keys(&mut con).is_empty(),
        "the old events went with it"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let remaining = runtime.block_on(async {
        let mut con = server.async_con().await;
        let sale = aio::Sale::replace(&mut con, "sale:again", &spec)
            .await
            .unwrap();
        aio::FlashSale::info(&sale, &mut con)
            .await
            .unwrap()
            .remaining
    });
    assert_eq!(remaining, 3);
}

#[test]
fn replace_resets_a_partitioned_sale_where_create_refuses_it() {
    let server = Server::start();
    let mut con = server.con();
    let spec = SaleSpec::new(8, 4).events(None);
    let sale = PartitionedSale::create(&mut con, "sale:again-p", &spec).unwrap();
    assert!(matches!(
        sale.try_buy(&mut con, "alice", 1).unwrap(),
        TryReply::Bought { .. }
    ));
    assert!(matches!(
        PartitionedSale::create(&mut con, "sale:again-p", &spec),
        Err(Error::SaleExists(_))
    ));
    let fresh = PartitionedSale::replace(&mut con, "sale:again-p", &SaleSpec::new(5, 2)).unwrap();
    let info = fresh.info(&mut con).unwrap();
    assert_eq!((info.stock, info.sold, info.remaining), (5, 0, 5));
    assert_eq!(fresh.partition_keys().len(), 2);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{sale:again-p/*")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        keys.len(),
        2,
        "the old partitions and streams are gone: {keys:?}"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let remaining = runtime.block_on(async {
        let mut con = server.async_con().await;
        let sale = aio::PartitionedSale::replace(&mut con, "sale:again-p", &spec)
            .await
            .unwrap();
        aio::FlashSale::info(&sale, &mut con)
            .await
            .unwrap()
            .remaining
    });
    assert_eq!(remaining, 8);
}
