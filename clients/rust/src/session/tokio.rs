//! [`ClusterSession`] on tokio (`crate::aio::ClusterSession`): two `cluster_async` connections
//! made from the application's settings, one as configured for every other call and one with
//! `retries(0)` for purchases, each shared by every clone of the session and made anew after a
//! failure that may have spoiled it (the async cluster connection kept sending to a SIGKILLed
//! master after its replica's promotion: see docs/clients.md, "Known limits").

use super::{MAX_REDIRECTS, asked_node, is_purchase, name_of, spoils};
use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One cluster connection shared by the clones of a session. After a failure that spoiled it,
/// the first task to see the failure forgets it and the next call makes a new one (one task
/// connects, the others wait for it); a failure of an older connection forgets nothing.
struct Shared {
    client: ClusterClient,
    current: ::tokio::sync::Mutex<Current>,
    reconnects: AtomicU64,
}

struct Current {
    generation: u64,
    connection: Option<ClusterConnection>,
}

impl Shared {
    async fn connect(client: ClusterClient) -> RedisResult<Arc<Shared>> {
        let connection = client.get_async_connection().await?;
        Ok(Arc::new(Shared {
            client,
            current: ::tokio::sync::Mutex::new(Current {
                generation: 0,
                connection: Some(connection),
            }),
            reconnects: AtomicU64::new(0),
        }))
    }

    async fn connection(&self) -> RedisResult<(u64, ClusterConnection)> {
        let mut current = self.current.lock().await;
        if current.connection.is_none() {
            current.connection = Some(self.client.get_async_connection().await?);
            self.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        let connection = current.connection.clone().expect("made just above");
        Ok((current.generation, connection))
    }

    async fn after<T>(&self, generation: u64, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &result
            && spoils(e)
        {
            let mut current = self.current.lock().await;
            if current.generation == generation {
                current.connection = None;
                current.generation += 1;
            }
        }
        result
    }

    async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (generation, mut con) = self.connection().await?;
        let result = con.req_packed_command(cmd).await;
        self.after(generation, result).await
    }

    async fn send_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (generation, mut con) = self.connection().await?;
        let result = con.req_packed_commands(pipeline, offset, count).await;
        self.after(generation, result).await
    }

    /// `ASKING` and `cmd` on the node an ASK named, as one pipeline, so that no other task's
    /// command comes between them on that node's connection.
    async fn send_asking(&self, cmd: &Cmd, ask: &redis::RedisError) -> Option<RedisResult<Value>> {
        let node = asked_node(ask)?;
        let mut pipeline = redis::pipe();
        pipeline.cmd("ASKING").add_command(cmd.clone());
        let (generation, mut con) = match self.connection().await {
            Ok(connection) => connection,
            Err(e) => return Some(Err(e)),
        };
        let result = con
            .route_pipeline(pipeline, 0, 2, node)
            .await
            .and_then(|mut replies| match replies.pop() {
                Some(reply) => reply.extract_error(),
                None => Ok(Value::Nil),
            });
        Some(self.after(generation, result).await)
    }
}

/// See [`super::ClusterSession`]: the same on `cluster_async`. Clone it per task; the clones
/// share the two connections.
#[derive(Clone)]
pub struct ClusterSession {
    commands: Arc<Shared>,
    purchases: Arc<Shared>,
    /// Whether this clone's last command was a purchase: a `WAIT` goes where that one went.
    last_was_purchase: bool,
}

impl ClusterSession {
    /// `make` gives the builder of the application's cluster client; it is called twice.
    /// Connects both now, so that a wrong address fails here rather than at the first call.
    pub async fn cluster(make: impl Fn() -> ClusterClientBuilder) -> RedisResult<ClusterSession> {
        let commands = make().build()?;
        let purchases = make().retries(0).build()?;
        Ok(ClusterSession {
            commands: Shared::connect(commands).await?,
            purchases: Shared::connect(purchases).await?,
            last_was_purchase: false,
        })
    }

    /// How many times a connection was made anew.
    pub fn reconnects(&self) -> u64 {
        self.commands.reconnects.load(Ordering::Relaxed)
            + self.purchases.reconnects.load(Ordering::Relaxed)
    }

    async fn purchase(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut result = self.purchases.send(cmd).await;
        for _ in 0..MAX_REDIRECTS {
            let Err(e) = &result else { break };
            result = match e.code() {
                // The connection that answered MOVED was forgotten: the next one learns the
                // slot map.
                Some("MOVED") => self.purchases.send(cmd).await,
                Some("ASK") => match self.purchases.send_asking(cmd, e).await {
                    Some(result) => result,
                    None => break,
                },
                _ => break,
            };
        }
        result
    }
}

impl ConnectionLike for ClusterSession {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let name = name_of(cmd);
            if is_purchase(name) {
                self.last_was_purchase = true;
                return self.purchase(cmd).await;
            }
            let after_purchase = std::mem::take(&mut self.last_was_purchase);
            if after_purchase && name.eq_ignore_ascii_case(b"WAIT") {
                return self.purchases.send(cmd).await;
            }
            self.commands.send(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.last_was_purchase = false;
        Box::pin(self.commands.send_pipeline(pipeline, offset, count))
    }

    fn get_db(&self) -> i64 {
        0
    }
}
