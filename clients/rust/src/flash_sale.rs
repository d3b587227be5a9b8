//! What a one-key [`crate::Sale`] and a [`crate::PartitionedSale`] both do, sync: the
//! [`FlashSale`] trait, and the counters both keep. (`crate::aio::FlashSale` is the async
//! twin, with the same names and replies.)

use crate::error::Result;
use crate::info::{Buyer, SaleEvent, SaleInfo};
use crate::observe;
use crate::reply::TryReply;
use crate::tracking::Cached;
use redis::ConnectionLike;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of what this client did, for tuning and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// `try_buy` calls.
    pub tries: u64,
    /// Of those, the ones whose partition was drained, so that they looked for stock elsewhere.
    pub borrowing_tries: u64,
    /// Transfers that moved units, and the units they moved.
    pub transfers: u64,
    pub units_moved: u64,
    /// Partitions this client sealed, and interrupted transfers it finished.
    pub seals: u64,
    pub recovered: u64,
    /// Purchases the sold-out cache refused with nothing sent (`with_local_cache`).
    pub local_refusals: u64,
    /// Invalidations Redis pushed for the sale's keys to the sold-out cache.
    pub invalidations: u64,
    /// Purchases refused as sold out while a partition could not be read (its master down).
    pub unreachable_refusals: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) tries: AtomicU64,
    pub(crate) borrowing_tries: AtomicU64,
    pub(crate) transfers: AtomicU64,
    pub(crate) units_moved: AtomicU64,
    pub(crate) seals: AtomicU64,
    pub(crate) recovered: AtomicU64,
    pub(crate) local_refusals: AtomicU64,
    pub(crate) unreachable_refusals: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> ClientStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ClientStats {
            tries: get(&self.tries),
            borrowing_tries: get(&self.borrowing_tries),
            transfers: get(&self.transfers),
            units_moved: get(&self.units_moved),
            seals: get(&self.seals),
            recovered: get(&self.recovered),
            local_refusals: get(&self.local_refusals),
            invalidations: 0,
            unreachable_refusals: get(&self.unreachable_refusals),
        }
    }
}

/// A purchase whose arguments were `checked`, through the sale's sold-out cache, if it has
/// one: refused with nothing sent while the sale is marked sold out (and, as nothing was sent,
/// with nothing to wait for: `(SoldOut, true)`, as a purchase sent again counts no replica);
/// else `server`, and a SOLD_OUT from it has the cache read the sale before the call returns.
/// Every purchase of both kinds of sale comes here, so here it is counted and timed
/// (`crate::observe`).
pub(crate) async fn through_cache(
    checked: Result<()>,
    cached: Option<&Cached>,
    counters: &Counters,
    server: impl Future<Output = Result<(TryReply, bool)>>,
) -> Result<(TryReply, bool)> {
    let observation = observe::Observation::start("try_buy");
    let outcome = match checked {
        Ok(()) => refused_or_sent(cached, counters, server).await,
        Err(error) => Err(error),
    };
    let label = match &outcome {
        Ok((_, Answer::FromCache)) => observe::LOCAL_REFUSAL,
        Ok((reply, _)) => observe::purchase_outcome(reply),
        Err(error) => observe::error_outcome(error),
    };
    observation.finish(label);
    outcome.map(|(reply, sent)| (reply, sent != Answer::FirstSend))
}

/// Where a purchase's answer came from: the sold-out cache, its first send, or a later one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    FromCache,
    FirstSend,
    Resend,
}

async fn refused_or_sent(
    cached: Option<&Cached>,
    counters: &Counters,
    server: impl Future<Output = Result<(TryReply, bool)>>,
) -> Result<(TryReply, Answer)> {
    if let Some(cached) = cached
        && cached.refuses()
    {
        counters.local_refusals.fetch_add(1, Ordering::Relaxed);
        return Ok((TryReply::SoldOut, Answer::FromCache));
    }
    let unreachable_before = counters.unreachable_refusals.load(Ordering::Relaxed);
    let (reply, retried) = server.await?;
    // A refusal while a partition could not be read proves nothing sold out (and the reads
    // would wait for that partition's master): no reading then.
    let unreachable = counters.unreachable_refusals.load(Ordering::Relaxed) != unreachable_before;
    if let (Some(cached), TryReply::SoldOut, false) = (cached, &reply, unreachable) {
        cached.learn().await;
    }
    Ok((
        reply,
        if retried {
            Answer::Resend
        } else {
            Answer::FirstSend
        },
    ))
}

/// A flash sale, one key or partitioned: generic code sells through either. Each call takes
/// the connection to use, so one handle serves many threads (`&self` everywhere).
pub trait FlashSale {
    /// Buys `qty` units for `user`: [`TryReply::Bought`] with the units left, or why not.
    ///
    /// The purchase carries a fresh attempt id: a call whose answer is lost (timeout, dropped
    /// connection, failover) is sent again with it until a definite answer, within the sale's
    /// [`crate::RetryPolicy`]; it is never bought twice. Past the deadline:
    /// [`crate::Error::OutcomeUnknown`]. A partitioned sale borrows units from its other
    /// partitions when the buyer's runs dry, so it sells out completely. With the handle's
    /// [`crate::Durability`] (a replica's acknowledgement unless set) the answer comes once the
    /// purchase is kept: [`crate::Error::NotReplicated`] when it was not in time.
    fn try_buy<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]>,
        qty: u64,
    ) -> Result<TryReply>;

    /// [`FlashSale::try_buy`] under `attempt_id`, the id of an earlier purchase whose outcome
    /// is unknown ([`crate::Error::OutcomeUnknown`], [`crate::Error::NotReplicated`]): it
    /// answers as that one did if it happened (never buying twice), and waits for the
    /// handle's durability again.
    fn try_buy_again<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]>,
        qty: u64,
        attempt_id: &str,
    ) -> Result<TryReply>;

    /// [`FlashSale::try_buy`], then `WAIT replicas timeout_ms` on the same connection: also
    /// replies how many replicas acknowledged the purchase (and every earlier write of this
    /// connection) before the timeout; 0 for a purchase that had to be sent again. A purchase
    /// acknowledged by a replica survives the failover to it (see docs/durability.md). On a
    /// cluster connection WAIT goes to every master and the fewest acknowledgements are
    /// replied.
    fn try_buy_acked<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]>,
        qty: u64,
        replicas: u64,
        timeout_ms: u64,
    ) -> Result<(TryReply, u64)>;

    /// Makes the user's held units final: `false` if nothing was held;
    /// [`crate::Error::NoHolds`] on a sale made without HOLD.
    fn confirm<C: ConnectionLike>(&self, con: &mut C, user: impl AsRef<[u8]>) -> Result<bool>;

    /// Returns `qty` of the user's units (all with `None`) to the sale; replies the units
    /// returned. Retried with an attempt id as `try_buy` is: never returned twice.
    fn cancel<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]>,
        qty: Option<u64>,
    ) -> Result<u64>;

    /// Adds `units` to the sale (split evenly over the partitions of a partitioned one).
    fn restock<C: ConnectionLike>(&self, con: &mut C, units: u64) -> Result<()>;

    /// Units `user` owns (held or final).
    fn bought<C: ConnectionLike>(&self, con: &mut C, user: impl AsRef<[u8]>) -> Result<u64>;

    /// Puts `user` in the sale's waiting room (a sale made with a queue) and replies as
    /// `SECKILL.JOIN`: its position (>= 1) while it waits, 0 once admitted, `SOLD_OUT` once
    /// the sale is sold out; before START, the cohort's size. `Error::NoQueue` without a room.
    fn join<C: ConnectionLike>(&self, con: &mut C, user: impl AsRef<[u8]>) -> Result<i64>;

    /// Where `user` stands, as [`FlashSale::join`] replies, without joining; `None` if it
    /// never joined.
    fn position<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]>,
    ) -> Result<Option<i64>>;

    /// Takes `user` out of the waiting room (`SECKILL.LEAVE`): its place, or the unit promised
    /// to it once admitted, goes to the next. Whether it was in the room.
    fn leave<C: ConnectionLike>(&self, con: &mut C, user: impl AsRef<[u8]>) -> Result<bool>;

    /// Where `user` stands with its ETA (`SECKILL.POSITION ... WITHETA`); `None` when it is
    /// not in the room (never joined, left, lapsed or dropped).
    fn place<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]>,
    ) -> Result<Option<crate::Place>>;

    /// Admits up to `n` users from the head of the waiting room (`SECKILL.ADMIT`); how many
    /// were (never more than the units left can serve). A partitioned sale splits `n` over
    /// its partitions' rooms, going round them from call to call.
    fn admit<C: ConnectionLike>(&self, con: &mut C, n: u64) -> Result<u64>;

    /// The sale's totals (a partitioned sale's partitions are read one after the other, so
    /// under traffic the sum is of slightly different instants).
    fn info<C: ConnectionLike>(&self, con: &mut C) -> Result<SaleInfo>;

    /// Every buyer (a `SECKILL.BUYERS` scan of every key).
    fn buyers<C: ConnectionLike>(&self, con: &mut C) -> Result<Vec<Buyer>>;

    /// Creates the consumer group `group` on the sale's event streams (reading from the
    /// start); a group that exists already is kept.
    fn create_group<C: ConnectionLike>(&self, con: &mut C, group: &str) -> Result<()>;

    /// Up to `count` new events per stream for `consumer` of `group` (XREADGROUP `>`).
    fn read_group<C: ConnectionLike>(
        &self,
        con: &mut C,
        group: &str,
        consumer: &str,
        count: usize,
    ) -> Result<Vec<SaleEvent>>;

    /// Acknowledges an event read by [`FlashSale::read_group`].
    fn ack<C: ConnectionLike>(&self, con: &mut C, group: &str, event: &SaleEvent) -> Result<bool>;

    fn stats(&self) -> ClientStats;
}

/// [`FlashSale`] for a sale type whose operations are written over a `Link` (`buy_on`, ...):
/// each method drives its operation on the caller's connection.
macro_rules! impl_flash_sale {
    ($sale:ty) => {
        impl $crate::FlashSale for $sale {
            fn try_buy<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
                qty: u64,
            ) -> $crate::Result<$crate::TryReply> {
                let link = &mut $crate::link::Blocking(con);
                Ok($crate::link::block_on(self.buy_on(link, user.as_ref(), qty, (None, true)))?.0)
            }

            fn try_buy_again<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
                qty: u64,
                attempt_id: &str,
            ) -> $crate::Result<$crate::TryReply> {
                let link = &mut $crate::link::Blocking(con);
                let bought = self.buy_on(link, user.as_ref(), qty, (Some(attempt_id), true));
                Ok($crate::link::block_on(bought)?.0)
            }

            fn try_buy_acked<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
                qty: u64,
                replicas: u64,
                timeout_ms: u64,
            ) -> $crate::Result<($crate::TryReply, u64)> {
                let link = &mut $crate::link::Blocking(con);
                let wait = (replicas, timeout_ms);
                $crate::link::block_on(self.try_buy_acked_on(link, user.as_ref(), qty, wait))
            }

            fn confirm<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
            ) -> $crate::Result<bool> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on($crate::observe::observed(
                    "confirm",
                    self.confirm_on(link, user.as_ref()),
                ))
            }

            fn cancel<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
                qty: Option<u64>,
            ) -> $crate::Result<u64> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on($crate::observe::observed(
                    "cancel",
                    self.cancel_on(link, user.as_ref(), qty),
                ))
            }

            fn restock<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                units: u64,
            ) -> $crate::Result<()> {
                $crate::link::block_on($crate::observe::observed(
                    "restock",
                    self.restock_on(&mut $crate::link::Blocking(con), units),
                ))
            }

            fn bought<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
            ) -> $crate::Result<u64> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on($crate::observe::observed(
                    "bought",
                    self.bought_on(link, user.as_ref()),
                ))
            }

            fn join<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
            ) -> $crate::Result<i64> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on($crate::observe::observed(
                    "join",
                    self.join_on(link, user.as_ref()),
                ))
            }

            fn position<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
            ) -> $crate::Result<Option<i64>> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on($crate::observe::observed(
                    "position",
                    self.position_on(link, user.as_ref()),
                ))
            }

            fn leave<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
            ) -> $crate::Result<bool> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on($crate::observe::observed(
                    "leave",
                    self.leave_on(link, user.as_ref()),
                ))
            }

            fn place<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                user: impl AsRef<[u8]>,
            ) -> $crate::Result<Option<$crate::Place>> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on($crate::observe::observed(
                    "place",
                    self.place_on(link, user.as_ref()),
                ))
            }

            fn admit<C: redis::ConnectionLike>(&self, con: &mut C, n: u64) -> $crate::Result<u64> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on($crate::observe::observed("admit", self.admit_on(link, n)))
            }

            fn info<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
            ) -> $crate::Result<$crate::SaleInfo> {
                $crate::link::block_on($crate::observe::observed(
                    "info",
                    self.info_on(&mut $crate::link::Blocking(con)),
                ))
            }

            fn buyers<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
            ) -> $crate::Result<Vec<$crate::Buyer>> {
                $crate::link::block_on(self.buyers_on(&mut $crate::link::Blocking(con)))
            }

            fn create_group<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                group: &str,
            ) -> $crate::Result<()> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on(self.create_group_on(link, group))
            }

            fn read_group<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                group: &str,
                consumer: &str,
                count: usize,
            ) -> $crate::Result<Vec<$crate::SaleEvent>> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on(self.read_group_on(link, (group, consumer, count)))
            }

            fn ack<C: redis::ConnectionLike>(
                &self,
                con: &mut C,
                group: &str,
                event: &$crate::SaleEvent,
            ) -> $crate::Result<bool> {
                let link = &mut $crate::link::Blocking(con);
                $crate::link::block_on($crate::key::ack(link, group, event))
            }

            fn stats(&self) -> $crate::ClientStats {
                let mut stats = self.counters().snapshot();
                stats.invalidations = self.cached().map_or(0, |c| c.invalidations());
                stats
            }
        }
    };
}

pub(crate) use impl_flash_sale;
