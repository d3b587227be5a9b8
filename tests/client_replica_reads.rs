//! A handle's `read_from_replicas(true)` (issue 50): on an `aio::ClusterSession`, `position`
//! and `place` are answered by a replica of each partition's master (INFO commandstats on each
//! server says which) and equal the master's; a frozen replica costs the read one response
//! timeout, then the master answers; on any other connection the server it reaches answers as
//! before (one server refuses the READONLY, which is skipped).

use seckill_client::aio::{self, ClusterSession, FlashSale as _};
use seckill_client::{FlashSale, QueueSpec, Sale, SaleSpec};
use seckill_harness::{Server, command_calls, start_cluster_with_replicas, wait_until};
use std::time::{Duration, Instant};

const USERS: usize = 20;

fn room() -> SaleSpec {
    SaleSpec::new(5, 3).queue(QueueSpec::default())
}

fn positions(servers: &[&Server]) -> i64 {
    servers
        .iter()
        .map(|s| command_calls(&mut s.con(), "seckill.position"))
        .sum()
}

fn in_sync(master: &Server, replica: &Server) -> bool {
    let offset = |server: &Server, field: &str| -> i64 {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut server.con())
            .unwrap();
        info.lines()
            .find_map(|line| line.strip_prefix(field)?.trim().parse().ok())
            .unwrap_or(-1)
    };
    offset(replica, "slave_repl_offset:") >= offset(master, "master_repl_offset:")
}

#[tokio::test(flavor = "current_thread")]
async fn positions_and_places_come_from_the_replicas_on_a_cluster_session() {
    let nodes = start_cluster_with_replicas(3, 1, &[]);
    let (masters, replicas): (Vec<&Server>, Vec<&Server>) =
        (nodes[..3].iter().collect(), nodes[3..].iter().collect());
    let mut session = ClusterSession::connect([nodes[0].url()]).await.unwrap();
    let sale = aio::PartitionedSale::create(&mut session, "replica-reads", &room())
        .await
        .unwrap()
        .read_from_replicas(true);
    let users: Vec<String> = (0..USERS).map(|n| format!("u{n}")).collect();
    for user in &users {
        sale.join(&mut session, user).await.unwrap();
    }
    for (master, replica) in nodes[..3].iter().flat_map(|m| {
        nodes[3..]
            .iter()
            .filter(|r| {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut r.con())
                    .unwrap();
                info.contains(&format!("master_port:{}", m.port))
            })
            .map(move |r| (m, r))
    }) {
        wait_until(Duration::from_secs(10), "the replica in sync", || {
            in_sync(master, replica)
        });
    }
    let plain = aio::PartitionedSale::open(&mut session, "replica-reads")
        .await
        .unwrap();
    let mut expected = Vec::new();
    for user in &users {
        expected.push(plain.position(&mut session, user).await.unwrap());
    }
    let before = (positions(&masters), positions(&replicas));
    let mut told = Vec::new();
    let mut placed = Vec::new();
    for user in &users {
        told.push(sale.position(&mut session, user).await.unwrap());
        placed.push(
            sale.place(&mut session, user)
                .await
                .unwrap()
                .map(|place| place.position),
        );
    }
    assert_eq!(told, expected);
    assert_eq!(placed, expected);
    assert_eq!(positions(&masters), before.0, "no read reached a master");
    assert_eq!(positions(&replicas), before.1 + 2 * USERS as i64);
    assert_eq!(sale.position(&mut session, "stranger").await.unwrap(), None);

    // Every replica frozen: each partition's first read waits out the response timeout (1 s),
    // the replica is then skipped, and the masters answer.
    let on_masters = positions(&masters);
    for replica in &replicas {
        replica.signal(libc::SIGSTOP);
    }
    let began = Instant::now();
    let mut told = Vec::new();
    for user in &users {
        told.push(sale.position(&mut session, user).await.unwrap());
    }
    let took = began.elapsed();
    for replica in &replicas {
        replica.signal(libc::SIGCONT);
    }
    assert_eq!(told, expected);
    assert_eq!(positions(&masters), on_masters + USERS as i64);
    println!("{USERS} positions with every replica frozen: {took:?}");
}

/// On one server, through a plain connection, sync and async: the READONLY before the read is
/// refused and skipped; the answers are the server's.
#[tokio::test(flavor = "current_thread")]
async fn on_one_server_the_server_answers_as_before() {
    let server = Server::start();
    let mut con = server.con();
    let sale = Sale::create(
        &mut con,
        "room",
        &SaleSpec::new(5, 1).queue(QueueSpec::default()),
    )
    .unwrap()
    .read_from_replicas(true);
    assert_eq!(sale.join(&mut con, "a").unwrap(), 1);
    assert_eq!(sale.position(&mut con, "a").unwrap(), Some(1));
    assert_eq!(sale.place(&mut con, "a").unwrap().unwrap().position, 1);
    assert_eq!(sale.position(&mut con, "b").unwrap(), None);
    let client = redis::Client::open(server.url()).unwrap();
    let mut multiplexed = client.get_multiplexed_async_connection().await.unwrap();
    let sale = aio::Sale::open(&mut multiplexed, "room")
        .await
        .unwrap()
        .read_from_replicas(true);
    assert_eq!(sale.position(&mut multiplexed, "a").await.unwrap(), Some(1));
    assert_eq!(
        sale.place(&mut multiplexed, "a")
            .await
            .unwrap()
            .unwrap()
            .position,
        1
    );
    let plain = Sale::create(&mut con, "plain", &SaleSpec::new(5, 1))
        .unwrap()
        .read_from_replicas(true);
    assert!(matches!(
        plain.position(&mut con, "a"),
        Err(seckill_client::Error::NoQueue(_))
    ));
}
