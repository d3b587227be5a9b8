//! A local cluster's shape as the tests read it: connections to it, its masters, which master
//! serves a key, which node replicates a master.

use crate::buyers::master_port;
use crate::{Server, wait_until};
use redis::cluster::{ClusterClient, ClusterConnection};
use std::time::Duration;

/// A sync cluster connection with generous retries, for a test's own reads and set-up.
pub fn cluster_con(nodes: &[String]) -> ClusterConnection {
    ClusterClient::builder(nodes.to_vec())
        .retries(30)
        .build()
        .expect("cluster client")
        .get_connection()
        .expect("cluster connection")
}

/// The nodes' `redis://` addresses.
pub fn urls(nodes: &[Server]) -> Vec<String> {
    nodes.iter().map(Server::url).collect()
}

/// The masters' addresses, as the cluster sees them now.
pub fn masters(nodes: &[String]) -> Vec<String> {
    for url in nodes {
        let Ok(mut con) = redis::Client::open(url.as_str()).and_then(|c| c.get_connection()) else {
            continue;
        };
        let Ok(listing) = redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut con) else {
            continue;
        };
        return listing
            .lines()
            .filter(|line| line.contains("master") && !line.contains("fail"))
            .filter_map(|line| {
                let address = line.split_whitespace().nth(1)?;
                Some(format!("redis://{}/", address.split('@').next()?))
            })
            .collect();
    }
    panic!("no node answers CLUSTER NODES");
}

/// The master serving `key`, as `redis://127.0.0.1:port/`.
pub fn owner_of(nodes: &[String], key: &str) -> String {
    format!("redis://127.0.0.1:{}/", master_port(&nodes[0], key))
}

/// A replica of the master at `master`.
pub fn replica_of(nodes: &[String], master: &str) -> String {
    let mut con = redis::Client::open(master)
        .unwrap()
        .get_connection()
        .unwrap();
    let id: String = redis::cmd("CLUSTER").arg("MYID").query(&mut con).unwrap();
    let mut found = None;
    wait_until(Duration::from_secs(30), "a replica", || {
        let listing: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con).unwrap();
        found = listing
            .lines()
            .find(|line| line.contains("slave") && line.contains(&id))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|address| address.split('@').next())
            .map(|address| format!("redis://{address}/"));
        found.is_some()
    });
    let replica = found.unwrap();
    assert!(nodes.contains(&replica));
    replica
}
