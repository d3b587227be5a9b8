//! [`ClusterSession`] on tokio (`crate::aio::ClusterSession`): two `cluster_async` connections
//! made from the application's settings, one as configured for every other call and one with
//! `retries(0)` for purchases. A `cluster_async` connection finds a promoted replica by itself
//! (a SIGKILLed master was followed in the kill test with no new connection), so unlike the
//! sync session this one never connects anew.

use super::{MAX_REDIRECTS, Route, name_of, redirected_node, route};
use redis::aio::ConnectionLike;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// See [`super::ClusterSession`]: the same on `cluster_async`, following a redirect of a
/// purchase by sending it to the node named (MOVED: the connection relearns its slot map
/// meanwhile). Clone it per task: the clones share the two connections. A purchase's `WAIT`
/// (`try_buy_acked`) holds its connection in the server, so tasks that ask for one wait for
/// each other's: give each such task a session of its own.
#[derive(Clone)]
pub struct ClusterSession {
    commands: ClusterConnection,
    purchases: ClusterConnection,
    /// Whether this clone's last command was a purchase: a `WAIT` goes where that one went.
    last_was_purchase: bool,
}

impl ClusterSession {
    /// `make` gives the builder of the application's cluster client; it is called twice.
    /// Connects both now, so that a wrong address fails here rather than at the first call.
    pub async fn cluster(make: impl Fn() -> ClusterClientBuilder) -> RedisResult<ClusterSession> {
        let commands = make().build()?.get_async_connection().await?;
        let purchases = make().retries(0).build()?.get_async_connection().await?;
        Ok(ClusterSession {
            commands,
            purchases,
            last_was_purchase: false,
        })
    }

    async fn purchase(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let mut result = self.purchases.req_packed_command(cmd).await;
        for _ in 0..MAX_REDIRECTS {
            let Err(e) = &result else { break };
            result = match e.code() {
                Some("MOVED") => match redirected_node(e) {
                    Some(node) => {
                        let node = RoutingInfo::SingleNode(node);
                        self.purchases.route_command(cmd.clone(), node).await
                    }
                    None => break,
                },
                Some("ASK") => match redirected_node(e) {
                    Some(node) => self.send_asking(cmd, node).await,
                    None => break,
                },
                _ => break,
            };
        }
        result
    }

    /// `ASKING` and `cmd` on `node` as one pipeline, so that no other task's command comes
    /// between them on that node's connection.
    async fn send_asking(&mut self, cmd: &Cmd, node: SingleNodeRoutingInfo) -> RedisResult<Value> {
        let mut pipeline = redis::pipe();
        pipeline.cmd("ASKING").add_command(cmd.clone());
        let mut replies = self.purchases.route_pipeline(pipeline, 0, 2, node).await?;
        replies.pop().unwrap_or(Value::Nil).extract_error()
    }
}

impl ConnectionLike for ClusterSession {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match route(name_of(cmd), &mut self.last_was_purchase) {
                Route::Purchase => self.purchase(cmd).await,
                Route::AfterPurchase => self.purchases.req_packed_command(cmd).await,
                Route::Commands => self.commands.req_packed_command(cmd).await,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.last_was_purchase = false;
        self.commands.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        0
    }
}
