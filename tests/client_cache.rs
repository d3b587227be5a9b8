//! The Rust client's sold-out cache (`SoldOutCache`, `with_local_cache`) against real servers:
//! sold-out purchases answered in the process (the server's SECKILL.TRY count grows by at most
//! the number of partitions over 100 000 tries), a unit brought back by another client sold
//! within a second, a killed tracking connection ending its marks, one tracking connection per
//! master of a cluster, async on tokio. (The planted race, hold expiry, ABSORB, failover and
//! resharding cases are the Python package's, on the same design.)

use seckill_client::{Error, FlashSale, Sale, SaleSpec, SoldOutCache, TryReply};
use seckill_harness::{Server, command_calls, start_cluster, wait_until};
use std::time::{Duration, Instant};

const TRIES: u64 = 100_000;

fn tries(servers: &[Server]) -> i64 {
    servers
        .iter()
        .map(|s| command_calls(&mut s.con(), "seckill.try"))
        .sum()
}

#[test]
fn sold_out_tries_are_answered_in_the_process_and_a_returned_unit_is_sold() {
    let server = Server::start();
    let mut con = server.con();
    let cache = SoldOutCache::new([server.url()]).unwrap();
    let sale = Sale::create(&mut con, "cached", &SaleSpec::new(2, 1))
        .unwrap()
        .with_local_cache(&cache);
    assert_eq!(
        sale.try_buy(&mut con, "a", 1).unwrap(),
        TryReply::Bought { remaining: 1 }
    );
    assert_eq!(
        sale.try_buy(&mut con, "b", 1).unwrap(),
        TryReply::Bought { remaining: 0 }
    );
    let servers = [server];
    let before = tries(&servers);
    for n in 0..TRIES {
        assert_eq!(
            sale.try_buy(&mut con, format!("late{n}"), 1).unwrap(),
            TryReply::SoldOut
        );
    }
    let sent = tries(&servers) - before;
    println!("{sent} of {TRIES} sold-out tries reached the server");
    assert!(sent <= 1, "{sent} tries reached the server");
    assert!(sale.stats().local_refusals >= TRIES - 1);
    assert_eq!(cache.connections(), 1);
    // Without the cache every try is sent.
    let plain = Sale::new("cached");
    let before = tries(&servers);
    for n in 0..100 {
        assert_eq!(
            plain.try_buy(&mut con, format!("p{n}"), 1).unwrap(),
            TryReply::SoldOut
        );
    }
    assert_eq!(tries(&servers) - before, 100);

    // Another client cancels: the unit is sold through the cache within a second.
    let mut other = servers[0].con();
    let returned: i64 = redis::cmd("SECKILL.CANCEL")
        .arg("cached")
        .arg("a")
        .query(&mut other)
        .unwrap();
    assert_eq!(returned, 1);
    let changed = Instant::now();
    while sale.try_buy(&mut con, "b2", 1).unwrap() == TryReply::SoldOut {
        assert!(
            changed.elapsed() < Duration::from_secs(1),
            "the returned unit was not sold within 1 s"
        );
    }
    println!("sold {:?} after the cancel", changed.elapsed());
    assert_eq!(sale.bought(&mut con, "b2").unwrap(), 1);
    assert!(sale.stats().invalidations >= 1);
}

#[test]
fn a_killed_tracking_connection_ends_its_marks() {
    let server = Server::start();
    let mut con = server.con();
    let cache = SoldOutCache::new([server.url()]).unwrap();
    let sale = Sale::create(&mut con, "killed", &SaleSpec::new(1, 1))
        .unwrap()
        .with_local_cache(&cache);
    assert_eq!(
        sale.try_buy(&mut con, "a", 1).unwrap(),
        TryReply::Bought { remaining: 0 }
    );
    assert_eq!(sale.try_buy(&mut con, "b", 1).unwrap(), TryReply::SoldOut);
    let servers = [server];
    let before = tries(&servers);
    assert_eq!(sale.try_buy(&mut con, "c", 1).unwrap(), TryReply::SoldOut);
    assert_eq!(tries(&servers), before, "marked: answered in the process");
    let mut admin = servers[0].con();
    let _: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut admin)
        .unwrap();
    let killed = Instant::now();
    wait_until(Duration::from_secs(1), "the marks to go", || {
        cache.connections() == 0
    });
    println!("marks gone {:?} after the kill", killed.elapsed());
    let mut con = servers[0].con();
    assert_eq!(sale.try_buy(&mut con, "d", 1).unwrap(), TryReply::SoldOut);
    assert_eq!(
        tries(&servers),
        before + 1,
        "the next try went to the server"
    );
    assert_eq!(
        cache.connections(),
        1,
        "a new tracking connection read the sale again"
    );
    assert_eq!(sale.try_buy(&mut con, "e", 1).unwrap(), TryReply::SoldOut);
    assert_eq!(tries(&servers), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_sale_on_a_cluster_is_cached_whole_async() {
    use seckill_client::aio::{FlashSale as _, PartitionedSale as AsyncPartitioned};
    let nodes = start_cluster(3, &[]);
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let mut con = redis::cluster::ClusterClient::new(urls.clone())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    // Any node: each key's master is found by following MOVED.
    let cache = SoldOutCache::new([urls[0].clone()]).unwrap();
    let sale = AsyncPartitioned::create(&mut con, "cached-p", &SaleSpec::new(20, 4))
        .await
        .unwrap()
        .with_local_cache(&cache);
    let mut sold = 0;
    for n in 0..40 {
        if matches!(
            sale.try_buy(&mut con, format!("b{n}"), 1).await.unwrap(),
            TryReply::Bought { .. }
        ) {
            sold += 1;
        }
    }
    assert_eq!(sold, 20);
    let before = tries(&nodes);
    for n in 0..TRIES {
        assert_eq!(
            sale.try_buy(&mut con, format!("late{n}"), 1).await.unwrap(),
            TryReply::SoldOut
        );
    }
    let sent = tries(&nodes) - before;
    assert!(sent <= 4, "{sent} tries reached a server");
    let owners: std::collections::HashSet<String> = nodes
        .iter()
        .filter(|n| {
            sale.partition_keys().iter().any(|key| {
                let count: i64 = redis::cmd("CLUSTER")
                    .arg("COUNTKEYSINSLOT")
                    .arg(
                        redis::cmd("CLUSTER")
                            .arg("KEYSLOT")
                            .arg(key)
                            .query::<i64>(&mut n.con())
                            .unwrap(),
                    )
                    .query(&mut n.con())
                    .unwrap_or(0);
                count > 0
            })
        })
        .map(Server::url)
        .collect();
    assert_eq!(
        cache.connections(),
        owners.len(),
        "one tracking connection per master"
    );
    // A restock of the whole sale (into every partition) is sold through the cache.
    sale.restock(&mut con, 4).await.unwrap();
    let changed = Instant::now();
    while sale.try_buy(&mut con, "back", 1).await.unwrap() == TryReply::SoldOut {
        assert!(
            changed.elapsed() < Duration::from_secs(1),
            "the restock was not sold within 1 s"
        );
    }
    assert!(sale.stats().invalidations >= 1);
}

#[test]
fn a_cache_needs_a_tcp_address() {
    assert!(matches!(
        SoldOutCache::new(Vec::<String>::new()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        SoldOutCache::new(["redis+unix:///tmp/nowhere.sock"]),
        Err(Error::InvalidArgument(_))
    ));
}
