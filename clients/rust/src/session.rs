//! A sync connection that makes itself anew after a failure, for the retries of attempt ids.
//! A sync `redis::Connection` whose read timed out still has the late reply in its socket,
//! which the next command would read as its own; a sync `ClusterConnection` whose master was
//! killed (SIGKILL, not a graceful failover) can keep answering "connection refused" after the
//! replica's promotion. A [`Session`] drops its connection after any failure that
//! [`crate::is_retryable`] retries and connects again for the next call, so an application
//! never has to. Pass it wherever a `ConnectionLike` goes.

use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{Client, Cmd, Connection, ConnectionLike, RedisResult, Value};
use std::time::Duration;

type Connect<C> = Box<dyn FnMut() -> RedisResult<C> + Send>;

pub struct Session<C> {
    connect: Connect<C>,
    connection: Option<C>,
    reconnects: u64,
}

/// A [`Session`] over a Redis Cluster.
pub type ClusterSession = Session<ClusterConnection>;

impl Session<ClusterConnection> {
    /// Connects now, so that a wrong address fails here rather than at the first call.
    pub fn cluster(client: ClusterClient) -> RedisResult<ClusterSession> {
        Session::new(Box::new(move || client.get_connection()))
    }
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

    fn connection(&mut self) -> RedisResult<&mut C> {
        if self.connection.is_none() {
            self.connection = Some((self.connect)()?);
            self.reconnects += 1;
        }
        Ok(self.connection.as_mut().expect("just made"))
    }

    /// Forgets the connection after a failure that may have left it unusable.
    fn after<T>(&mut self, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &result
            && crate::retry::is_retryable(e)
        {
            self.connection = None;
        }
        result
    }
}

impl<C: ConnectionLike> ConnectionLike for Session<C> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let result = self
            .connection()
            .and_then(|con| con.req_packed_command(cmd));
        self.after(result)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let result = self
            .connection()
            .and_then(|con| con.req_packed_commands(cmd, offset, count));
        self.after(result)
    }

    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let result = self.connection().and_then(|con| con.req_command(cmd));
        self.after(result)
    }

    fn get_db(&self) -> i64 {
        self.connection.as_ref().map_or(0, ConnectionLike::get_db)
    }

    fn check_connection(&mut self) -> bool {
        self.connection().is_ok_and(|con| con.check_connection())
    }

    fn is_open(&self) -> bool {
        self.connection.as_ref().is_some_and(|con| con.is_open())
    }
}
