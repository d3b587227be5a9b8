//! A partitioned sale: P ordinary seckill sale keys, each in its own hash slot, plus a manifest
//! hash. Every command goes to one key, so the underlying client (a `redis::Connection`, or a
//! `redis::cluster::ClusterConnection` that follows MOVED and ASK) routes it.

use crate::durability::{Durability, Keeper, Keeping};
use crate::error::{Error, Result};
use crate::flash_sale::Counters;
use crate::health::{Health, Placement};
use crate::info::{Buyer, PartitionInfo, SaleEvent, SaleInfo};
use crate::keeping;
use crate::key;
use crate::link::{Blocking, Link, block_on};
use crate::protocol::DRAINED;
use crate::reply::TryReply;
use crate::retry::{Retrier, RetryPolicy, is_retryable};
use crate::routing::{partition_key, partition_of};
use crate::spec::SaleSpec;
use crate::tracking::{Cached, SoldOutCache};
use crate::turns::BuyerTurns;
use redis::{ConnectionLike, Value, cmd};
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

mod borrow;
mod manifest;

pub use manifest::CREATE_CLAIM_MS;

/// How long a partition that found no stock anywhere stays sealed, unless stock comes back to
/// it first: while sealed, a buyer it refuses costs one round trip.
pub const DEFAULT_SEAL_MS: u64 = 1_000;

/// How long a borrow waits for one partition's read (in the async API; the sync API waits as
/// long as its connection's read timeout): a partition that does not answer in time is skipped
/// (it cannot lend) and marked down, so that one frozen master does not stall the buyers of
/// the others. 50 ms is hundreds of times a healthy read on a LAN.
pub const SCAN_READ_TIMEOUT: Duration = Duration::from_millis(50);

/// How many times one purchase may borrow stock for its partition, which other buyers of that
/// partition then bought first, before it gives up with [`Error::Contended`].
const MAX_BORROWS: u32 = 1_000;

/// One sale over `partitions` sale keys. A handle: cheap to share between threads (`&self`
/// everywhere), each thread passing its own connection.
pub struct PartitionedSale {
    name: String,
    spec: SaleSpec,
    keys: Vec<String>,
    /// Units the next borrow for each partition asks for: doubles with each borrow, so a
    /// partition under heavy demand soon borrows in big steps and rarely.
    batches: Vec<AtomicU64>,
    /// One borrower per partition at a time in this process: when many buyers find their
    /// partition drained at once, one borrows and the others buy what it brought, instead of
    /// each draining another partition (which then borrows back).
    borrowing: Vec<Mutex<()>>,
    /// This handle's prefix for transfer ids, random, so two clients never share an id.
    mover: String,
    next_transfer: AtomicU64,
    /// The partition the next `admit` starts with.
    next_admit: AtomicU64,
    seal_ms: u64,
    retry: RetryPolicy,
    keeper: Keeper,
    /// See [`PartitionedSale::read_from_replicas`].
    replica_reads: bool,
    /// The masters whose reads failed lately, and which master serves which partition (see
    /// [`crate::health`]).
    health: Health,
    placement: Placement,
    /// When the last scan for each partition that found no stock it could reach began: a
    /// buyer who waited for that scan takes its answer.
    unreachable_refusal: Vec<StdMutex<Option<Instant>>>,
    counters: Counters,
    turns: BuyerTurns,
    cached: Option<Cached>,
    rooms: crate::waiting::Rooms,
}

impl PartitionedSale {
    /// The sale with its placement read now, while the cluster is likely healthy: a borrow in
    /// a master's failure then knows which partitions that master serves (see [`Placement`]).
    async fn placed<L: Link>(self, link: &mut L) -> PartitionedSale {
        self.read_placement(link).await;
        self
    }

    /// `CLUSTER SLOTS` into the placement (within [`SCAN_READ_TIMEOUT`]: any node answers it,
    /// and the one asked may be the failed one).
    async fn read_placement<L: Link>(&self, link: &mut L) {
        let slots = cmd("CLUSTER").arg("SLOTS").clone();
        let reply: Option<Value> = match link.query_within(&slots, SCAN_READ_TIMEOUT).await {
            Ok(value) => Some(value),
            // A server that is no cluster: each partition stands for itself.
            Err(e) if e.code().is_some() => Some(Value::Nil),
            Err(_) => None,
        };
        self.placement.learn(reply.as_ref(), Instant::now());
    }

    fn with_spec(name: &str, spec: SaleSpec) -> PartitionedSale {
        let keys: Vec<String> = (0..spec.partitions)
            .map(|i| partition_key(name, i))
            .collect();
        let initial_batch = (spec.stock / u64::from(spec.partitions) / 16).max(1);
        PartitionedSale {
            name: name.to_string(),
            batches: keys.iter().map(|_| AtomicU64::new(initial_batch)).collect(),
            borrowing: keys.iter().map(|_| Mutex::new(())).collect(),
            health: Health::default(),
            placement: Placement::new(&keys),
            unreachable_refusal: keys.iter().map(|_| StdMutex::new(None)).collect(),
            keys,
            spec,
            mover: key::random_id(),
            next_transfer: AtomicU64::new(0),
            next_admit: AtomicU64::new(0),
            seal_ms: DEFAULT_SEAL_MS,
            retry: RetryPolicy::default(),
            keeper: Keeper::default(),
            replica_reads: false,
            counters: Counters::default(),
            turns: BuyerTurns::default(),
            cached: None,
            rooms: Default::default(),
        }
    }

    /// How long a partition that found no stock anywhere stays sealed (default
    /// [`DEFAULT_SEAL_MS`]): longer makes a sold-out sale's refusals cheaper, shorter finds
    /// stock returned to another partition (a cancel, an expired hold) sooner.
    pub fn with_seal_ms(mut self, ms: u64) -> PartitionedSale {
        self.seal_ms = ms.max(1);
        self
    }

    /// Answers purchases through `cache`, the sold-out cache: once the server refused one as
    /// sold out, the next are refused here, with nothing sent, until Redis pushes a change of
    /// the sale (docs/clients.md, "The sold-out cache"). Only refusals are cached.
    pub fn with_local_cache(mut self, cache: &SoldOutCache) -> PartitionedSale {
        self.cached = Some(Cached::new(
            cache,
            format!("sale:{}", self.name),
            self.keys.clone(),
            true,
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
    pub fn with_retry(mut self, policy: RetryPolicy) -> PartitionedSale {
        self.retry = policy;
        self
    }

    /// See [`crate::Sale::durability`]: every partition's purchases, cancels, confirms and
    /// restocks, and the loans between partitions, wait for it.
    pub fn durability(mut self, durability: Durability) -> PartitionedSale {
        self.keeper.durability = durability;
        self
    }

    /// See [`crate::Sale::read_from_replicas`]: each partition's replica.
    pub fn read_from_replicas(mut self, read_from_replicas: bool) -> PartitionedSale {
        self.replica_reads = read_from_replicas;
        self
    }

    /// See [`crate::Sale::ack_timeout`].
    pub fn ack_timeout(mut self, timeout: Duration) -> PartitionedSale {
        self.keeper.ack_timeout = Some(timeout);
        self
    }

    /// See [`crate::Sale::update_ms`].
    pub fn update_ms(mut self, update_ms: u64) -> PartitionedSale {
        self.rooms.update = Some(Duration::from_millis(update_ms));
        self
    }

    /// What this handle's writes wait for.
    pub(crate) fn keeping(&self) -> Keeping<'_> {
        self.keeper.keeping(self.retry.deadline, true)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn spec(&self) -> &SaleSpec {
        &self.spec
    }

    /// The sale keys, partition 0 first.
    pub fn partition_keys(&self) -> &[String] {
        &self.keys
    }

    /// The event streams, partition 0 first (empty without `events`).
    pub fn event_streams(&self) -> Vec<String> {
        if !self.spec.events {
            return Vec::new();
        }
        self.keys
            .iter()
            .map(|key| format!("{key}:events"))
            .collect()
    }

    /// The partition `user` buys in.
    pub fn partition_of(&self, user: &[u8]) -> u32 {
        partition_of(user, self.spec.partitions)
    }

    pub(crate) fn rooms(&self) -> &crate::waiting::Rooms {
        &self.rooms
    }

    pub(crate) fn key_of(&self, user: &[u8]) -> &str {
        &self.keys[self.partition_of(user) as usize]
    }

    /// See [`crate::Sale::wait_for_turn`]: the user waits in its partition's room. While its
    /// partition is drained, stock is borrowed for it from the others as `try_buy` would.
    pub fn wait_for_turn<'a, C: ConnectionLike>(
        &'a self,
        con: &'a mut C,
        user: impl AsRef<[u8]>,
        resync_ms: u64,
    ) -> crate::Turns<'a, C> {
        let room = crate::waiting::Room::Partitioned(self);
        crate::Turns::new(con, room, user.as_ref(), resync_ms)
    }

    /// Each partition's `SECKILL.INFO`, partition 0 first.
    pub fn partition_infos<C: ConnectionLike>(&self, con: &mut C) -> Result<Vec<PartitionInfo>> {
        block_on(self.partition_infos_on(&mut Blocking(con)))
    }

    /// A purchase, and whether any call of it had to be sent again (see
    /// [`crate::FlashSale::try_buy`]).
    pub(crate) async fn buy_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
        qty: u64,
        (attempt, kept): (Option<&str>, bool),
    ) -> Result<(TryReply, bool)> {
        let checked =
            key::check_call(user, Some(qty)).and_then(|()| key::check_attempt_id(attempt));
        // Boxed: see `Sale::buy_on`.
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
        let partition = self.partition_of(user) as usize;
        self.counters.tries.fetch_add(1, Ordering::Relaxed);
        let _turn = self.turns.take(user).await;
        let attempt = attempt.map_or_else(key::new_attempt_id, str::to_string);
        let mut retrier = Retrier::new("try_buy", &self.retry, &attempt);
        let mut borrows = 0;
        loop {
            let key = &self.keys[partition];
            let code = key::try_buy(
                link,
                &mut retrier,
                (key, user, qty),
                &attempt,
                self.keeper.keeping(self.retry.deadline, kept),
            )
            .await?;
            // The partition's master answered: a borrow may read it again at once.
            if self.health.any_down() {
                self.health.answered(&self.placement.node(partition));
            }
            if code != DRAINED {
                return Ok((TryReply::from_code(code)?, retrier.retried()));
            }
            if borrows == 0 {
                self.counters
                    .borrowing_tries
                    .fetch_add(1, Ordering::Relaxed);
            }
            borrows += 1;
            if borrows > MAX_BORROWS {
                return Err(Error::Contended {
                    borrows: MAX_BORROWS,
                });
            }
            // Borrowing moves stock by idempotent transfers and buys nothing: a failover
            // under it is waited out and the purchase tried again under the same id.
            match self.borrow(link, partition, qty).await {
                Ok(true) => {}
                Ok(false) => return Ok((TryReply::SoldOut, retrier.retried())),
                Err(Error::Redis(e)) if is_retryable(&e) => {
                    let wait = retrier.backoff_between(e)?;
                    link.sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub(crate) async fn partition_infos_on<L: Link>(
        &self,
        link: &mut L,
    ) -> Result<Vec<PartitionInfo>> {
        let mut infos = Vec::with_capacity(self.keys.len());
        for key in &self.keys {
            infos.push(key::info(link, key).await?);
        }
        Ok(infos)
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
        let call = (self.key_of(user), user, qty);
        key::cancel(link, &self.retry, call, self.keeping()).await
    }

    pub(crate) async fn bought_on<L: Link>(&self, link: &mut L, user: &[u8]) -> Result<u64> {
        key::check_call(user, None)?;
        key::bought(link, self.key_of(user), user).await
    }

    pub(crate) async fn join_on<L: Link>(&self, link: &mut L, user: &[u8]) -> Result<i64> {
        key::check_call(user, None)?;
        key::join(link, self.key_of(user), user).await
    }

    pub(crate) async fn position_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
    ) -> Result<Option<i64>> {
        key::check_call(user, None)?;
        key::position(link, self.key_of(user), user, self.replica_reads).await
    }

    pub(crate) async fn leave_on<L: Link>(&self, link: &mut L, user: &[u8]) -> Result<bool> {
        key::check_call(user, None)?;
        key::leave(link, self.key_of(user), user).await
    }

    pub(crate) async fn place_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
    ) -> Result<Option<crate::Place>> {
        key::check_call(user, None)?;
        key::place(link, self.key_of(user), user, self.replica_reads).await
    }

    /// `n` split evenly over the partitions' rooms, the first of them one more, starting
    /// where the last call ended (so `admit(1)` calls go round them all).
    pub(crate) async fn admit_on<L: Link>(&self, link: &mut L, n: u64) -> Result<u64> {
        check_units(n)?;
        if self.spec.queue.is_none() {
            return Err(Error::NoQueue(format!(
                "{}: made without a waiting room",
                self.name
            )));
        }
        let partitions = u64::from(self.spec.partitions);
        let first = self
            .next_admit
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |at| {
                Some((at + n % partitions) % partitions)
            })
            .unwrap_or(0);
        let mut admitted = 0;
        for turn in 0..self.spec.partitions {
            let share = self.spec.share(n, turn);
            if share > 0 {
                let index = ((first + u64::from(turn)) % partitions) as usize;
                admitted += key::admit(link, &self.keys[index], share).await?;
            }
        }
        Ok(admitted)
    }

    pub(crate) async fn confirm_on<L: Link>(&self, link: &mut L, user: &[u8]) -> Result<bool> {
        key::check_call(user, None)?;
        key::confirm(link, self.key_of(user), user, self.keeping()).await
    }

    /// Adds `units`, split evenly over the partitions.
    pub(crate) async fn restock_on<L: Link>(&self, link: &mut L, units: u64) -> Result<()> {
        check_units(units)?;
        for (index, key) in self.keys.iter().enumerate() {
            let share = self.spec.share(units, index as u32);
            if share > 0 {
                key::restock(link, key, share, self.keeping()).await?;
            }
        }
        Ok(())
    }

    pub(crate) async fn info_on<L: Link>(&self, link: &mut L) -> Result<SaleInfo> {
        Ok(SaleInfo::total(self.partition_infos_on(link).await?))
    }

    /// A user buys in one partition only, so nobody appears twice.
    pub(crate) async fn buyers_on<L: Link>(&self, link: &mut L) -> Result<Vec<Buyer>> {
        let mut all = Vec::new();
        for (partition, key) in self.keys.iter().enumerate() {
            key::buyers(link, key, partition as u32, &mut all).await?;
        }
        Ok(all)
    }

    pub(crate) async fn create_group_on<L: Link>(&self, link: &mut L, group: &str) -> Result<()> {
        for stream in self.event_streams() {
            key::create_group(link, &stream, group).await?;
        }
        Ok(())
    }

    /// Streams of different slots cannot be read in one call: XREADGROUP on each in turn.
    pub(crate) async fn read_group_on<L: Link>(
        &self,
        link: &mut L,
        reader: (&str, &str, usize),
    ) -> Result<Vec<SaleEvent>> {
        let mut events = Vec::new();
        for (partition, stream) in self.event_streams().iter().enumerate() {
            key::read_group(link, partition as u32, stream, reader, &mut events).await?;
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

crate::flash_sale::impl_flash_sale!(PartitionedSale);

/// RESTOCK's units, checked before anything is sent.
pub(crate) fn check_units(units: u64) -> Result<()> {
    if units == 0 || units > i64::MAX as u64 {
        return Err(Error::InvalidArgument(
            "units must be an integer between 1 and 9223372036854775807".to_string(),
        ));
    }
    Ok(())
}
