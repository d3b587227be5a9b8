//! The async API, on tokio: the same types, names and replies as the sync one, for
//! `redis::aio::MultiplexedConnection`, `redis::aio::ConnectionManager` (which connects anew
//! after a server restart), [`ClusterSession`] (the crate's own path to a cluster or one server:
//! its slot map, a connection per node, every call bounded) and
//! `redis::cluster_async::ClusterConnection`. Each operation is the sync API's own code, driven
//! on the task: waits (a retry's backoff, the one-borrower-per-partition rule) are tokio waits,
//! so no call blocks the runtime; and each call is bounded by the sale's deadline with a tokio
//! timeout, whatever the connection does underneath.
//!
//! ```no_run
//! use seckill_client::aio::{FlashSale, Sale};
//! use seckill_client::{SaleSpec, TryReply};
//!
//! # async fn run() -> seckill_client::Result<()> {
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let con = client.get_multiplexed_async_connection().await?;
//! let sale = std::sync::Arc::new(Sale::create(&mut con.clone(), "sale:wine", &SaleSpec::new(100, 1)).await?);
//! let mut tasks = Vec::new();
//! for user in 0..1_000 {
//!     let (sale, mut con) = (sale.clone(), con.clone());
//!     tasks.push(tokio::spawn(async move { sale.try_buy(&mut con, format!("user:{user}"), 1).await }));
//! }
//! for task in tasks {
//!     if let Ok(Ok(TryReply::Bought { .. })) = task.await { /* ... */ }
//! }
//! # Ok(()) }
//! ```

pub use crate::lock::tokio::{Lock, LockGuard};
pub use crate::session::tokio::ClusterSession;

use crate::error::Result;
use crate::flash_sale::ClientStats;
use crate::info::{Buyer, PartitionInfo, SaleEvent, SaleInfo};
use crate::link::Tokio;
use crate::reply::TryReply;
use crate::retry::RetryPolicy;
use crate::spec::SaleSpec;
use redis::aio::ConnectionLike;
use std::future::Future;

/// [`crate::FlashSale`], async: what [`Sale`] and [`PartitionedSale`] both do.
pub trait FlashSale {
    /// See [`crate::FlashSale::try_buy`].
    fn try_buy<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
        qty: u64,
    ) -> impl Future<Output = Result<TryReply>> + Send;

    /// See [`crate::FlashSale::try_buy_again`].
    fn try_buy_again<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
        qty: u64,
        attempt_id: &str,
    ) -> impl Future<Output = Result<TryReply>> + Send;

    /// See [`crate::FlashSale::try_buy_acked`].
    fn try_buy_acked<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
        qty: u64,
        replicas: u64,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<(TryReply, u64)>> + Send;

    /// See [`crate::FlashSale::confirm`].
    fn confirm<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// See [`crate::FlashSale::cancel`].
    fn cancel<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
        qty: Option<u64>,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// See [`crate::FlashSale::restock`].
    fn restock<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        units: u64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// See [`crate::FlashSale::bought`].
    fn bought<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// See [`crate::FlashSale::join`].
    fn join<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
    ) -> impl Future<Output = Result<i64>> + Send;

    /// See [`crate::FlashSale::position`].
    fn position<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// See [`crate::FlashSale::leave`].
    fn leave<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// See [`crate::FlashSale::place`].
    fn place<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]> + Send,
    ) -> impl Future<Output = Result<Option<crate::Place>>> + Send;

    /// See [`crate::FlashSale::admit`].
    fn admit<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        n: u64,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// See [`crate::FlashSale::info`].
    fn info<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
    ) -> impl Future<Output = Result<SaleInfo>> + Send;

    /// See [`crate::FlashSale::buyers`].
    fn buyers<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
    ) -> impl Future<Output = Result<Vec<Buyer>>> + Send;

    /// See [`crate::FlashSale::create_group`].
    fn create_group<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        group: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// See [`crate::FlashSale::read_group`].
    fn read_group<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        group: &str,
        consumer: &str,
        count: usize,
    ) -> impl Future<Output = Result<Vec<SaleEvent>>> + Send;

    /// See [`crate::FlashSale::ack`].
    fn ack<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
        group: &str,
        event: &SaleEvent,
    ) -> impl Future<Output = Result<bool>> + Send;

    fn stats(&self) -> ClientStats;
}

/// [`FlashSale`] for an async sale type over its sync twin (field `.0`), whose operations are
/// written over a `Link`.
macro_rules! impl_async_flash_sale {
    ($sale:ty) => {
        impl FlashSale for $sale {
            async fn try_buy<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
                qty: u64,
            ) -> Result<TryReply> {
                Ok(self
                    .0
                    .buy_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                        qty,
                        (None, true),
                    )
                    .await?
                    .0)
            }

            async fn try_buy_again<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
                qty: u64,
                attempt_id: &str,
            ) -> Result<TryReply> {
                Ok(self
                    .0
                    .buy_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                        qty,
                        (Some(attempt_id), true),
                    )
                    .await?
                    .0)
            }

            async fn try_buy_acked<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
                qty: u64,
                replicas: u64,
                timeout_ms: u64,
            ) -> Result<(TryReply, u64)> {
                let wait = (replicas, timeout_ms);
                self.0
                    .try_buy_acked_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                        qty,
                        wait,
                    )
                    .await
            }

            async fn confirm<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
            ) -> Result<bool> {
                crate::observe::observed(
                    "confirm",
                    self.0.confirm_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                    ),
                )
                .await
            }

            async fn cancel<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
                qty: Option<u64>,
            ) -> Result<u64> {
                crate::observe::observed(
                    "cancel",
                    self.0.cancel_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                        qty,
                    ),
                )
                .await
            }

            async fn restock<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                units: u64,
            ) -> Result<()> {
                crate::observe::observed(
                    "restock",
                    self.0.restock_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        units,
                    ),
                )
                .await
            }

            async fn bought<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
            ) -> Result<u64> {
                crate::observe::observed(
                    "bought",
                    self.0.bought_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                    ),
                )
                .await
            }

            async fn join<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
            ) -> Result<i64> {
                crate::observe::observed(
                    "join",
                    self.0.join_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                    ),
                )
                .await
            }

            async fn position<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
            ) -> Result<Option<i64>> {
                crate::observe::observed(
                    "position",
                    self.0.position_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                    ),
                )
                .await
            }

            async fn leave<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
            ) -> Result<bool> {
                crate::observe::observed(
                    "leave",
                    self.0.leave_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                    ),
                )
                .await
            }

            async fn place<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]> + Send,
            ) -> Result<Option<crate::Place>> {
                crate::observe::observed(
                    "place",
                    self.0.place_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        user.as_ref(),
                    ),
                )
                .await
            }

            async fn admit<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                n: u64,
            ) -> Result<u64> {
                crate::observe::observed(
                    "admit",
                    self.0
                        .admit_on(&mut Tokio::within(con, self.0.retry_policy().deadline), n),
                )
                .await
            }

            async fn info<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
            ) -> Result<SaleInfo> {
                crate::observe::observed(
                    "info",
                    self.0
                        .info_on(&mut Tokio::within(con, self.0.retry_policy().deadline)),
                )
                .await
            }

            async fn buyers<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
            ) -> Result<Vec<Buyer>> {
                self.0
                    .buyers_on(&mut Tokio::within(con, self.0.retry_policy().deadline))
                    .await
            }

            async fn create_group<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                group: &str,
            ) -> Result<()> {
                self.0
                    .create_group_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        group,
                    )
                    .await
            }

            async fn read_group<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                group: &str,
                consumer: &str,
                count: usize,
            ) -> Result<Vec<SaleEvent>> {
                let reader = (group, consumer, count);
                self.0
                    .read_group_on(
                        &mut Tokio::within(con, self.0.retry_policy().deadline),
                        reader,
                    )
                    .await
            }

            async fn ack<C: ConnectionLike + Send + 'static>(
                &self,
                con: &mut C,
                group: &str,
                event: &SaleEvent,
            ) -> Result<bool> {
                crate::key::ack(
                    &mut Tokio::within(con, self.0.retry_policy().deadline),
                    group,
                    event,
                )
                .await
            }

            fn stats(&self) -> ClientStats {
                let mut stats = self.0.counters().snapshot();
                stats.invalidations = self.0.cached().map_or(0, |c| c.invalidations());
                stats
            }
        }
    };
}

/// The settings an async handle passes to its sync twin, the same for both twins.
macro_rules! impl_handle_settings {
    ($twin:ident) => {
        impl $twin {
            #[doc = concat!("See [`crate::", stringify!($twin), "::with_local_cache`].")]
            pub fn with_local_cache(self, cache: &crate::SoldOutCache) -> $twin {
                $twin(self.0.with_local_cache(cache))
            }

            #[doc = concat!("See [`crate::", stringify!($twin), "::with_retry`].")]
            pub fn with_retry(self, policy: RetryPolicy) -> $twin {
                $twin(self.0.with_retry(policy))
            }

            #[doc = concat!("See [`crate::", stringify!($twin), "::durability`]. On a ")]
            /// [`ClusterSession`] the concurrent writes to one master share their `WAIT`s.
            pub fn durability(self, durability: crate::Durability) -> $twin {
                $twin(self.0.durability(durability))
            }

            #[doc = concat!("See [`crate::", stringify!($twin), "::read_from_replicas`].")]
            pub fn read_from_replicas(self, read_from_replicas: bool) -> $twin {
                $twin(self.0.read_from_replicas(read_from_replicas))
            }

            #[doc = concat!("See [`crate::", stringify!($twin), "::ack_timeout`].")]
            pub fn ack_timeout(self, timeout: std::time::Duration) -> $twin {
                $twin(self.0.ack_timeout(timeout))
            }

            #[doc = concat!("See [`crate::", stringify!($twin), "::update_ms`].")]
            pub fn update_ms(self, update_ms: u64) -> $twin {
                $twin(self.0.update_ms(update_ms))
            }
        }
    };
}

/// [`crate::Sale`], async.
pub struct Sale(crate::Sale);

impl Sale {
    /// See [`crate::Sale::new`].
    pub fn new(key: impl Into<String>) -> Sale {
        Sale(crate::Sale::new(key))
    }

    /// See [`crate::Sale::open`].
    pub async fn open<C: ConnectionLike + Send + 'static>(con: &mut C, key: &str) -> Result<Sale> {
        Ok(Sale(crate::Sale::open_on(&mut Tokio::new(con), key).await?))
    }

    /// See [`crate::Sale::create`].
    pub async fn create<C: ConnectionLike + Send + 'static>(
        con: &mut C,
        key: &str,
        spec: &SaleSpec,
    ) -> Result<Sale> {
        Ok(Sale(
            crate::Sale::create_on(&mut Tokio::new(con), key, spec, false).await?,
        ))
    }

    /// See [`crate::Sale::replace`].
    pub async fn replace<C: ConnectionLike + Send + 'static>(
        con: &mut C,
        key: &str,
        spec: &SaleSpec,
    ) -> Result<Sale> {
        Ok(Sale(
            crate::Sale::create_on(&mut Tokio::new(con), key, spec, true).await?,
        ))
    }

    pub fn key(&self) -> &str {
        self.0.key()
    }

    /// See [`crate::Sale::wait_for_turn`]: a stream here, which owns `con` (the page's
    /// connection: its turns at reading the room are non-blocking `XREAD`s, so a shared
    /// multiplexed connection or a [`ClusterSession`] serves). Every call is bounded by the
    /// sale's deadline. Dropped before its turn, the stream leaves the room from a task of its
    /// own.
    pub fn wait_for_turn<'a, C: ConnectionLike + Send + 'static>(
        &'a self,
        con: C,
        user: impl AsRef<[u8]>,
        resync_ms: u64,
    ) -> impl futures_util::Stream<Item = Result<crate::Place>> + Send + 'a {
        let bound = self
            .0
            .retry_policy()
            .deadline
            .max(crate::retry::MIN_CALL_BOUND);
        let room = self.0.room();
        crate::waiting::stream(con, room, user.as_ref().to_vec(), resync_ms, bound)
    }

    /// See [`crate::Sale::delete`].
    pub async fn delete<C: ConnectionLike + Send + 'static>(&self, con: &mut C) -> Result<()> {
        self.0
            .delete_on(&mut Tokio::within(con, self.0.retry_policy().deadline))
            .await
    }
}

impl_async_flash_sale!(Sale);
impl_handle_settings!(Sale);

/// [`crate::PartitionedSale`], async.
pub struct PartitionedSale(crate::PartitionedSale);

impl PartitionedSale {
    /// See [`crate::PartitionedSale::create`].
    pub async fn create<C: ConnectionLike + Send + 'static>(
        con: &mut C,
        name: &str,
        spec: &SaleSpec,
    ) -> Result<PartitionedSale> {
        let link = &mut Tokio::new(con);
        Ok(PartitionedSale(
            crate::PartitionedSale::create_on(link, name, spec, false).await?,
        ))
    }

    /// See [`crate::PartitionedSale::replace`].
    pub async fn replace<C: ConnectionLike + Send + 'static>(
        con: &mut C,
        name: &str,
        spec: &SaleSpec,
    ) -> Result<PartitionedSale> {
        let link = &mut Tokio::new(con);
        Ok(PartitionedSale(
            crate::PartitionedSale::create_on(link, name, spec, true).await?,
        ))
    }

    /// See [`crate::PartitionedSale::open`].
    pub async fn open<C: ConnectionLike + Send + 'static>(
        con: &mut C,
        name: &str,
    ) -> Result<PartitionedSale> {
        let link = &mut Tokio::new(con);
        Ok(PartitionedSale(
            crate::PartitionedSale::open_on(link, name).await?,
        ))
    }

    /// See [`crate::PartitionedSale::delete`].
    pub async fn delete<C: ConnectionLike + Send + 'static>(con: &mut C, name: &str) -> Result<()> {
        crate::PartitionedSale::delete_on(&mut Tokio::new(con), name).await
    }

    /// See [`crate::PartitionedSale::with_seal_ms`].
    pub fn with_seal_ms(self, ms: u64) -> PartitionedSale {
        PartitionedSale(self.0.with_seal_ms(ms))
    }

    pub fn name(&self) -> &str {
        self.0.name()
    }

    pub fn spec(&self) -> &SaleSpec {
        self.0.spec()
    }

    /// See [`crate::PartitionedSale::partition_keys`].
    pub fn partition_keys(&self) -> &[String] {
        self.0.partition_keys()
    }

    /// See [`crate::PartitionedSale::event_streams`].
    pub fn event_streams(&self) -> Vec<String> {
        self.0.event_streams()
    }

    /// See [`crate::PartitionedSale::partition_of`].
    pub fn partition_of(&self, user: &[u8]) -> u32 {
        self.0.partition_of(user)
    }

    /// See [`crate::PartitionedSale::wait_for_turn`] and [`Sale::wait_for_turn`]: a stream
    /// that owns `con`, under the same rules.
    pub fn wait_for_turn<'a, C: ConnectionLike + Send + 'static>(
        &'a self,
        con: C,
        user: impl AsRef<[u8]>,
        resync_ms: u64,
    ) -> impl futures_util::Stream<Item = Result<crate::Place>> + Send + 'a {
        let bound = self
            .0
            .retry_policy()
            .deadline
            .max(crate::retry::MIN_CALL_BOUND);
        let room = crate::waiting::Room::Partitioned(&self.0);
        crate::waiting::stream(con, room, user.as_ref().to_vec(), resync_ms, bound)
    }

    /// See [`crate::PartitionedSale::recover`].
    pub async fn recover<C: ConnectionLike + Send + 'static>(&self, con: &mut C) -> Result<u64> {
        self.0
            .recover_on(&mut Tokio::within(con, self.0.retry_policy().deadline))
            .await
    }

    /// See [`crate::PartitionedSale::partition_infos`].
    pub async fn partition_infos<C: ConnectionLike + Send + 'static>(
        &self,
        con: &mut C,
    ) -> Result<Vec<PartitionInfo>> {
        self.0
            .partition_infos_on(&mut Tokio::within(con, self.0.retry_policy().deadline))
            .await
    }
}

impl_async_flash_sale!(PartitionedSale);
impl_handle_settings!(PartitionedSale);
