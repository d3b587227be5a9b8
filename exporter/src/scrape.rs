//! One scrape: find the nodes, then read each at once, every read bounded by the scrape's
//! budget, so a node that does not answer (killed, paused, cut off) costs the budget at most and
//! makes `seckill_up` 0, never a failed or late scrape. Redis is asked in small steps: `SCAN`
//! with `COUNT 200 TYPE seckill-S` (or `seckill-L`), then that batch's `SECKILL.INFO` (or
//! `LOCK.INFO`) pipelined: the longest call is one SCAN step.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, Value};
use tokio::sync::Mutex;
use tokio::time::timeout_at;

use crate::reading::{LockReading, NodeReading, SaleReading, info_fields};
use crate::topology::{Node, cluster_nodes};

/// Keys asked per SCAN step, and so per pipeline of INFO calls. A step with `TYPE` costs the
/// server about 0.7 µs a key (650 to 800 µs at COUNT 1000 here): 200 keeps each call far
/// under a millisecond (bench/results/exporter.md).
const SCAN_COUNT: usize = 200;
/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// What one scrape found and how long it took.
pub struct Snapshot {
    pub nodes: Vec<NodeReading>,
    pub seconds: f64,
}

pub struct Scraper {
    seeds: Vec<ConnectionInfo>,
    /// The last cluster topology seen: asked first at the next scrape, so the exporter follows
    /// the cluster even once its `--redis` nodes are gone.
    known: Mutex<Vec<Node>>,
    connections: Mutex<HashMap<String, MultiplexedConnection>>,
}

fn address_of(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => format!("{other:?}"),
    }
}

impl Scraper {
    pub fn new(seeds: Vec<ConnectionInfo>) -> Scraper {
        Scraper {
            seeds,
            known: Mutex::new(Vec::new()),
            connections: Mutex::new(HashMap::new()),
        }
    }

    pub async fn scrape(&self, budget: Duration) -> Snapshot {
        let start = Instant::now();
        let deadline = tokio::time::Instant::from_std(start + budget);
        // A third of the budget to learn the nodes, so that a frozen node asked for the
        // topology leaves the others time to be read.
        let asked_by = tokio::time::Instant::from_std(start + budget / 3);
        let (nodes, unanswered) = self.discover(asked_by).await;
        let unanswered = &unanswered;
        let reads = nodes.iter().map(|node| async move {
            if let Some(why) = unanswered.get(&node.address) {
                return NodeReading::failed(&node.address, why.clone());
            }
            let failure = match timeout_at(deadline, self.read(node)).await {
                Ok(Ok(reading)) => return reading,
                Ok(Err(why)) => why,
                Err(_) => "no answer within the scrape's budget".to_string(),
            };
            self.forget(&node.address).await;
            NodeReading::failed(&node.address, failure)
        });
        let nodes = join_all(reads).await;
        Snapshot {
            nodes,
            seconds: start.elapsed().as_secs_f64(),
        }
    }

    /// The nodes to read: each `--redis` node that is not in a cluster, and every node of the
    /// cluster that the first answering cluster node lists (the last topology's nodes are asked
    /// with the `--redis` ones, all at once, each until `deadline`); and why each `--redis` node
    /// that did not answer did not.
    async fn discover(
        &self,
        deadline: tokio::time::Instant,
    ) -> (Vec<Node>, HashMap<String, String>) {
        let seeds: Vec<String> = self.seeds.iter().map(address_of).collect();
        let mut candidates: Vec<String> = self
            .known
            .lock()
            .await
            .iter()
            .map(|n| n.address.clone())
            .collect();
        for seed in &seeds {
            if !candidates.contains(seed) {
                candidates.push(seed.clone());
            }
        }
        let answers = join_all(candidates.iter().map(|address| async move {
            match timeout_at(deadline, self.cluster_nodes(address)).await {
                Ok(answer) => answer,
                Err(_) => Err("no answer within the scrape's budget".to_string()),
            }
        }))
        .await;
        let mut found: BTreeMap<String, Node> = BTreeMap::new();
        let mut unanswered = HashMap::new();
        let mut cluster_read = false;
        for (address, answer) in candidates.iter().zip(answers) {
            match answer {
                Ok(Some(text)) if !cluster_read => {
                    let host = address.rsplit_once(':').map_or("", |(h, _)| h);
                    let nodes = cluster_nodes(&text, host);
                    *self.known.lock().await = nodes.clone();
                    found.extend(nodes.into_iter().map(|n| (n.address.clone(), n)));
                    cluster_read = true;
                }
                Ok(Some(_)) => {} // another node of a cluster already read
                Ok(None) => {
                    let node = Node {
                        address: address.clone(),
                        reads_sales: true,
                    };
                    found.insert(address.clone(), node);
                }
                Err(why) => {
                    self.forget(address).await;
                    // A `--redis` node is reported down; a node of the last topology only if
                    // the cluster, asked through another node, still lists it.
                    if seeds.contains(address) {
                        let node = Node {
                            address: address.clone(),
                            reads_sales: true,
                        };
                        found.entry(address.clone()).or_insert(node);
                    }
                    unanswered.insert(address.clone(), why);
                }
            }
        }
        (found.into_values().collect(), unanswered)
    }

    /// `CLUSTER NODES` on `address`: None when the node is not in cluster mode.
    async fn cluster_nodes(&self, address: &str) -> Result<Option<String>, String> {
        let mut con = self.connection(address).await?;
        match redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async::<String>(&mut con)
            .await
        {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.to_string().contains("cluster support disabled") => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn read(&self, node: &Node) -> Result<NodeReading, String> {
        let mut con = self.connection(&node.address).await?;
        let info: String = redis::cmd("INFO")
            .arg("seckill")
            .arg("replication")
            .query_async(&mut con)
            .await
            .map_err(|e| e.to_string())?;
        let mut counters = info_fields(&info);
        let master = info.lines().any(|l| l.trim_end() == "role:master");
        counters.retain(|name, _| name.starts_with("seckill_"));
        if !counters.contains_key("seckill_version") {
            return Err("the seckill module is not loaded".into());
        }
        let mut reading = NodeReading {
            instance: node.address.clone(),
            failure: None,
            counters,
            sales: Vec::new(),
            locks: Vec::new(),
        };
        if node.reads_sales && master {
            for (key, reply) in scan_and_ask(&mut con, "seckill-S", "SECKILL.INFO").await? {
                // A key deleted between the SCAN and its INFO answers an error: skipped.
                if let Ok(sale) = SaleReading::from_reply(key, reply) {
                    reading.sales.push(sale);
                }
            }
            for (key, reply) in scan_and_ask(&mut con, "seckill-L", "LOCK.INFO").await? {
                if let Ok(lock) = LockReading::from_reply(key, reply) {
                    reading.locks.push(lock);
                }
            }
        }
        Ok(reading)
    }

    async fn connection(&self, address: &str) -> Result<MultiplexedConnection, String> {
        if let Some(con) = self.connections.lock().await.get(address) {
            return Ok(con.clone());
        }
        // A `--redis` node with its own settings; a discovered node with the first one's (user,
        // password).
        let info = match self.seeds.iter().find(|seed| address_of(seed) == address) {
            Some(seed) => seed.clone(),
            None => {
                let (host, port) = address
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                    .ok_or_else(|| format!("not HOST:PORT: {address}"))?;
                self.seeds[0]
                    .clone()
                    .set_addr(ConnectionAddr::Tcp(host, port))
            }
        };
        let client = Client::open(info).map_err(|e| e.to_string())?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        let con = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| e.to_string())?;
        self.connections
            .lock()
            .await
            .insert(address.to_string(), con.clone());
        Ok(con)
    }

    /// Drops a node's connection after a failure, so the next scrape makes a new one rather
    /// than queue behind calls a frozen node never answered.
    async fn forget(&self, address: &str) {
        self.connections.lock().await.remove(address);
    }
}

/// Every key of `kind` on the node with `command key`'s reply, a SCAN step at a time.
async fn scan_and_ask(
    con: &mut MultiplexedConnection,
    kind: &str,
    command: &str,
) -> Result<Vec<(Vec<u8>, Value)>, String> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .arg("TYPE")
            .arg(kind)
            .query_async(con)
            .await
            .map_err(|e| e.to_string())?;
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd(command).arg(key);
            }
            // Each reply on its own: one key deleted meanwhile fails its INFO, not the batch.
            let replies: Vec<Value> = pipe
                .ignore_errors()
                .query_async(con)
                .await
                .map_err(|e| e.to_string())?;
            out.extend(keys.into_iter().zip(replies));
        }
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}
