//! The waiting room through the Rust crate, sync and async: a one-key sale made with a queue,
//! `join` / `position` / `admit`, `TryReply::NotAdmitted`, `Error::NoQueue` for a sale without
//! a room, and room settings refused before anything is written.

use seckill_client::aio::FlashSale as _;
use seckill_client::{Error, FlashSale, PartitionedSale, QueueSpec, Sale, SaleSpec, TryReply, aio};
use seckill_harness::Server;

fn room(window_ms: Option<u64>) -> QueueSpec {
    QueueSpec {
        admit_rate: None,
        window_ms,
    }
}

#[test]
fn join_admit_and_buy_through_the_sync_crate() {
    let server = Server::start();
    let mut con = server.con();
    let spec = SaleSpec::new(2, 1).queue(room(Some(60_000)));
    let sale = Sale::replace(&mut con, "room:sync", &spec).unwrap();
    let places: Vec<i64> = ["a", "b", "c"]
        .iter()
        .map(|u| FlashSale::join(&sale, &mut con, u).unwrap())
        .collect();
    assert_eq!(places, [1, 2, 3]);
    assert_eq!(FlashSale::position(&sale, &mut con, "c").unwrap(), Some(3));
    assert_eq!(
        FlashSale::position(&sale, &mut con, "nobody").unwrap(),
        None
    );
    assert_eq!(
        FlashSale::try_buy(&sale, &mut con, "a", 1).unwrap(),
        TryReply::NotAdmitted
    );
    assert_eq!(FlashSale::admit(&sale, &mut con, 5).unwrap(), 2, "2 units");
    assert_eq!(
        FlashSale::try_buy(&sale, &mut con, "a", 1).unwrap(),
        TryReply::Bought { remaining: 1 }
    );
    assert_eq!(FlashSale::position(&sale, &mut con, "c").unwrap(), Some(1));
}

#[test]
fn join_and_admit_through_the_async_crate() {
    let server = Server::start();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut con = server.async_con().await;
        let spec = SaleSpec::new(10, 1).queue(room(None));
        let sale = aio::Sale::replace(&mut con, "room:async", &spec)
            .await
            .unwrap();
        for n in 0..5 {
            assert_eq!(sale.join(&mut con, format!("u{n}")).await.unwrap(), n + 1);
        }
        assert_eq!(sale.admit(&mut con, 2).await.unwrap(), 2);
        assert_eq!(sale.position(&mut con, "u2").await.unwrap(), Some(1));
        assert_eq!(
            sale.try_buy(&mut con, "u4", 1).await.unwrap(),
            TryReply::NotAdmitted
        );
    });
}

#[test]
fn a_sale_without_a_room_and_bad_room_settings_are_typed() {
    let server = Server::start();
    let mut con = server.con();
    let plain = Sale::replace(&mut con, "room:none", &SaleSpec::new(1, 1)).unwrap();
    assert!(matches!(
        FlashSale::join(&plain, &mut con, "u"),
        Err(Error::NoQueue(_))
    ));
    assert!(matches!(
        FlashSale::admit(&plain, &mut con, 1),
        Err(Error::NoQueue(_))
    ));
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    for queue in [
        room(Some(0)),
        QueueSpec {
            admit_rate: Some((0, 10)),
            window_ms: None,
        },
    ] {
        assert!(matches!(
            Sale::create(&mut con, "room:bad", &SaleSpec::new(1, 1).queue(queue)),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        PartitionedSale::create(
            &mut con,
            "room:parts",
            &SaleSpec::new(4, 2).queue(room(None))
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        FlashSale::admit(&plain, &mut con, 0),
        Err(Error::InvalidArgument(_))
    ));
    let after: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(after.len(), keys.len(), "nothing written");
}
