//! The lock's own connections ([`NodeLink`]s): a sync one with a read timeout per call, and a
//! tokio one with a timeout around each call. Both go to the node the lock was given and
//! follow MOVED to the master that serves the key; after a failed connection they start again
//! from the given node (which answers MOVED once the cluster has a new master).

use super::ops::NodeLink;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, Pipeline, RedisResult, Value};
use std::future::{Future, ready};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the lock's calls go: the node it was given, or the one a MOVED named.
#[derive(Clone)]
pub(crate) struct Target {
    seed: Client,
    current: Client,
}

impl Target {
    pub fn new(seed: Client) -> Target {
        Target {
            current: seed.clone(),
            seed,
        }
    }

    fn follow(&mut self, e: &redis::RedisError) {
        if let Some((host, port)) = crate::routing::redirect(e) {
            let info = self
                .seed
                .get_connection_info()
                .clone()
                .set_addr(ConnectionAddr::Tcp(host, port));
            if let Ok(moved) = Client::open(info) {
                self.current = moved;
            }
        } else if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() {
            self.current = self.seed.clone();
        }
    }
}

/// A sync connection; `pause` waits on `stop` (the guard's release) when it has one.
pub(crate) struct BlockingNode {
    target: Target,
    con: Option<redis::Connection>,
    pub stop: Option<Receiver<()>>,
}

impl BlockingNode {
    pub fn new(target: Target) -> BlockingNode {
        BlockingNode {
            target,
            con: None,
            stop: None,
        }
    }

    fn call_now(&mut self, pipe: &Pipeline, timeout: Duration) -> RedisResult<Vec<Value>> {
        let result = (|| {
            if self.con.is_none() {
                self.con = Some(
                    self.target
                        .current
                        .get_connection_with_timeout(CONNECT_TIMEOUT)?,
                );
            }
            let con = self.con.as_mut().expect("connected just above");
            con.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
            pipe.query::<Vec<Value>>(con)
        })();
        if let Err(e) = &result {
            self.con = None;
            self.target.follow(e);
        }
        result
    }
}

impl NodeLink for BlockingNode {
    fn call(
        &mut self,
        pipe: &Pipeline,
        timeout: Duration,
    ) -> impl Future<Output = RedisResult<Vec<Value>>> + Send {
        ready(self.call_now(pipe, timeout))
    }

    fn pause(&mut self, wait: Duration) -> impl Future<Output = bool> + Send {
        let stopped = match &self.stop {
            Some(stop) => !matches!(stop.recv_timeout(wait), Err(RecvTimeoutError::Timeout)),
            None => {
                std::thread::sleep(wait);
                false
            }
        };
        ready(stopped)
    }
}

/// A multiplexed tokio connection of the lock's own (a grant's `WAIT` blocks its connection
/// in the server, so it is never an application's).
pub(crate) struct TokioNode {
    target: Target,
    con: Option<redis::aio::MultiplexedConnection>,
}

impl TokioNode {
    pub fn new(target: Target) -> TokioNode {
        TokioNode { target, con: None }
    }
}

impl NodeLink for TokioNode {
    async fn call(&mut self, pipe: &Pipeline, timeout: Duration) -> RedisResult<Vec<Value>> {
        let result = async {
            if self.con.is_none() {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(None);
                let con = self
                    .target
                    .current
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                self.con = Some(con);
            }
            let con = self.con.as_mut().expect("connected just above");
            crate::link::within(timeout, pipe.query_async::<Vec<Value>>(con)).await
        }
        .await;
        if let Err(e) = &result {
            self.con = None;
            self.target.follow(e);
        }
        result
    }

    async fn pause(&mut self, wait: Duration) -> bool {
        tokio::time::sleep(wait).await;
        false
    }
}
