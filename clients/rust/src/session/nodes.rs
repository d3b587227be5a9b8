//! The async cluster session's own connections: [`LANES`] pipelined connections per node
//! ([`Pipelined`]), made by the crate (from a chosen source address if asked), each connect
//! and each call bounded, a connection that failed or timed out dropped (the next call connects anew), and
//! a node that failed skipped without sending until its next probe ([`Health`]'s rules, the
//! Python package's): so a frozen or dead master costs the calls that need it one timeout,
//! then nothing, and never slows the calls that go to other nodes.

use super::pipelined::{Kept, Pipelined};
use crate::health::Health;
use crate::link::{no_answer, within};
use crate::routing::{NAME_ROOM, capitalized, command_args_iter, command_name, command_number};
use redis::{Cmd, Pipeline, RedisConnectionInfo, RedisResult, Value};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the session connects and how long it waits.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The handshake: credentials, protocol, database.
    pub redis: RedisConnectionInfo,
    pub connect_timeout: Duration,
    /// The longest wait for one reply (a `WAIT` or a `BLOCK` waits its own time on top).
    pub response_timeout: Duration,
    /// The local address connections are made from (`None`: the system picks).
    pub source: Option<IpAddr>,
}

/// Connections per node: a `WAIT` (or a `BLOCK`) holds its connection in the server until it
/// answers, so a call goes on a connection that none holds when there is one, and purchases
/// keep flowing past a group acknowledgement (`make bench`, "Durability").
const LANES: usize = 2;

/// One node's connections, each made by whichever call needs it first.
#[derive(Default)]
struct Node {
    lanes: [Lane; LANES],
    /// The lane kept writes go to while nothing holds it: they stay on one connection until
    /// its write's `WAIT` holds it, then go to the next. So a write carries every kept write
    /// that came meanwhile, and the connections' writes take turns: while one waits for its
    /// replica, the other's writes gather. (Going round the connections split each burst
    /// between them, and their `WAIT`s were answered together: see `make bench`,
    /// "Durability". Other calls go round: one connection carried fewer of them than two.)
    open: AtomicUsize,
    /// The lane of the next call that goes round: any but a kept write, and a kept write when
    /// every lane is held.
    next: AtomicUsize,
    /// Connections made to the node so far.
    made: AtomicU64,
}

#[derive(Default)]
struct Lane {
    /// The connection, and which of the node's connections it is (1 for the first).
    con: Mutex<Option<(Pipelined, u64)>>,
    /// Held while connecting, so that the calls waiting for the lane connect once.
    connecting: tokio::sync::Mutex<()>,
}

/// A call's connection: the connection, which of the node's it is, and its lane.
type Lease = (Pipelined, u64, usize);

impl Lane {
    /// Its connection, leased as the node's lane `lane`, when it has one.
    fn lease(&self, lane: usize) -> Option<Lease> {
        lock(&self.con)
            .as_ref()
            .map(|(con, made)| (con.clone(), *made, lane))
    }
}

/// A caller's bound of a whole call (its connect and redirects too) and the budget it was
/// made from, which its timeout names. The call's reply is bounded by the session's own bound
/// too: both under one timer, the earlier (one timer less per purchase: the timers were 9 %
/// of its client CPU in perf, `make bench`, "Durability").
#[derive(Clone, Copy)]
pub(crate) struct Deadline {
    at: tokio::time::Instant,
    budget: Duration,
}

impl Deadline {
    pub fn after(budget: Duration) -> Deadline {
        Deadline {
            at: tokio::time::Instant::now() + budget,
            budget,
        }
    }

    /// When it was set.
    fn set_at(self) -> tokio::time::Instant {
        self.at - self.budget
    }

    /// `call`, failing with the caller's timeout at the deadline.
    async fn bound<T>(self, call: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
        match tokio::time::timeout_at(self.at, call).await {
            Ok(result) => result,
            Err(_) => Err(no_answer(self.budget)),
        }
    }
}

/// Where a call went: the connection, which of its node's it is and its lane, and the call's
/// number on it (what a `WAIT` for its writes must be written after).
#[derive(Clone)]
pub(crate) struct Written {
    con: Pipelined,
    made: u64,
    lane: usize,
    number: u64,
}

pub(crate) struct Nodes {
    settings: Settings,
    nodes: Mutex<HashMap<Arc<str>, Arc<Node>>>,
    health: Health,
    connects: AtomicU64,
    /// `WAIT`s (and `WAITAOF`s) written on the node's connections.
    waits: Arc<AtomicU64>,
}

impl Nodes {
    pub fn new(settings: Settings) -> Nodes {
        Nodes {
            settings,
            nodes: Mutex::new(HashMap::new()),
            health: Health::default(),
            connects: AtomicU64::new(0),
            waits: Arc::default(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// How many connections were made.
    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    /// `cmd` on `node`, after `ASKING` in the same write when `asking`.
    pub async fn call(&self, node: &Arc<str>, cmd: &Cmd, asking: bool) -> RedisResult<Value> {
        Ok(self.call_on(node, cmd, asking).await?.0)
    }

    /// [`Nodes::call`], and where it went (for [`Nodes::shared_wait`]).
    pub async fn call_on(
        &self,
        node: &Arc<str>,
        cmd: &Cmd,
        asking: bool,
    ) -> RedisResult<(Value, Written)> {
        let (mut replies, written) = self.exchange(node, cmd, asking, (None, None)).await?;
        Ok((replies.swap_remove(0), written))
    }

    /// `write` on `node` kept as `kept` says: its reply and the wait's answer (`Nil`: its
    /// reply changed nothing, nothing waited for), and where it went. `wait_time`: how long
    /// the wait may take in the server.
    pub async fn call_kept(
        &self,
        node: &Arc<str>,
        write: &Cmd,
        asking: bool,
        (kept, wait_time, deadline): (Kept, Duration, Deadline),
    ) -> RedisResult<((Value, Value), Written)> {
        let (replies, written) = self
            .exchange(
                node,
                write,
                asking,
                (Some((kept, wait_time)), Some(deadline)),
            )
            .await?;
        let mut replies = replies.into_iter();
        let reply = replies.next().unwrap_or(Value::Nil);
        Ok(((reply, replies.next().unwrap_or(Value::Nil)), written))
    }

    /// `cmd` on `node` (after `ASKING` in the same write when `asking`), kept as `kept` says,
    /// bounded by the response timeout plus the waits it asks for, and by the `caller`'s
    /// deadline; its outcome judged (unless the caller's deadline ended it).
    async fn exchange(
        &self,
        node: &Arc<str>,
        cmd: &Cmd,
        asking: bool,
        (kept, caller): (Option<(Kept, Duration)>, Option<Deadline>),
    ) -> RedisResult<(Vec<Value>, Written)> {
        let ((con, made, lane), connected_at) =
            self.connection(node, caller, kept.is_some()).await?;
        // A kept write waits in the server for its wait alone (the crate's writes never block).
        let waits_for = match &kept {
            Some((_, wait_time)) => *wait_time,
            None => blocking_time(cmd),
        };
        let budget = self.settings.response_timeout + waits_for;
        // Room for a purchase's command: one allocation, no growth.
        let mut packed = Vec::with_capacity(128);
        if asking {
            redis::cmd("ASKING").write_packed_command(&mut packed);
        }
        cmd.write_packed_command(&mut packed);
        let skip = usize::from(asking);
        // From when the caller's deadline was set, moments ago, unless a connection was made
        // since: one clock read less per call.
        let sent_at = connected_at
            .or(caller.map(Deadline::set_at))
            .unwrap_or_else(tokio::time::Instant::now);
        let own = sent_at + budget;
        let theirs = caller.filter(|caller| caller.at < own);
        // A call that waits in the server on purpose (a `BLOCK`, a `WAIT`) holds its connection.
        let holds = kept.is_none() && waits_for > Duration::ZERO;
        // The call built in its bound's arguments: a future kept in a local, then moved into
        // its bound, kept its room in this one's state as well.
        let bounded = tokio::time::timeout_at(
            theirs.map_or(own, |caller| caller.at),
            con.call(packed, (skip, 1), kept.map(|(kept, _)| kept), holds),
        );
        let result = match (bounded.await, theirs) {
            (Ok(result), _) => result,
            // The caller's deadline came first: its timeout, and the node not judged (the
            // reply's own bound had not passed).
            (Err(_), Some(caller)) => return Err(no_answer(caller.budget)),
            (Err(_), None) => Err(no_answer(budget)),
        };
        self.judge(node, (made, lane), &result);
        result.map(|(replies, number)| {
            let written = Written {
                con,
                made,
                lane,
                number,
            };
            (replies, written)
        })
    }

    /// `wait` (a `WAIT` or `WAITAOF`) for a write that went as `written` on `node`: the
    /// answer of one written on that connection after the write, shared with every write in
    /// the same case (the connection's writer sends one per write at most, see
    /// `pipelined::writer`). The connection gone since the write: a lost call (the write is
    /// the caller's to send again under its attempt id).
    pub async fn shared_wait(
        &self,
        node: &Arc<str>,
        wait: &Cmd,
        written: &Written,
    ) -> RedisResult<Value> {
        let budget = self.settings.response_timeout + blocking_time(wait);
        let result = within(budget, written.con.wait_after(written.number, wait)).await;
        self.judge(node, (written.made, written.lane), &result);
        result
    }

    /// How many `WAIT`s (and `WAITAOF`s) were written, each shared by the writes before it.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// `pipeline`'s commands on `node`.
    pub async fn call_pipeline(
        &self,
        node: &Arc<str>,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let ((con, made, lane), _) = self.connection(node, None, false).await?;
        let budget = self.settings.response_timeout;
        let result = within(budget, async move {
            Ok(con.send_packed_commands(pipeline, offset, count).await?.0)
        })
        .await;
        self.judge(node, (made, lane), &result);
        result
    }

    /// Whether a read may go to `node` without waiting on it: it is not known down. A down
    /// node whose probe is due is probed in the background (a `PING`, judged as any call), so
    /// that the reads that could go elsewhere (a replica's, to its master) never wait for it.
    pub fn up_for_reads(self: &Arc<Self>, node: &Arc<str>) -> bool {
        match self.health.probe_due(node, Instant::now()) {
            None => true,
            Some(false) => false,
            Some(true) => {
                let (nodes, node) = (self.clone(), node.clone());
                tokio::spawn(async move {
                    let _ = nodes.call(&node, &redis::cmd("PING"), false).await;
                });
                false
            }
        }
    }

    /// The call's outcome says whether `node` is up: a timeout puts it down (a frozen or cut
    /// node: its next calls fail at once until a probe); a dropped connection only drops the
    /// connection (a killed client, a restart: the next call connects, and a node that refuses
    /// that is down); any reply, an error reply too, is the node answering.
    fn judge<T>(&self, node: &Arc<str>, (made, lane): (u64, usize), result: &RedisResult<T>) {
        match result {
            Err(e) if lost(e) => {
                if e.is_timeout() {
                    self.health.failed(node, Instant::now());
                }
                if let Some(entry) = self.entry(node, false) {
                    let mut con = lock(&entry.lanes[lane].con);
                    if con.as_ref().is_some_and(|(_, now)| *now == made) {
                        *con = None;
                    }
                }
            }
            _ => self.health.answered(node),
        }
    }

    /// Whether `node` is down and not due for a probe: its calls fail without being sent.
    /// (Asking makes the call that finds the probe due the probe.)
    fn is_down(&self, node: &str) -> bool {
        self.health.any_down() && !self.health.may_read(node, Instant::now(), true)
    }

    fn entry(&self, node: &Arc<str>, make: bool) -> Option<Arc<Node>> {
        let mut nodes = lock(&self.nodes);
        match nodes.get(node) {
            Some(entry) => Some(entry.clone()),
            None if make => Some(nodes.entry(node.clone()).or_default().clone()),
            None => None,
        }
    }

    /// A connection to `node` for a call (a `kept` write, or not: see `Node::open`), made now if
    /// its lane has none (by the `caller`'s deadline too), with when it was made then; fails at
    /// once, sending nothing, while the node is down and not due for its probe.
    async fn connection(
        &self,
        node: &Arc<str>,
        caller: Option<Deadline>,
        kept: bool,
    ) -> RedisResult<(Lease, Option<tokio::time::Instant>)> {
        if self.is_down(node) {
            return Err(not_sent(node));
        }
        let entry = self.entry(node, true).expect("made when missing");
        let first = if kept {
            entry.open.load(Ordering::Relaxed)
        } else {
            entry.next.fetch_add(1, Ordering::Relaxed)
        };
        let mut to_make = None;
        for step in 0..LANES {
            let at = (first + step) % LANES;
            match lock(&entry.lanes[at].con).as_ref() {
                Some((con, _)) if con.holding() => continue,
                Some((con, made)) => {
                    if kept && step > 0 {
                        entry.open.store(at, Ordering::Relaxed);
                    }
                    return Ok(((con.clone(), *made, at), None));
                }
                None => {
                    to_make = Some(at);
                    break;
                }
            }
        }
        let lane = match to_make {
            Some(lane) => lane,
            None if kept => entry.next.fetch_add(1, Ordering::Relaxed) % LANES,
            None => first % LANES,
        };
        // Every lane held (the call waits behind the one it goes to), or one to make.
        if let Some(lease) = entry.lanes[lane].lease(lane) {
            return Ok((lease, None));
        }
        // Boxed: connecting is rare, and its future (the socket's, the handshake's) would
        // otherwise be carried in every call's.
        let connecting = Box::pin(self.connect_lane(node, &entry, lane));
        let lease = match caller {
            Some(caller) => caller.bound(connecting).await,
            None => connecting.await,
        }?;
        Ok((lease, Some(tokio::time::Instant::now())))
    }

    /// The connection of `node`'s `lane`, made now unless another call made it meanwhile.
    async fn connect_lane(&self, node: &Arc<str>, entry: &Node, lane: usize) -> RedisResult<Lease> {
        let _connecting = entry.lanes[lane].connecting.lock().await;
        if let Some(lease) = entry.lanes[lane].lease(lane) {
            return Ok(lease);
        }
        let connected = within(self.settings.connect_timeout, self.connect(node)).await;
        match connected {
            Ok(con) => {
                let made = entry.made.fetch_add(1, Ordering::Relaxed) + 1;
                *lock(&entry.lanes[lane].con) = Some((con.clone(), made));
                Ok((con, made, lane))
            }
            Err(e) => {
                self.health.failed(node, Instant::now());
                // Nothing was sent: the library may retry without an attempt id's doubt.
                Err(refused(node, &e))
            }
        }
    }

    async fn connect(&self, node: &str) -> RedisResult<Pipelined> {
        let address = resolve(node).await?;
        let socket = if address.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        if let Some(source) = self.settings.source {
            socket.bind(SocketAddr::new(source, 0))?;
        }
        let stream = socket.connect(address).await?;
        stream.set_nodelay(true)?;
        let con = Pipelined::handshake(stream, &self.settings.redis, self.waits.clone()).await?;
        self.connects.fetch_add(1, Ordering::Relaxed);
        Ok(con)
    }
}

/// How long a command waits in the server on purpose: `WAIT`'s timeout, `BLOCK`'s.
fn blocking_time(cmd: &Cmd) -> Duration {
    let number = |at: usize| command_number(cmd, at).unwrap_or(0);
    let mut capitals = [0; NAME_ROOM];
    let name = command_name(cmd).map_or(&[][..], |name| capitalized(name, &mut capitals));
    let ms = match name {
        b"WAIT" => number(2),
        b"WAITAOF" => number(3),
        _ => command_args_iter(cmd)
            .position(|arg| arg.eq_ignore_ascii_case(b"BLOCK"))
            .map_or(0, |at| number(at + 1)),
    };
    Duration::from_millis(ms)
}

async fn resolve(node: &str) -> RedisResult<SocketAddr> {
    let mut addresses = tokio::net::lookup_host(node).await?;
    addresses.next().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, format!("{node}: no address")).into()
    })
}

/// Whether a call's failure says its connection is gone or its node did not answer in time.
pub(crate) fn lost(e: &redis::RedisError) -> bool {
    e.code().is_none()
        && (e.is_timeout()
            || e.is_io_error()
            || e.is_connection_dropped()
            || e.is_unrecoverable_error())
}

/// A call not sent: its node is down (refused, or not answering, lately).
fn not_sent(node: &str) -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        format!("{node} is down (it failed lately): not sent; next probe soon"),
    )
    .into()
}

/// A connect that failed, as a refusal: nothing was sent.
fn refused(node: &str, e: &redis::RedisError) -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        format!("{node}: could not connect: {e}"),
    )
    .into()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_on_purpose_are_added_to_the_bound() {
        let ms = |cmd: &mut Cmd| blocking_time(cmd).as_millis();
        assert_eq!(ms(redis::cmd("WAIT").arg(1).arg(2500)), 2500);
        assert_eq!(ms(redis::cmd("wait").arg(1).arg("x")), 0);
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP").arg("g").arg("c").arg("block").arg(700);
        assert_eq!(ms(read.arg("STREAMS").arg("k").arg(">")), 700);
        assert_eq!(ms(redis::cmd("SECKILL.TRY").arg("k").arg("u")), 0);
        assert_eq!(ms(&mut Cmd::new()), 0);
    }

    #[test]
    fn lost_connections_and_timeouts_are_told_from_error_replies() {
        let io = |kind| redis::RedisError::from(std::io::Error::new(kind, "x"));
        assert!(lost(&io(std::io::ErrorKind::TimedOut)));
        assert!(lost(&io(std::io::ErrorKind::ConnectionReset)));
        let reply = redis::make_extension_error("CLUSTERDOWN".to_string(), None);
        assert!(!lost(&reply), "a node that answers is up");
        assert!(not_sent("n:1").is_connection_refusal());
        assert!(!crate::retry::may_have_run(&not_sent("n:1")));
        let connect_failed = refused("n:1", &io(std::io::ErrorKind::TimedOut));
        assert!(!crate::retry::may_have_run(&connect_failed));
        assert!(crate::retry::is_retryable(&connect_failed));
    }
}
