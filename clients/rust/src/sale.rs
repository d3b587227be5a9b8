//! A one-key sale: one `SECKILL.INIT` key, the way most users start. The same interface as a
//! partitioned sale ([`crate::FlashSale`]), without partitions to route to or borrow from.

use crate::durability::{Change, Durability, Keeper, Keeping};
use crate::error::{Error, Result};
use crate::flash_sale::Counters;
use crate::info::{Buyer, SaleEvent, SaleInfo};
use crate::keeping;
use crate::key;
use crate::link::{Blocking, Link, block_on};
use crate::partitioned::check_units;
use crate::protocol::DRAINED;
use crate::reply::TryReply;
use crate::retry::{Retrier, RetryPolicy};
use crate::spec::SaleSpec;
use crate::tracking::{Cached, SoldOutCache};
use crate::turns::BuyerTurns;
use redis::ConnectionLike;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A sale on one key. A handle: cheap to share between threads (`&self` everywhere), each
/// thread passing its own connection.
pub struct Sale {
    key: String,
    retry: RetryPolicy,
    keeper: Keeper,
    /// Whether `position` and `place` may be answered by a replica (see
    /// [`Sale::read_from_replicas`]).
    replica_reads: bool,
    counters: Counters,
    turns: BuyerTurns,
    cached: Option<Cached>,
    rooms: crate::waiting::Rooms,
}

impl Sale {
    /// A handle on the sale at `key`, made by `SECKILL.INIT` (here or anywhere else); nothing
    /// is sent. [`Sale::open`] checks the key and the module first.
    pub fn new(key: impl Into<String>) -> Sale {
        Sale {
            key: key.into(),
            retry: RetryPolicy::default(),
            keeper: Keeper::default(),
            replica_reads: false,
            counters: Counters::default(),
            turns: BuyerTurns::default(),
            cached: None,
            rooms: Default::default(),
        }
    }

    /// A handle on the sale at `key` once the server has shown it has one there
    /// ([`Error::NoSale`] if not) and a module this client works with
    /// ([`Error::ModuleMissing`], [`Error::ModuleTooOld`]).
    pub fn open<C: ConnectionLike>(con: &mut C, key: &str) -> Result<Sale> {
        block_on(Sale::open_on(&mut Blocking(con), key))
    }

    pub(crate) async fn open_on<L: Link>(link: &mut L, key: &str) -> Result<Sale> {
        key::require_module(link).await?;
        key::info(link, key).await?;
        Ok(Sale::new(key))
    }

    /// Makes the sale at `key` (`SECKILL.INIT`, one command) from `spec`, whose `partitions`
    /// must be 1; with `events`, its stream is `key:events` in the key's hash slot (the key's
    /// hash tag, or `{key}:events`). Every argument and the module are checked before anything
    /// is written; [`Error::SaleExists`] if a sale is there already.
    pub fn create<C: ConnectionLike>(con: &mut C, key: &str, spec: &SaleSpec) -> Result<Sale> {
        block_on(Sale::create_on(&mut Blocking(con), key, spec, false))
    }

    /// [`Sale::create`], resetting a sale already at `key` to `spec` (no buyers; its event
    /// stream deleted) instead of refusing it: Python's `create(..., replace=True)`.
    pub fn replace<C: ConnectionLike>(con: &mut C, key: &str, spec: &SaleSpec) -> Result<Sale> {
        block_on(Sale::create_on(&mut Blocking(con), key, spec, true))
    }

    pub(crate) async fn create_on<L: Link>(
        link: &mut L,
        key: &str,
        spec: &SaleSpec,
        replace: bool,
    ) -> Result<Sale> {
        if key.is_empty() {
            return Err(Error::InvalidArgument(
                "the sale key must be non-empty".into(),
            ));
        }
        if spec.partitions != 1 {
            return Err(Error::InvalidArgument(
                "a one-key sale has partitions 1 (PartitionedSale spreads a sale over more)".into(),
            ));
        }
        spec.check()?;
        let mut init = spec.init_command(key, spec.stock);
        if spec.events {
            let stream = key::events_stream_of(key).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{key:?} has braces but no hash tag: no stream name shares its slot for sure"
                ))
            })?;
            init.arg("EVENTS").arg(stream);
            if let Some(maxlen) = spec.events_maxlen {
                init.arg("MAXLEN").arg(maxlen);
            }
        }
        key::require_module(link).await?;
        if replace {
            // The old sale's events go with it; INIT ... REPLACE resets the key in one step.
            if let Some(stream) = key::events_stream_of(key) {
                let _: () = link.query(redis::cmd("DEL").arg(stream)).await?;
            }
            init.arg("REPLACE");
        }
        let sale = Sale::new(key);
        let _: () = keeping::kept_write(link, &init, (key, Change::Wrote), sale.keeping()).await?;
        Ok(sale)
    }

    /// What a buyer told "bought" is kept through (default [`Durability::Replica`]: a
    /// replica's acknowledgement; see docs/durability.md): every purchase, cancel, confirm and
    /// restock of this handle waits for it, [`Error::NotReplicated`] when it does not come
    /// within the acknowledgement timeout. A master with no replica seen is answered at once.
    pub fn durability(mut self, durability: Durability) -> Sale {
        self.keeper.durability = durability;
        self
    }

    /// With `true`, `position` and `place` may be answered by a replica of the key's master:
    /// on an [`crate::aio::ClusterSession`] they go to one (the master answers when the slot
    /// map lists none, or the replica is down, frozen, loading or no longer serves the slot);
    /// any other connection's server answers them as before. A replica's answer is a few
    /// milliseconds behind the master's at most (the room's timer replicates each change it
    /// makes). See docs/waiting-room.md.
    pub fn read_from_replicas(mut self, read_from_replicas: bool) -> Sale {
        self.replica_reads = read_from_replicas;
        self
    }

    /// How long a write waits for its acknowledgement (default: the retry deadline / 10,
    /// between 100 ms and 1 s).
    pub fn ack_timeout(mut self, timeout: Duration) -> Sale {
        self.keeper.ack_timeout = Some(timeout);
        self
    }

    /// How often [`Sale::wait_for_turn`] yields a mere move of a waiter's number, at most (ms;
    /// Python's `update_ms`): everyone moves up at each admission, and a page need not redraw
    /// for each. Its turn, a sell-out, its first place and the draw at START still come at
    /// once. Without it every move is yielded (as this crate always did; Python's default is
    /// 3 000, which saves its event loop a wake per page and admission: here a turn wakes the
    /// room's pages whatever this says). 0 is refused when a wait starts.
    pub fn update_ms(mut self, update_ms: u64) -> Sale {
        self.rooms.update = Some(Duration::from_millis(update_ms));
        self
    }

    /// What this handle's writes wait for.
    fn keeping(&self) -> Keeping<'_> {
        self.keeper.keeping(self.retry.deadline, true)
    }

    /// Answers purchases through `cache`, the sold-out cache: once the server refused one as
    /// sold out, the next are refused here, with nothing sent, until Redis pushes a change of
    /// the sale (docs/clients.md, "The sold-out cache"). Only refusals are cached.
    pub fn with_local_cache(mut self, cache: &SoldOutCache) -> Sale {
        self.cached = Some(Cached::new(
            cache,
            format!("key:{}", self.key),
            vec![self.key.clone()],
            false,
        ));
        self
    }

    /// The policy [`Self::with_retry`] set: the async API bounds each call by its deadline.
    pub(crate) fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// How `try_buy` and `cancel` retry a call whose answer was lost (default
    /// [`RetryPolicy::default`]: 10 s). Each call carries a fresh attempt id, so a retry
    /// never buys or cancels twice.
    pub fn with_retry(mut self, policy: RetryPolicy) -> Sale {
        self.retry = policy;
        self
    }

    /// Joins `user` to the sale's waiting room and yields its [`crate::Place`] each time its
    /// number changes (a mere move at most every [`Sale::update_ms`] when set), ending with 0
    /// (its turn: buy within the window, yielded at once) or -1 (sold out). Before
    /// START the number is how many wait (`drawn` false). Built on the sale's event stream (a
    /// sale made with events; [`Error::InvalidArgument`] otherwise), read for every waiter of
    /// this handle by one of them at a time (a non-blocking `XREAD` every 50 ms): a waiter
    /// costs memory, not a read (see docs/waiting-room.md). With PRESENCE the waiters join
    /// again at a third of it; the server is asked where everyone stands after `resync_ms`
    /// without an entry (and before START every `resync_ms`).
    /// Dropped before its turn, the iterator leaves the room: the place goes to the next. An
    /// error ends it.
    pub fn wait_for_turn<'a, C: ConnectionLike>(
        &'a self,
        con: &'a mut C,
        user: impl AsRef<[u8]>,
        resync_ms: u64,
    ) -> crate::Turns<'a, C> {
        crate::Turns::new(con, self.room(), user.as_ref(), resync_ms)
    }

    /// The waiting room its waiters share.
    pub(crate) fn room(&self) -> crate::waiting::Room<'_> {
        crate::waiting::Room::Key(&self.key, &self.rooms)
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Deletes the sale key and its event stream.
    pub fn delete<C: ConnectionLike>(&self, con: &mut C) -> Result<()> {
        block_on(self.delete_on(&mut Blocking(con)))
    }

    pub(crate) async fn delete_on<L: Link>(&self, link: &mut L) -> Result<()> {
        let stream = match key::event_stream(link, &self.key).await {
            Err(Error::NoSale(_)) => return Ok(()),
            other => other?,
        };
        if let Some(stream) = stream {
            let _: () = link.query(redis::cmd("DEL").arg(stream)).await?;
        }
        let _: () = link.query(redis::cmd("DEL").arg(&self.key)).await?;
        Ok(())
    }

    pub(crate) async fn buy_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
        qty: u64,
        (attempt, kept): (Option<&str>, bool),
    ) -> Result<(TryReply, bool)> {
        let checked =
            key::check_call(user, Some(qty)).and_then(|()| key::check_attempt_id(attempt));
        // Boxed: a future passed by value is copied at each call it goes through, and this
        // one (with the connection's) was 14 KB; boxed, 1 KB allocated once (client CPU per
        // `Durability::Master` purchase, examples/bench_durability/main.rs: 1.2 us less).
        let server = Box::pin(self.buy_on_server(link, user, qty, (attempt, kept)));
        crate::flash_sale::through_cache(checked, self.cached.as_ref(), &self.counters, server)
            .await
    }

    async fn buy_on_server<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
        qty: u64,
        (attempt, kept): (Option<&str>, bool),
    ) -> Result<(TryReply, bool)> {
        self.counters.tries.fetch_add(1, Ordering::Relaxed);
        let _turn = self.turns.take(user).await;
        let attempt = attempt.map_or_else(key::new_attempt_id, str::to_string);
        let mut retrier = Retrier::new("try_buy", &self.retry, &attempt);
        let code = key::try_buy(
            link,
            &mut retrier,
            (&self.key, user, qty),
            &attempt,
            self.keeper.keeping(self.retry.deadline, kept),
        )
        .await?;
        // A `Sale` on one partition of a partitioned sale: that key alone has no units.
        let code = if code == DRAINED {
            crate::protocol::SOLD_OUT
        } else {
            code
        };
        Ok((TryReply::from_code(code)?, retrier.retried()))
    }

    pub(crate) async fn try_buy_acked_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
        qty: u64,
        wait: (u64, u64),
    ) -> Result<(TryReply, u64)> {
        // The purchase waits for what the caller asked, not the handle's durability too.
        let bought = self.buy_on(link, user, qty, (None, false)).await?;
        keeping::with_acknowledgement(link, bought, wait).await
    }

    pub(crate) async fn cancel_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
        qty: Option<u64>,
    ) -> Result<u64> {
        key::check_call(user, qty)?;
        let _turn = self.turns.take(user).await;
        key::cancel(link, &self.retry, (&self.key, user, qty), self.keeping()).await
    }

    pub(crate) async fn bought_on<L: Link>(&self, link: &mut L, user: &[u8]) -> Result<u64> {
        key::check_call(user, None)?;
        key::bought(link, &self.key, user).await
    }

    pub(crate) async fn join_on<L: Link>(&self, link: &mut L, user: &[u8]) -> Result<i64> {
        key::check_call(user, None)?;
        key::join(link, &self.key, user).await
    }

    pub(crate) async fn position_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
    ) -> Result<Option<i64>> {
        key::check_call(user, None)?;
        key::position(link, &self.key, user, self.replica_reads).await
    }

    pub(crate) async fn leave_on<L: Link>(&self, link: &mut L, user: &[u8]) -> Result<bool> {
        key::check_call(user, None)?;
        key::leave(link, &self.key, user).await
    }

    pub(crate) async fn place_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
    ) -> Result<Option<crate::Place>> {
        key::check_call(user, None)?;
        key::place(link, &self.key, user, self.replica_reads).await
    }

    pub(crate) async fn admit_on<L: Link>(&self, link: &mut L, n: u64) -> Result<u64> {
        check_units(n)?;
        key::admit(link, &self.key, n).await
    }

    pub(crate) async fn confirm_on<L: Link>(&self, link: &mut L, user: &[u8]) -> Result<bool> {
        key::check_call(user, None)?;
        key::confirm(link, &self.key, user, self.keeping()).await
    }

    pub(crate) async fn restock_on<L: Link>(&self, link: &mut L, units: u64) -> Result<()> {
        check_units(units)?;
        key::restock(link, &self.key, units, self.keeping()).await
    }

    pub(crate) async fn info_on<L: Link>(&self, link: &mut L) -> Result<SaleInfo> {
        Ok(SaleInfo::total(vec![key::info(link, &self.key).await?]))
    }

    pub(crate) async fn buyers_on<L: Link>(&self, link: &mut L) -> Result<Vec<Buyer>> {
        let mut all = Vec::new();
        key::buyers(link, &self.key, 0, &mut all).await?;
        Ok(all)
    }

    pub(crate) async fn create_group_on<L: Link>(&self, link: &mut L, group: &str) -> Result<()> {
        if let Some(stream) = key::event_stream(link, &self.key).await? {
            key::create_group(link, &stream, group).await?;
        }
        Ok(())
    }

    pub(crate) async fn read_group_on<L: Link>(
        &self,
        link: &mut L,
        reader: (&str, &str, usize),
    ) -> Result<Vec<SaleEvent>> {
        let mut events = Vec::new();
        if let Some(stream) = key::event_stream(link, &self.key).await? {
            key::read_group(link, 0, &stream, reader, &mut events).await?;
        }
        Ok(events)
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    pub(crate) fn cached(&self) -> Option<&Cached> {
        self.cached.as_ref()
    }
}

crate::flash_sale::impl_flash_sale!(Sale);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aio::ClusterSession;
    use crate::link::Tokio;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers every read with "no cluster": enough for a session to connect.
    async fn no_cluster_server() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0; 1024];
                    while socket.read(&mut buffer).await.is_ok_and(|n| n > 0) {
                        let refusal = b"-ERR This instance has cluster support disabled\r\n";
                        if socket.write_all(refusal).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        format!("redis://{address}")
    }

    /// The purchase's future and the session's kept write, each boxed and copied whole once
    /// per purchase, stay small: 1 152 and 1 728 bytes at the start of session 14 (past
    /// malloc's per-thread cache, 1 KB; the connect path's futures, once bounded by the
    /// caller's deadline, made the kept write 3 600), 1 008 and 864 now. The bound leaves room
    /// for another compiler's layout; the session-start code (1 728) and the connect path
    /// carried inline (3 024) fail it.
    #[tokio::test]
    async fn a_purchases_boxed_futures_stay_small() {
        const BOUND: usize = 1536;
        let mut session = ClusterSession::connect([no_cluster_server().await])
            .await
            .unwrap();
        let sale = Sale::new("s");
        let mut link = Tokio::within(&mut session, Duration::from_secs(1));
        let purchase = sale.buy_on_server(&mut link, b"u", 1, (None, true));
        let size = std::mem::size_of_val(&purchase);
        println!("the purchase's future: {size} bytes");
        assert!(size <= BOUND, "the purchase's future: {size} bytes");
        drop(purchase);
        let wait: std::sync::Arc<[u8]> = b"WAIT".as_slice().into();
        let write = redis::cmd("SECKILL.TRY");
        let kept = session.kept(
            &write,
            (wait, Duration::ZERO),
            |_| true,
            Duration::from_secs(1),
        );
        let size = std::mem::size_of_val(&kept);
        println!("the session's kept write: {size} bytes");
        assert!(size <= BOUND, "the session's kept write: {size} bytes");
    }
}
