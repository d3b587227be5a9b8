//! # seckill-client
//!
//! Flash sales on the `seckill` module, sync and async (tokio: [`aio`]), with the same names
//! and replies. A [`Sale`] is one `SECKILL.INIT` key; a [`PartitionedSale`] spreads one sale
//! over a Redis Cluster; both answer the [`FlashSale`] calls (bring the trait into scope:
//! `use seckill_client::FlashSale`, or `seckill_client::aio::FlashSale` for the async types).
//! `create` and `open` check the server's module version ([`MIN_MODULE_VERSION`]).
//!
//! A partitioned sale of
//! `stock` units is P ordinary seckill sale keys (`{name/0}` .. `{name/P-1}`, each its own hash
//! tag, so Redis Cluster spreads them over its masters and moves them when it reshards) and a
//! manifest hash `name`. A user always buys in the partition given by a hash of the user id
//! ([`partition_of`]), so LIMIT and dedup stay exact. When a buyer's partition runs dry the
//! client borrows units from the others with escrow transfers (`SECKILL.LEND` / `ABSORB` /
//! `SETTLE`), so the sale sells out completely; once nothing is left anywhere, the partition is
//! sealed and every later buyer there is refused in one round trip.
//!
//! Works on any `redis::ConnectionLike`: a [`ClusterSession`] (cluster connections that
//! connect anew after a node failed, so a killed master is followed, and never resend a
//! purchase behind the library's back), a `redis::cluster::ClusterConnection` (MOVED and ASK
//! are its job; its own retries resend purchases too, outside [`RetryPolicy`]), or a plain
//! `redis::Connection` to one server ([`Session::server`] with a timeout).
//!
//! Every purchase and cancel carries a fresh attempt id and is sent again under it when its
//! answer is lost (a timeout, a dropped connection, a failover), within a [`RetryPolicy`]: it
//! is never made twice. Past the deadline the caller gets [`Error::OutcomeUnknown`] with the
//! attempt id, and can ask `bought`, or [`Error::Unavailable`] when no send of it may have run
//! (it did not happen).
//!
//! ```no_run
//! use seckill_client::{ClusterSession, Error, FlashSale, PartitionedSale, RetryPolicy, SaleSpec, TryReply};
//! use std::time::Duration;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let nodes = vec!["redis://127.0.0.1:7000/"];
//!     let mut con = ClusterSession::cluster(|| redis::cluster::ClusterClient::builder(nodes.clone()))?;
//!     // 10 000 bottles over 16 partitions, at most 2 per user.
//!     let sale = PartitionedSale::create(&mut con, "sale:wine", &SaleSpec::new(10_000, 16).limit(2))?
//!         .with_retry(RetryPolicy { deadline: Duration::from_secs(5), ..RetryPolicy::default() });
//!     match sale.try_buy(&mut con, "user:42", 1) {
//!         Ok(TryReply::Bought { .. }) => println!("bought"),
//!         Ok(TryReply::SoldOut) => println!("sold out"),
//!         Ok(TryReply::OverLimit) => println!("two is the limit"),
//!         Ok(other) => println!("refused: {}", other.code()),
//!         // No answer within 5 s: it may or may not have happened; ask.
//!         Err(Error::OutcomeUnknown { attempt_id, .. }) => {
//!             println!("{attempt_id}: owns {}", sale.bought(&mut con, "user:42")?)
//!         }
//!         Err(e) => return Err(e.into()),
//!     }
//!     let info = sale.info(&mut con)?;
//!     println!("{} sold, {} left", info.sold, info.remaining);
//!     // Another process opens the same sale by name.
//!     let same = PartitionedSale::open(&mut con, "sale:wine")?;
//!     assert_eq!(same.bought(&mut con, "user:42")?, 1);
//!     Ok(())
//! }
//! ```

pub mod aio;
mod durability;
mod error;
mod flash_sale;
mod health;
mod info;
mod keeping;
mod key;
mod link;
mod lock;
mod observe;
mod partitioned;
pub mod protocol;
mod reply;
mod retry;
mod routing;
mod sale;
mod session;
mod spec;
mod tracking;
mod turns;
mod waiting;

pub use durability::Durability;
pub use error::{Error, Result};
pub use flash_sale::{ClientStats, FlashSale};
pub use info::{Buyer, PartitionInfo, Place, SaleEvent, SaleInfo};
pub use key::MAX_USER_BYTES;
pub use lock::{DEFAULT_REPLICA_TIMEOUT_MS, DEFAULT_TTL_MS, Lock, LockGuard, LockOptions};
#[cfg(feature = "metrics")]
pub use observe::describe_metrics;
pub use partitioned::{CREATE_CLAIM_MS, DEFAULT_SEAL_MS, PartitionedSale};
pub use protocol::{MAX_PARTITIONS, MIN_MODULE_VERSION};
pub use reply::TryReply;
pub use retry::{RetryPolicy, is_retryable, may_have_run};
pub use routing::partition_of;
pub use sale::Sale;
pub use session::{ClusterSession, Session};
pub use spec::{QueueSpec, SaleSpec};
pub use tracking::SoldOutCache;
pub use waiting::{DEFAULT_RESYNC_MS, Turns};
