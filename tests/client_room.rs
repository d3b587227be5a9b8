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
        presence_ms: None,
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
fn leave_and_place_with_its_eta_sync_and_async() {
    let server = Server::start();
    let mut con = server.con();
    let spec = SaleSpec::new(5, 1).queue(room(None));
    let sale = Sale::replace(&mut con, "room:leave", &spec).unwrap();
    for user in ["a", "b", "c"] {
        FlashSale::join(&sale, &mut con, user).unwrap();
    }
    assert_eq!(FlashSale::info(&sale, &mut con).unwrap().waiting, 3);
    assert!(FlashSale::leave(&sale, &mut con, "b").unwrap());
    assert_eq!(FlashSale::info(&sale, &mut con).unwrap().waiting, 2);
    assert!(
        !FlashSale::leave(&sale, &mut con, "b").unwrap(),
        "left already"
    );
    assert_eq!(FlashSale::place(&sale, &mut con, "b").unwrap(), None);
    let c = FlashSale::place(&sale, &mut con, "c").unwrap().unwrap();
    assert_eq!(
        (c.position, c.eta_ms, c.drawn),
        (2, -1, true),
        "no rate, no admission yet"
    );
    assert_eq!(FlashSale::admit(&sale, &mut con, 1).unwrap(), 1);
    let a = FlashSale::place(&sale, &mut con, "a").unwrap().unwrap();
    assert_eq!((a.position, a.eta_ms), (0, 0));
    // Before START: how many wait, not drawn, the ETA the time until START.
    let start = seckill_harness::server_now_ms(&mut con) + 60_000;
    let later = SaleSpec::new(5, 1)
        .window(Some(start), None)
        .queue(room(None));
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut con = server.async_con().await;
        let sale = aio::Sale::replace(&mut con, "room:later", &later)
            .await
            .unwrap();
        sale.join(&mut con, "x").await.unwrap();
        let x = sale.place(&mut con, "x").await.unwrap().unwrap();
        assert_eq!((x.position, x.drawn), (1, false));
        assert!((55_000..=60_000).contains(&x.eta_ms), "{x:?}");
        assert!(sale.leave(&mut con, "x").await.unwrap());
        assert_eq!(sale.place(&mut con, "x").await.unwrap(), None);
    });
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
            presence_ms: None,
        },
    ] {
        assert!(matches!(
            Sale::create(&mut con, "room:bad", &SaleSpec::new(1, 1).queue(queue)),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        FlashSale::admit(&plain, &mut con, 0),
        Err(Error::InvalidArgument(_))
    ));
    let after: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(after.len(), keys.len(), "nothing written");
}

#[test]
fn a_partitioned_sale_has_a_room_per_partition_at_its_share_of_the_rate() {
    use futures_util::StreamExt;
    let server = Server::start();
    let mut con = server.con();
    let queue = QueueSpec {
        admit_rate: Some((4, 100)),
        window_ms: Some(60_000),
        presence_ms: None,
    };
    let spec = SaleSpec::new(8, 4).queue(queue).events(None);
    let sale =
        std::sync::Arc::new(PartitionedSale::replace(&mut con, "room:parts", &spec).unwrap());
    for key in sale.partition_keys() {
        let info = ["SECKILL.INFO", key.as_str()];
        let rate = ["queue_admit", "queue_per"].map(|f| seckill_harness::field(&mut con, &info, f));
        assert_eq!(rate, [1, 100], "{key}");
    }
    assert_eq!(
        PartitionedSale::open(&mut con, "room:parts")
            .unwrap()
            .spec(),
        &spec
    );
    // 12 waiters in partition 0 and 4 in partition 1, none in 2 and 3: 4 units of their
    // own, the other 4 borrowed for them from 2 and 3 while they wait.
    let in_partition = |p: u32, prefix: &str, n: usize| -> Vec<String> {
        (0..1_000)
            .map(|i| format!("{prefix}{i}"))
            .filter(|u| sale.partition_of(u.as_bytes()) == p)
            .take(n)
            .collect()
    };
    let mut crowd = in_partition(0, "u", 12);
    crowd.extend(in_partition(1, "v", 4));
    let outcomes: Vec<&str> = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut async_con = server.async_con().await;
        let aio_sale = aio::PartitionedSale::open(&mut async_con, "room:parts").await;
        let aio_sale = std::sync::Arc::new(aio_sale.unwrap());
        let mut shoppers = Vec::new();
        for user in crowd {
            let sale = aio_sale.clone();
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let mut own = redis::Client::open(server.url())
                .unwrap()
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap();
            shoppers.push(tokio::spawn(async move {
                let mut places = Box::pin(sale.wait_for_turn(own.clone(), &user, 2_000));
                while let Some(place) = places.next().await {
                    if place.unwrap().position == 0 {
                        let reply = sale.try_buy(&mut own, &user, 1).await.unwrap();
                        return if matches!(reply, TryReply::Bought { .. }) {
                            "bought"
                        } else {
                            "refused"
                        };
                    }
                }
                "sold out"
            }));
        }
        let all = futures_util::future::join_all(shoppers);
        let done = tokio::time::timeout(std::time::Duration::from_secs(60), all).await;
        done.expect("no waiter hangs")
            .into_iter()
            .map(|o| o.unwrap())
            .collect()
    });
    assert_eq!(
        outcomes.iter().filter(|&&o| o == "bought").count(),
        8,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|&&o| o == "sold out").count(),
        8,
        "{outcomes:?}"
    );
    let infos = sale.partition_infos(&mut con).unwrap();
    assert_eq!((infos[2].lent, infos[3].lent), (2, 2));
    assert_eq!(
        FlashSale::try_buy(&*sale, &mut con, "bot", 1).unwrap(),
        TryReply::SoldOut
    );
}

#[test]
fn admit_by_hand_goes_round_the_partitions() {
    let server = Server::start();
    let mut con = server.con();
    let spec = SaleSpec::new(40, 4).queue(room(None));
    let sale = PartitionedSale::replace(&mut con, "room:parts-hand", &spec).unwrap();
    let users: Vec<String> = (0..40).map(|n| format!("u{n}")).collect();
    for user in &users {
        FlashSale::join(&sale, &mut con, user).unwrap();
    }
    let waiting = |p: u32| {
        users
            .iter()
            .filter(|u| sale.partition_of(u.as_bytes()) == p)
            .count() as u64
    };
    let admitted: u64 = (0..8)
        .map(|_| FlashSale::admit(&sale, &mut con, 1).unwrap())
        .sum();
    assert_eq!(admitted, (0..4).map(|p| waiting(p).min(2)).sum::<u64>());
    for p in 0..4 {
        let first = users
            .iter()
            .filter(|u| sale.partition_of(u.as_bytes()) == p)
            .filter(|u| FlashSale::position(&sale, &mut con, u).unwrap() == Some(0))
            .count() as u64;
        assert_eq!(first, waiting(p).min(2), "partition {p}");
    }
    let plain =
        PartitionedSale::replace(&mut con, "room:parts-none", &SaleSpec::new(4, 2)).unwrap();
    assert!(matches!(
        FlashSale::admit(&plain, &mut con, 1),
        Err(Error::NoQueue(_))
    ));
}

#[test]
fn wait_for_turn_follows_the_event_stream_not_the_server() {
    let server = Server::start();
    let mut con = server.con();
    let spec = SaleSpec::new(10, 1).queue(room(None)).events(None);
    // Without update_ms: every move shown.
    let sale = std::sync::Arc::new(Sale::replace(&mut con, "room:wait", &spec).unwrap());
    for user in ["a", "b", "c", "d", "e"] {
        FlashSale::join(&*sale, &mut con, user).unwrap();
    }
    let before = seckill_harness::command_calls(&mut con, "seckill.position");
    let (places_tx, places) = std::sync::mpsc::channel();
    let waiter = {
        let (sale, mut own) = (sale.clone(), server.con());
        std::thread::spawn(move || {
            for place in sale.wait_for_turn(&mut own, "f", 60_000) {
                places_tx.send(place.unwrap().position).unwrap();
            }
        })
    };
    let next = || {
        places
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap()
    };
    assert_eq!(next(), 6);
    for expected in [5, 4, 3, 2, 1, 0] {
        assert_eq!(FlashSale::admit(&*sale, &mut con, 1).unwrap(), 1);
        assert_eq!(next(), expected);
    }
    waiter.join().unwrap();
    let asked = seckill_harness::command_calls(&mut con, "seckill.position") - before;
    assert_eq!(
        asked, 0,
        "the entries told every change (a room without START has no draw)"
    );

    let sold = Sale::replace(
        &mut con,
        "room:wait-out",
        &SaleSpec::new(1, 1).queue(room(None)).events(None),
    )
    .unwrap();
    FlashSale::join(&sold, &mut con, "first").unwrap();
    let mut own = server.con();
    let mut turns = sold.wait_for_turn(&mut own, "second", 60_000);
    assert_eq!(turns.next().unwrap().unwrap().position, 2);
    assert_eq!(FlashSale::admit(&sold, &mut con, 1).unwrap(), 1);
    assert_eq!(
        FlashSale::try_buy(&sold, &mut con, "first", 1).unwrap(),
        TryReply::Bought { remaining: 0 }
    );
    let rest: Vec<i64> = turns.map(|p| p.unwrap().position).collect();
    // It may see itself move to 1 (first admitted) before the sell-out.
    assert!(rest == [-1] || rest == [1, -1], "sold out: {rest:?}");

    let plain = Sale::replace(
        &mut con,
        "room:no-events",
        &SaleSpec::new(1, 1).queue(room(None)),
    )
    .unwrap();
    let mut own = server.con();
    let errors: Vec<_> = plain.wait_for_turn(&mut own, "u", 1_000).collect();
    assert!(
        matches!(errors.as_slice(), [Err(Error::InvalidArgument(_))]),
        "{errors:?}"
    );
    let errors: Vec<_> = sale.wait_for_turn(&mut own, "u", 0).collect();
    assert!(
        matches!(errors.as_slice(), [Err(Error::InvalidArgument(_))]),
        "{errors:?}"
    );
    let never = Sale::new("room:wait").update_ms(0);
    let errors: Vec<_> = never.wait_for_turn(&mut own, "u", 1_000).collect();
    assert!(
        matches!(errors.as_slice(), [Err(Error::InvalidArgument(m))] if m.contains("update_ms")),
        "{errors:?}"
    );
}

#[test]
fn a_page_shows_a_move_at_most_every_update_ms_and_its_turn_at_once() {
    use std::time::{Duration, Instant};
    let server = Server::start();
    let mut con = server.con();
    let spec = SaleSpec::new(10, 1).queue(room(None)).events(None);
    let make = |key: &str, update_ms: u64| {
        let sale = Sale::replace(&mut server.con(), key, &spec).unwrap();
        std::sync::Arc::new(sale.update_ms(update_ms))
    };
    // Each place the page shows, and when, from a thread of its own.
    let watch = |sale: std::sync::Arc<Sale>| {
        let (shown_tx, shown) = std::sync::mpsc::channel();
        let mut own = server.con();
        let thread = std::thread::spawn(move || {
            for place in sale.wait_for_turn(&mut own, "f", 60_000) {
                shown_tx
                    .send((place.unwrap().position, Instant::now()))
                    .unwrap();
            }
        });
        (shown, thread)
    };
    let next = |shown: &std::sync::mpsc::Receiver<(i64, Instant)>| {
        shown.recv_timeout(Duration::from_secs(20)).unwrap()
    };

    // Held back a minute: no move shown, and the turn comes at once all the same.
    let slow = make("room:update-slow", 60_000);
    for user in ["a", "b", "c", "d", "e"] {
        FlashSale::join(&*slow, &mut con, user).unwrap();
    }
    let (shown, thread) = watch(slow.clone());
    assert_eq!(next(&shown).0, 6);
    for _ in 0..6 {
        assert_eq!(FlashSale::admit(&*slow, &mut con, 1).unwrap(), 1);
    }
    assert_eq!(next(&shown).0, 0, "the turn, with no move before it");
    thread.join().unwrap();

    // 400 ms: a move shows, 400 ms after the last place shown at the earliest.
    let paced = make("room:update-paced", 400);
    for user in ["a", "b", "c", "d", "e"] {
        FlashSale::join(&*paced, &mut con, user).unwrap();
    }
    let (shown, thread) = watch(paced.clone());
    let (first, first_at) = next(&shown);
    assert_eq!(first, 6);
    assert_eq!(FlashSale::admit(&*paced, &mut con, 1).unwrap(), 1);
    let (moved, moved_at) = next(&shown);
    assert_eq!(moved, 5);
    // The page's clock is read when it yields, this thread's a little after (later still if it
    // is preempted there): 100 ms of slack. Shown unheld, a move comes within a read or two
    // (50 ms each).
    assert!(
        moved_at - first_at >= Duration::from_millis(300),
        "{:?}",
        moved_at - first_at
    );
    assert_eq!(FlashSale::admit(&*paced, &mut con, 5).unwrap(), 5);
    assert_eq!(next(&shown).0, 0);
    thread.join().unwrap();
}

#[test]
fn wait_for_turn_async_many_waiters_at_a_rate() {
    use futures_util::StreamExt;
    let server = Server::start();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut con = server.async_con().await;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let queue = QueueSpec {
            admit_rate: Some((4, 200)),
            window_ms: None,
            presence_ms: None,
        };
        let spec = SaleSpec::new(100, 1)
            .window(Some(now_ms + 1_000), None)
            .queue(queue)
            .events(None);
        let sale = std::sync::Arc::new(
            aio::Sale::replace(&mut con, "room:wait-async", &spec)
                .await
                .unwrap(),
        );
        let before = seckill_harness::command_calls(&mut server.con(), "seckill.position");
        let mut waiters = Vec::new();
        for n in 0..40 {
            // Without redis-rs' 500 ms response timeout, which would cut every blocking read.
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let own = redis::Client::open(server.url())
                .unwrap()
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap();
            let sale = sale.clone();
            waiters.push(tokio::spawn(async move {
                let places = sale.wait_for_turn(own, format!("u{n}"), 60_000);
                places
                    .map(|p| p.unwrap())
                    .collect::<Vec<seckill_client::Place>>()
                    .await
            }));
        }
        let mut longest = 0;
        for waiter in waiters {
            let places = waiter.await.unwrap();
            // Before START a page shows how many wait (not drawn); places only go down after.
            let history: Vec<i64> = places
                .iter()
                .filter(|p| p.drawn)
                .map(|p| p.position)
                .collect();
            assert_eq!(history.last(), Some(&0), "{places:?}");
            assert!(history.windows(2).all(|w| w[0] > w[1]), "{places:?}");
            longest = longest.max(history.len());
        }
        let asked = seckill_harness::command_calls(&mut server.con(), "seckill.position") - before;
        println!("40 waiters: {asked} POSITION calls, longest history {longest}");
        assert!(asked <= 2 * 40, "{asked} POSITION calls");
        // Told more than its first place and its turn (on a busy machine a reader may read
        // several ticks at once, so no more than one place between them is asked for).
        assert!(
            longest >= 3,
            "no waiter was told a place between its first and its turn"
        );
    });
}

#[test]
fn presence_is_set_at_init_and_kept_by_a_partitioned_sales_manifest() {
    let server = Server::start();
    let mut con = server.con();
    let queue = QueueSpec {
        admit_rate: None,
        window_ms: None,
        presence_ms: Some(900),
    };
    let spec = SaleSpec::new(4, 2).queue(queue);
    let sale = PartitionedSale::replace(&mut con, "room:presence", &spec).unwrap();
    let reopened = PartitionedSale::open(&mut con, "room:presence").unwrap();
    assert_eq!(reopened.spec(), sale.spec());
    assert_eq!(reopened.spec().queue.unwrap().presence_ms, Some(900));
    let presence = seckill_harness::field(
        &mut con,
        &["SECKILL.INFO", &sale.partition_keys()[0]],
        "queue_presence",
    );
    assert_eq!(presence, 900);
    let bad = SaleSpec::new(4, 1).queue(QueueSpec {
        presence_ms: Some(0),
        ..queue
    });
    assert!(matches!(
        Sale::replace(&mut con, "room:bad-presence", &bad),
        Err(Error::InvalidArgument(_))
    ));
}
