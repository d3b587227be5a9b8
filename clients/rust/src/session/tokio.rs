//! [`ClusterSession`] on tokio (`crate::aio::ClusterSession`): the crate's own path to a Redis
//! Cluster, or to one server. redis 1.8.1's `cluster_async` made no progress for minutes at
//! times while the topology changed (a CLUSTER FAILOVER, a rebalance), so a session does not
//! use it: it keeps the slot map itself (`CLUSTER SLOTS`, read at connect, after a lost node
//! and after a MOVED, once per READ_EVERY at the most, in the background), sends each command
//! on its own connection to the master of the command's first key ([`Nodes`]), follows MOVED
//! (to the node named, the map mended at once and read again) and ASK (`ASKING` and the
//! command in one write), and bounds every call: a connect by the connect timeout, a reply by
//! the response timeout (plus the wait a `WAIT` or a `BLOCK` asks for). It never sends a
//! command again after a failure that may have run it: a purchase is the library's to resend,
//! under its attempt id.

use super::nodes::{Deadline, Nodes, Settings, Written, lost};
use super::pipelined::Kept;
use super::slot_map::SlotMap;
use crate::routing::{command_key, key_slot, redirect};
use redis::aio::ConnectionLike;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Redirects followed for one command; past them the redirect is the caller's (the slot is
/// still moving, or the nodes do not agree yet): the library retries it with backoff.
const MAX_REDIRECTS: usize = 5;
/// The slot map is read again at most this often.
const READ_EVERY: Duration = Duration::from_millis(250);

/// The crate's own async connections to a Redis Cluster (or one server): see the module's
/// notes. Clone it per task: the clones share the slot map and 2 pipelined connections per
/// node, so that thousands of tasks cost two connections per node. A `WAIT` holds its
/// connection in the server until the replicas answer or its timeout passes, and the commands
/// behind it wait (held by the connection's writer until the answer, then written together);
/// a call goes on a connection no `WAIT` (nor a `BLOCK`) holds when there is one, and the
/// kept writes of the handles share their `WAIT`s (`pipelined::reader`). Through a frozen
/// replica each `WAIT` waits out its timeout: tasks that must not wait behind another's take a
/// session of their own ([`ClusterSession::detached`]).
#[derive(Clone)]
pub struct ClusterSession {
    topology: Arc<Topology>,
    nodes: Arc<Nodes>,
    /// The node of this clone's last command: what keeps a write (`INFO replication`, a
    /// `WAIT`, which counts the writes of its connection) goes there.
    last_node: Option<Arc<str>>,
    /// The node and the connection the last command with a key went on.
    last_connection: Option<(Arc<str>, Written)>,
}

/// How to make a [`ClusterSession`]: the nodes to start from, and its timeouts.
#[derive(Clone, Debug)]
pub struct ClusterSessionBuilder {
    seeds: Vec<Arc<str>>,
    settings: Settings,
}

struct Topology {
    /// The nodes given, asked for the slot map when no known master answers.
    seeds: Vec<Arc<str>>,
    map: RwLock<SlotMap>,
    reading: Mutex<Reading>,
    reads: AtomicU64,
}

#[derive(Default)]
struct Reading {
    /// When the map was last read.
    last: Option<Instant>,
    /// A reading task is on its way.
    running: bool,
    /// The map went stale again while it ran: read once more.
    again: bool,
}

impl ClusterSessionBuilder {
    /// How long connecting to a node may take (1 s unless set).
    pub fn connect_timeout(mut self, timeout: Duration) -> ClusterSessionBuilder {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How long one reply may take (1 s unless set); a `WAIT` or a `BLOCK` may take its own
    /// timeout on top. A node that lets a call time out is skipped (its calls fail at once,
    /// sending nothing) until a probe finds it back: 100 ms later, then twice as far apart, 1 s
    /// at most.
    pub fn response_timeout(mut self, timeout: Duration) -> ClusterSessionBuilder {
        self.settings.response_timeout = timeout;
        self
    }

    /// Connect from this local address (a test that cuts one client's packets, a host with
    /// several interfaces).
    pub fn source_address(mut self, address: IpAddr) -> ClusterSessionBuilder {
        self.settings.source = Some(address);
        self
    }

    /// Reads the slot map from the first seed that answers (a server that is no cluster
    /// serves every slot): a wrong address fails here, not at the first call.
    pub async fn connect(self) -> RedisResult<ClusterSession> {
        let nodes = Arc::new(Nodes::new(self.settings));
        let topology = Arc::new(Topology {
            map: RwLock::new(SlotMap::single(&self.seeds[0])),
            seeds: self.seeds,
            reading: Mutex::new(Reading::default()),
            reads: AtomicU64::new(0),
        });
        topology.read(&nodes).await?;
        lock(&topology.reading).last = Some(Instant::now());
        Ok(ClusterSession {
            topology,
            nodes,
            last_node: None,
            last_connection: None,
        })
    }
}

impl ClusterSession {
    /// A session on `nodes` (any of the cluster's, or one server; `redis://[user:pass@]host:
    /// port[?protocol=resp3]`), with the default timeouts.
    pub async fn connect<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> RedisResult<ClusterSession> {
        ClusterSession::builder(nodes)?.connect().await
    }

    /// A builder of a session on `nodes`, to set its timeouts or source address first. The
    /// credentials and protocol are the first node's.
    pub fn builder<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> RedisResult<ClusterSessionBuilder> {
        let infos = nodes
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<RedisResult<Vec<_>>>()?;
        let Some(first) = infos.first() else {
            return Err((redis::ErrorKind::InvalidClientConfig, "no node given").into());
        };
        let redis = first.redis_settings().clone();
        let seeds = infos
            .iter()
            .map(|info| match info.addr() {
                redis::ConnectionAddr::Tcp(host, port) => Ok(Arc::from(format!("{host}:{port}"))),
                other => Err(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "a cluster session connects over plain TCP",
                    format!("{other:?}"),
                ))),
            })
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(ClusterSessionBuilder {
            seeds,
            settings: Settings {
                redis,
                connect_timeout: Duration::from_secs(1),
                response_timeout: Duration::from_secs(1),
                source: None,
            },
        })
    }

    /// A session that shares this one's slot map but has connections of its own: for tasks
    /// whose `WAIT`s must not hold up the others.
    pub fn detached(&self) -> ClusterSession {
        ClusterSession {
            topology: self.topology.clone(),
            nodes: Arc::new(Nodes::new(self.nodes.settings().clone())),
            last_node: None,
            last_connection: None,
        }
    }

    /// How many connections this session's clones made (one per node, more after failures).
    pub fn connects(&self) -> u64 {
        self.nodes.connects()
    }

    /// How many `WAIT`s (and `WAITAOF`s) its clones sent for writes, each shared by the
    /// writes its connection had answered before it was sent.
    pub fn waits(&self) -> u64 {
        self.nodes.waits()
    }

    /// How many times the slot map was read.
    pub fn slot_map_reads(&self) -> u64 {
        self.topology.reads.load(Ordering::Relaxed)
    }

    /// The master a command goes to: its first key's slot's, or for a command without a key
    /// (a `WAIT`: the last command's node) any master.
    fn target(&self, cmd: &Cmd) -> (Option<u16>, Arc<str>) {
        let map = read(&self.topology.map);
        match command_key(cmd) {
            Some(key) => {
                let slot = key_slot(key);
                let node = map
                    .master(slot)
                    .unwrap_or_else(|| self.topology.seeds[0].clone());
                (Some(slot), node)
            }
            None => {
                let node = self
                    .last_node
                    .clone()
                    .filter(|_| super::is_follow_up(super::name_of(cmd)));
                let node = node.or_else(|| map.masters().first().cloned());
                (None, node.unwrap_or_else(|| self.topology.seeds[0].clone()))
            }
        }
    }

    async fn call(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        if super::is_wait(super::name_of(cmd))
            && let Some((on, written)) = &self.last_connection
            && self.last_node.as_ref() == Some(on)
        {
            // After a write: one WAIT shared by the writes of its connection.
            return self
                .nodes
                .shared_wait(on, cmd, written)
                .await
                .and_then(top_error);
        }
        Ok(self.routed(cmd, None).await?.0)
    }

    /// `write` on its key's master, kept: its reply, then the answer of `wait` (a packed
    /// `WAIT` or `WAITAOF`, waiting up to `wait_time` in the server) written on its connection
    /// after it, shared with the other writes answered in the same read; `Nil` without a wait
    /// when `changed` says the reply changed nothing. The caller is woken once (see
    /// `pipelined::reader`). The crate's async handles send their kept writes here
    /// (`crate::link::Tokio`).
    pub(crate) async fn kept(
        &mut self,
        write: &Cmd,
        (wait, wait_time): (Arc<[u8]>, Duration),
        changed: fn(&Value) -> bool,
        budget: Duration,
    ) -> RedisResult<(Value, Value)> {
        let kept = Kept { wait, changed };
        let deadline = Deadline::after(budget);
        self.routed(write, Some((kept, wait_time, deadline))).await
    }

    /// `cmd` (kept when `kept` says so, by its caller's deadline) on its master, redirects
    /// followed.
    async fn routed(
        &mut self,
        cmd: &Cmd,
        kept: Option<(Kept, Duration, Deadline)>,
    ) -> RedisResult<(Value, Value)> {
        let (slot, mut node) = self.target(cmd);
        let mut asking = false;
        let mut redirects = 0;
        loop {
            let result = match &kept {
                Some(kept) => self.nodes.call_kept(&node, cmd, asking, kept.clone()).await,
                None => self
                    .nodes
                    .call_on(&node, cmd, asking)
                    .await
                    .map(|(value, written)| ((value, Value::Nil), written)),
            }
            .and_then(|((value, answer), written)| Ok(((top_error(value)?, answer), written)));
            let e = match result {
                Ok((value, written)) => {
                    if slot.is_some() {
                        self.last_connection = Some((node.clone(), written));
                    }
                    self.last_node = Some(node);
                    return Ok(value);
                }
                Err(e) => e,
            };
            if lost(&e) {
                self.topology.stale(&self.nodes);
            }
            let code = e.code();
            let to = redirect(&e).map(|(host, port)| Arc::<str>::from(format!("{host}:{port}")));
            match (code, to) {
                (Some("MOVED"), Some(to)) if redirects < MAX_REDIRECTS => {
                    if let Some(slot) = slot {
                        write(&self.topology.map).moved(slot, &to);
                    }
                    self.topology.stale(&self.nodes);
                    (node, asking) = (to, false);
                }
                (Some("ASK"), Some(to)) if redirects < MAX_REDIRECTS => {
                    (node, asking) = (to, true);
                }
                _ => {
                    self.last_node = Some(node);
                    return Err(e);
                }
            }
            redirects += 1;
        }
    }

    /// A pipeline goes to the node of its first command with a key, whole, and is not
    /// redirected: its commands should share one slot. One that begins with `READONLY` holds
    /// reads a replica may answer (a handle's `read_from_replicas`): it goes to a replica of
    /// that node when the map lists one, and to the node when the replica fails it.
    async fn call_pipeline(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let first_keyed = pipeline.cmd_iter().find(|cmd| command_key(cmd).is_some());
        let (slot, node) = match first_keyed {
            Some(cmd) => self.target(cmd),
            None => self.target(&redis::cmd("PING")),
        };
        let replica = slot
            .filter(|_| pipeline.cmd_iter().next().is_some_and(is_readonly))
            .and_then(|slot| read(&self.topology.map).replica(slot))
            .filter(|replica| self.nodes.up_for_reads(replica));
        if let Some(replica) = replica {
            match self
                .nodes
                .call_pipeline(&replica, pipeline, offset, count)
                .await
            {
                Ok(replies) if !replies.iter().any(replica_miss) => return Ok(replies),
                Ok(_) => self.topology.stale(&self.nodes),
                Err(e) if lost(&e) => self.topology.stale(&self.nodes),
                Err(_) => {}
            }
        }
        let result = self
            .nodes
            .call_pipeline(&node, pipeline, offset, count)
            .await;
        if matches!(&result, Err(e) if lost(e)) {
            self.topology.stale(&self.nodes);
        }
        self.last_node = Some(node);
        result
    }
}

impl Topology {
    /// The map may be out of date (a node lost, a MOVED): read it again in the background,
    /// READ_EVERY after the last reading at the earliest.
    fn stale(self: &Arc<Self>, nodes: &Arc<Nodes>) {
        let wait = {
            let mut reading = lock(&self.reading);
            if reading.running {
                reading.again = true;
                return;
            }
            reading.running = true;
            let now = Instant::now();
            reading.last.map_or(Duration::ZERO, |last| {
                (last + READ_EVERY).saturating_duration_since(now)
            })
        };
        let (topology, nodes) = (self.clone(), nodes.clone());
        tokio::spawn(async move {
            let mut wait = wait;
            loop {
                tokio::time::sleep(wait).await;
                let _ = topology.read(&nodes).await;
                let mut reading = lock(&topology.reading);
                reading.last = Some(Instant::now());
                if !std::mem::take(&mut reading.again) {
                    reading.running = false;
                    return;
                }
                wait = READ_EVERY;
            }
        });
    }

    /// Asks the known masters, then the seeds, for `CLUSTER SLOTS`, until one answers with a
    /// map (or says it is no cluster: then it serves every slot).
    async fn read(&self, nodes: &Nodes) -> RedisResult<()> {
        let mut asked: Vec<Arc<str>> = read(&self.map).masters();
        for seed in &self.seeds {
            if !asked.contains(seed) {
                asked.push(seed.clone());
            }
        }
        let mut last_error = None;
        for node in asked {
            let reply = nodes
                .call(&node, redis::cmd("CLUSTER").arg("SLOTS"), false)
                .await
                .and_then(top_error);
            let map = match reply {
                Ok(reply) => SlotMap::from_cluster_slots(&reply),
                Err(e) if no_cluster(&e) => Some(SlotMap::single(&node)),
                Err(e) => {
                    last_error = Some(e);
                    None
                }
            };
            if let Some(map) = map {
                *write(&self.map) = map;
                self.reads.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        Err(last_error.unwrap_or_else(|| {
            (
                redis::ErrorKind::ClusterConnectionNotFound,
                "no node gave a slot map",
            )
                .into()
        }))
    }
}

fn is_readonly(cmd: &Cmd) -> bool {
    super::name_of(cmd).eq_ignore_ascii_case(b"READONLY")
}

/// A replica's reply that its master should answer the reads instead: it no longer serves
/// the slot (MOVED, ASK), is cut from its master or loading (MASTERDOWN, LOADING), or the
/// cluster is changing (TRYAGAIN, CLUSTERDOWN).
fn replica_miss(reply: &Value) -> bool {
    let Value::ServerError(e) = reply else {
        return false;
    };
    matches!(
        e.code(),
        "MOVED" | "ASK" | "MASTERDOWN" | "LOADING" | "TRYAGAIN" | "CLUSTERDOWN"
    )
}

/// Whether `e` is a server's answer that it runs without cluster support.
fn no_cluster(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR") && e.to_string().contains("cluster support disabled")
}

/// A reply that is an error, as the call's error (so that a redirect is seen as one).
fn top_error(value: Value) -> RedisResult<Value> {
    match value {
        Value::ServerError(e) => Err(e.into()),
        value => Ok(value),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl ConnectionLike for ClusterSession {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.call(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.call_pipeline(pipeline, offset, count))
    }

    fn get_db(&self) -> i64 {
        0
    }
}
