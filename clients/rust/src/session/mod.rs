//! Sync connections that make themselves anew after a failure, for the retries of attempt ids.
//! A sync `redis::Connection` whose read timed out still has the late reply in its socket,
//! which the next command would read as its own; a sync `ClusterConnection` whose master was
//! killed (SIGKILL, not a graceful failover) can keep answering "connection refused" after the
//! replica's promotion. A [`Session`] drops its connection after any failure that
//! [`crate::is_retryable`] retries and connects again for the next call, so an application
//! never has to. A [`ClusterSession`] is two of them over a cluster, so that purchases are
//! never resent behind the library's back; [`tokio::ClusterSession`] (as
//! `crate::aio::ClusterSession`) is the crate's own async cluster path, not redis-rs's
//! `cluster_async`. Pass them wherever a `ConnectionLike` goes.

mod nodes;
mod pipelined;
mod slot_map;
pub(crate) mod tokio;

use crate::routing::{command_key, key_slot};
use redis::cluster::{ClusterClientBuilder, ClusterConnection};
use redis::cluster_routing::{self, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, Cmd, Connection, ConnectionLike, RedisResult, Value};
use std::time::Duration;

type Connect<C> = Box<dyn FnMut() -> RedisResult<C> + Send>;

pub struct Session<C> {
    connect: Connect<C>,
    connection: Option<C>,
    reconnects: u64,
}

impl Session<Connection> {
    /// A session on one server, each connection with `timeout` for reads and writes (`None`:
    /// none), so a server that stops answering fails the call instead of hanging it.
    pub fn server(client: Client, timeout: Option<Duration>) -> RedisResult<Session<Connection>> {
        Session::new(Box::new(move || {
            let con = match timeout {
                Some(timeout) => client.get_connection_with_timeout(timeout)?,
                None => client.get_connection()?,
            };
            con.set_read_timeout(timeout)?;
            con.set_write_timeout(timeout)?;
            Ok(con)
        }))
    }
}

impl<C: ConnectionLike> Session<C> {
    /// A session whose connections `connect` makes; the first one now.
    pub fn new(mut connect: Connect<C>) -> RedisResult<Session<C>> {
        let connection = connect()?;
        Ok(Session {
            connect,
            connection: Some(connection),
            reconnects: 0,
        })
    }

    /// How many times the connection was made anew.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// `call` on the connection (made anew first if the last one failed); forgets the
    /// connection after a failure that may have left it unusable.
    fn with<T>(&mut self, call: impl FnOnce(&mut C) -> RedisResult<T>) -> RedisResult<T> {
        if self.connection.is_none() {
            self.connection = Some((self.connect)()?);
            self.reconnects += 1;
        }
        let result = call(self.connection.as_mut().expect("made just above"));
        if let Err(e) = &result
            && spoils(e)
        {
            self.connection = None;
        }
        result
    }
}

impl<C: ConnectionLike> ConnectionLike for Session<C> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.with(|con| con.req_packed_command(cmd))
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.with(|con| con.req_packed_commands(cmd, offset, count))
    }

    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.with(|con| con.req_command(cmd))
    }

    fn get_db(&self) -> i64 {
        self.connection.as_ref().map_or(0, ConnectionLike::get_db)
    }

    fn check_connection(&mut self) -> bool {
        self.with(|con| Ok(con.check_connection())).unwrap_or(false)
    }

    fn is_open(&self) -> bool {
        self.connection.as_ref().is_some_and(|con| con.is_open())
    }
}

/// A Redis Cluster for the sync API: two [`Session`]s over cluster connections made from the
/// same settings. redis-rs's cluster connection resends a command whose answer was lost by
/// itself, in the loop that follows redirects, outside any deadline of the library's (a
/// purchase allowed no retry, through a master busy 500 ms past a 100 ms response timeout, was
/// sent 5 times: `tests/cluster.rs`, with `retries(0)` taken out). So purchases and cancels
/// (`SECKILL.TRY`, `SECKILL.CANCEL`) go on the second connection, made with `retries(0)`:
/// only the library resends them, under their attempt id and within its
/// [`crate::RetryPolicy`]. What keeps a write (`INFO replication`, `WAIT`, `WAITAOF` right
/// after it) goes to that write's master on that write's connection. A redirect ran nothing,
/// and the session follows it there itself: MOVED by connecting anew (the new connection
/// learns the slot map), ASK with `ASKING` and the command on the node it names. Every other
/// command goes on the first connection, with the retries its settings give it.
pub struct ClusterSession {
    commands: Session<ClusterConnection>,
    purchases: Session<ClusterConnection>,
    /// Where the last command with a key went (see [`Route::FollowUp`]).
    last_write: Option<(Side, u16)>,
}

/// Which of a [`ClusterSession`]'s two connections a command goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Commands,
    Purchases,
}

/// Redirects followed for one send of a purchase; past them the redirect is the library's
/// to retry, with backoff (a slot still moving, or a slot map the nodes do not yet agree on).
const MAX_REDIRECTS: usize = 5;

impl ClusterSession {
    /// `make` gives the builder of the application's cluster client (addresses, credentials,
    /// timeouts, and the retries of the calls that are not purchases); it is called twice.
    /// Connects both now, so that a wrong address fails here rather than at the first call.
    pub fn cluster(make: impl Fn() -> ClusterClientBuilder) -> RedisResult<ClusterSession> {
        let commands = make().build()?;
        let purchases = make().retries(0).build()?;
        Ok(ClusterSession {
            commands: Session::new(Box::new(move || commands.get_connection()))?,
            purchases: Session::new(Box::new(move || purchases.get_connection()))?,
            last_write: None,
        })
    }

    /// How many times a connection was made anew.
    pub fn reconnects(&self) -> u64 {
        self.commands.reconnects() + self.purchases.reconnects()
    }

    fn purchase(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let mut result = self.purchases.req_command(cmd);
        for _ in 0..MAX_REDIRECTS {
            let Err(e) = &result else { break };
            result = match e.code() {
                // The failed call dropped the connection: the next one learns the slot map.
                Some("MOVED") => self.purchases.req_command(cmd),
                Some("ASK") => match redirected_node(e) {
                    Some(node) => self.purchases.with(|con| {
                        let node = RoutingInfo::SingleNode(node);
                        con.route_command(&redis::cmd("ASKING"), node.clone())?;
                        con.route_command(cmd, node)
                    }),
                    None => break,
                },
                _ => break,
            };
        }
        result
    }
}

/// Whether a failure may have left the connection unusable (a late reply in its socket, a
/// node gone, a stale slot map): any that [`crate::is_retryable`] retries but an ASK, which
/// redirects one command while a slot moves and leaves the connection as good as before.
fn spoils(e: &redis::RedisError) -> bool {
    crate::retry::is_retryable(e) && e.code() != Some("ASK")
}

/// The node a MOVED or an ASK names, as a route.
fn redirected_node(e: &redis::RedisError) -> Option<SingleNodeRoutingInfo> {
    let (host, port) = crate::routing::redirect(e)?;
    Some(SingleNodeRoutingInfo::ByAddress { host, port })
}

/// Where a cluster session sends a command.
#[derive(Debug, PartialEq)]
enum Route {
    /// `SECKILL.TRY` or `SECKILL.CANCEL`: on the purchase connection, redirects followed.
    Purchase,
    /// What keeps the last write (`INFO replication`, `WAIT`, `WAITAOF`, see
    /// `crate::durability`): to that write's master on that write's connection, since WAIT
    /// counts the writes of its own connection.
    FollowUp(Side, u16),
    /// Anything else: on the connection configured as the application asked.
    Commands,
}

/// The route of `cmd`; `last_write` (the session's) becomes where a command with a key went,
/// and is kept through its follow-ups.
fn route(cmd: &Cmd, last_write: &mut Option<(Side, u16)>) -> Route {
    let name = name_of(cmd);
    if is_follow_up(name) {
        return match *last_write {
            Some((connection, slot)) => Route::FollowUp(connection, slot),
            None => Route::Commands,
        };
    }
    let connection = if is_purchase(name) {
        Side::Purchases
    } else {
        Side::Commands
    };
    *last_write = command_key(cmd).map(|key| (connection, key_slot(key)));
    match connection {
        Side::Purchases => Route::Purchase,
        Side::Commands => Route::Commands,
    }
}

/// Whether `name` keeps the write before it: it goes where that one went.
pub(super) fn is_follow_up(name: &[u8]) -> bool {
    is_wait(name) || name.eq_ignore_ascii_case(b"INFO")
}

/// A `WAIT` or a `WAITAOF`: it counts the writes of its own connection.
pub(super) fn is_wait(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"WAIT") || name.eq_ignore_ascii_case(b"WAITAOF")
}

fn is_purchase(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"SECKILL.TRY") || name.eq_ignore_ascii_case(b"SECKILL.CANCEL")
}

fn name_of(cmd: &Cmd) -> &[u8] {
    crate::routing::command_name(cmd).unwrap_or(b"")
}

/// A packed command (`*N\r\n$L\r\nname\r\n...`) as a [`Cmd`], when it parses as one.
fn unpacked(packed: &[u8]) -> Option<Cmd> {
    let Ok(Value::Array(args)) = redis::parse_redis_value(packed) else {
        return None;
    };
    let mut cmd = Cmd::new();
    for arg in args {
        match arg {
            Value::BulkString(bytes) => cmd.arg(bytes),
            _ => return None,
        };
    }
    Some(cmd)
}

impl ConnectionLike for ClusterSession {
    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match route(cmd, &mut self.last_write) {
            Route::Purchase => self.purchase(cmd),
            Route::FollowUp(connection, slot) => {
                let master = SingleNodeRoutingInfo::SpecificNode(cluster_routing::Route::new(
                    slot,
                    cluster_routing::SlotAddr::Master,
                ));
                let session = match connection {
                    Side::Purchases => &mut self.purchases,
                    Side::Commands => &mut self.commands,
                };
                session.with(|con| con.route_command(cmd, RoutingInfo::SingleNode(master)))
            }
            Route::Commands => self.commands.req_command(cmd),
        }
    }

    fn req_packed_command(&mut self, packed: &[u8]) -> RedisResult<Value> {
        match unpacked(packed) {
            Some(cmd) => self.req_command(&cmd),
            None => {
                self.last_write = None;
                self.commands.req_packed_command(packed)
            }
        }
    }

    fn req_packed_commands(
        &mut self,
        packed: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.last_write = None;
        self.commands.req_packed_commands(packed, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.commands.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.commands.check_connection() && self.purchases.check_connection()
    }

    fn is_open(&self) -> bool {
        self.commands.is_open() && self.purchases.is_open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purchases_are_told_from_other_commands_by_name_in_either_form() {
        let mut try_buy = redis::cmd("seckill.try");
        try_buy.arg("{sale/0}").arg("u1").arg(1).arg("ID").arg("a1");
        assert!(is_purchase(name_of(&try_buy)));
        assert!(is_purchase(name_of(redis::cmd("SECKILL.CANCEL").arg("k"))));
        for other in ["SECKILL.BOUGHT", "SECKILL.TRYX", "WAIT", "GET"] {
            assert!(!is_purchase(name_of(&redis::cmd(other))), "{other}");
        }
        let mut last_write = None;
        let mut routes = |cmd: &Cmd| route(cmd, &mut last_write);
        let slot = key_slot(b"{sale/0}");
        assert_eq!(routes(redis::cmd("GET").arg("x")), Route::Commands);
        assert_eq!(routes(&redis::cmd("PING")), Route::Commands);
        assert_eq!(
            routes(&redis::cmd("WAIT")),
            Route::Commands,
            "no write before it"
        );
        assert_eq!(routes(&try_buy), Route::Purchase);
        let after_purchase = Route::FollowUp(Side::Purchases, slot);
        assert_eq!(
            routes(redis::cmd("info").arg("replication")),
            after_purchase
        );
        assert_eq!(
            routes(&redis::cmd("wait")),
            after_purchase,
            "kept through the look"
        );
        assert_eq!(routes(&redis::cmd("WAITAOF")), after_purchase);
        let confirm = redis::cmd("SECKILL.CONFIRM")
            .arg("{sale/0}")
            .arg("u")
            .clone();
        assert_eq!(routes(&confirm), Route::Commands);
        let after_confirm = Route::FollowUp(Side::Commands, slot);
        assert_eq!(routes(&redis::cmd("WAIT")), after_confirm);
        assert_eq!(routes(&redis::cmd("PING")), Route::Commands);
        assert_eq!(
            routes(&redis::cmd("WAIT")),
            Route::Commands,
            "not right after one"
        );
        let back = unpacked(&try_buy.get_packed_command()).expect("parses");
        assert_eq!(back.get_packed_command(), try_buy.get_packed_command());
        assert!(unpacked(b"+OK\r\n").is_none());
        assert!(unpacked(b"*1\r\n$3\r\nGE").is_none());
    }
}
