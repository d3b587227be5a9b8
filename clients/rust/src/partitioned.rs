//! A partitioned sale: P ordinary seckill sale keys, each in its own hash slot, plus a manifest
//! hash. Every command goes to one key, so the underlying client (a `redis::Connection`, or a
//! `redis::cluster::ClusterConnection` that follows MOVED and ASK) routes it.

use crate::error::{Error, Result};
use crate::flash_sale::Counters;
use crate::health::{Health, Placement};
use crate::info::{Buyer, PartitionInfo, SaleEvent, SaleInfo, parse_fields};
use crate::key;
use crate::link::{Blocking, Link, block_on};
use crate::protocol::{DRAINED, MAX_PARTITIONS};
use crate::reply::TryReply;
use crate::retry::{Retrier, RetryPolicy, is_retryable};
use crate::routing::{partition_key, partition_of};
use crate::spec::{MANIFEST_VERSION, SaleSpec};
use crate::tracking::{Cached, SoldOutCache};
use crate::turns::BuyerTurns;
use redis::{ConnectionLike, RedisResult, Value, cmd};
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

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

/// How long a `create` holds a sale's name before its manifest is done (plus 1 ms per
/// partition): the name of a creator that died half way is free again after it.
pub const CREATE_CLAIM_MS: u64 = 5_000;

/// `HSETNX name partitions P`, and an expiry on the claim in the same step.
const CLAIM_SCRIPT: &str = "if redis.call('HSETNX', KEYS[1], 'partitions', ARGV[1]) == 1 then \
     redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end return 0";

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
    seal_ms: u64,
    retry: RetryPolicy,
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
}

impl PartitionedSale {
    /// Creates the sale `name`: its P partitions `{name/0}` .. `{name/P-1}` (each with its
    /// share of the stock, and its stream `{name/i}:events` with `events`), then the manifest
    /// hash `name`. Every argument is checked, and the module's presence and version too
    /// ([`Error::ModuleMissing`], [`Error::ModuleTooOld`]), before anything is written. Fails
    /// with [`Error::SaleExists`] if a manifest of that name exists. The name is claimed with
    /// an expiry that the finished manifest drops: a create that fails half way gives the name
    /// back at once, and one whose process died gives it back within [`CREATE_CLAIM_MS`] (plus
    /// a millisecond per partition).
    pub fn create<C: ConnectionLike>(
        con: &mut C,
        name: &str,
        spec: &SaleSpec,
    ) -> Result<PartitionedSale> {
        block_on(PartitionedSale::create_on(
            &mut Blocking(con),
            name,
            spec,
            false,
        ))
    }

    /// [`PartitionedSale::create`], deleting a sale of that name first (partitions, streams,
    /// manifest): Python's `create(..., replace=True)`.
    pub fn replace<C: ConnectionLike>(
        con: &mut C,
        name: &str,
        spec: &SaleSpec,
    ) -> Result<PartitionedSale> {
        block_on(PartitionedSale::create_on(
            &mut Blocking(con),
            name,
            spec,
            true,
        ))
    }

    pub(crate) async fn create_on<L: Link>(
        link: &mut L,
        name: &str,
        spec: &SaleSpec,
        replace: bool,
    ) -> Result<PartitionedSale> {
        check_name(name)?;
        spec.check()?;
        if spec.queue.is_some() {
            return Err(Error::InvalidArgument(
                "a partitioned sale has no waiting room (yet): make a one-key Sale with a queue"
                    .into(),
            ));
        }
        key::require_module(link).await?;
        if replace {
            PartitionedSale::delete_on(link, name).await?;
        }
        // The claim: whoever sets the manifest's first field owns the name, for a while.
        let claim_ms = CREATE_CLAIM_MS + u64::from(spec.partitions);
        let claimed: i64 = link
            .query(
                cmd("EVAL")
                    .arg(CLAIM_SCRIPT)
                    .arg(1)
                    .arg(name)
                    .arg(spec.partitions)
                    .arg(claim_ms),
            )
            .await?;
        if claimed == 0 {
            return Err(Error::SaleExists(name.to_string()));
        }
        let sale = PartitionedSale::with_spec(name, spec.clone());
        match sale.write_partitions_and_manifest(link).await {
            Ok(()) => Ok(sale.placed(link).await),
            Err(e) => {
                // Give the name back; should this fail too, the claim's expiry does.
                let _: RedisResult<()> = link.query(cmd("DEL").arg(name)).await;
                Err(e)
            }
        }
    }

    /// The partitions, then the manifest with its `ready` mark in one HSET, claim dropped.
    async fn write_partitions_and_manifest<L: Link>(&self, link: &mut L) -> Result<()> {
        let (name, spec) = (&self.name, &self.spec);
        for (index, key) in self.keys.iter().enumerate() {
            let index = index as u32;
            let mut init = spec.init_command(key, spec.share(spec.stock, index));
            if spec.events {
                init.arg("EVENTS").arg(format!("{key}:events"));
                if let Some(maxlen) = spec.events_maxlen {
                    init.arg("MAXLEN").arg(maxlen);
                }
            }
            // REPLACE: the claim is ours, so a partition already there is a leftover of a
            // deleted sale of this name, never a live one.
            init.arg("PARTITION")
                .arg(index)
                .arg("PARTITIONS")
                .arg(spec.partitions)
                .arg("MANIFEST")
                .arg(name)
                .arg("REPLACE");
            let _: () = link.query(&init).await?;
        }
        let mut manifest = cmd("HSET");
        manifest.arg(name);
        for (field, value) in spec.manifest_fields(name) {
            manifest.arg(field).arg(value);
        }
        // Written last: a sale opens only once every partition exists.
        manifest.arg("ready").arg(1);
        let _: () = link.query(&manifest).await?;
        let _: () = link.query(cmd("PERSIST").arg(name)).await?;
        Ok(())
    }

    /// Opens the sale `name` from its manifest; checks the module's version too.
    pub fn open<C: ConnectionLike>(con: &mut C, name: &str) -> Result<PartitionedSale> {
        block_on(PartitionedSale::open_on(&mut Blocking(con), name))
    }

    pub(crate) async fn open_on<L: Link>(link: &mut L, name: &str) -> Result<PartitionedSale> {
        check_name(name)?;
        let fields: Vec<(String, String)> = match link.query(cmd("HGETALL").arg(name)).await {
            Err(e) if e.code() == Some("WRONGTYPE") => {
                let why = format!("{name}: not a partitioned sale's manifest ({e})");
                return Err(Error::BadManifest(why));
            }
            other => other?,
        };
        if fields.is_empty() {
            return Err(Error::NoSale(name.to_string()));
        }
        key::require_module(link).await?;
        let get = |field: &str| {
            fields
                .iter()
                .find(|(f, _)| f == field)
                .map(|(_, v)| v.as_str())
        };
        if get("ready").is_none() {
            return Err(Error::BadManifest(format!(
                "{name}: its creation did not finish; delete it and create it again"
            )));
        }
        if get("version") != Some(MANIFEST_VERSION) {
            return Err(Error::BadManifest(format!(
                "{name}: unknown manifest version"
            )));
        }
        let number = |field: &str| -> Result<u64> {
            get(field)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| Error::BadManifest(format!("{name}: bad {field}")))
        };
        let optional =
            |field: &str| -> Result<Option<u64>> { Ok(Some(number(field)?).filter(|&v| v > 0)) };
        let partitions = u32::try_from(number("partitions")?)
            .ok()
            .filter(|&p| (1..=MAX_PARTITIONS).contains(&p))
            .ok_or_else(|| Error::BadManifest(format!("{name}: bad partitions")))?;
        let spec = SaleSpec {
            stock: number("stock")?,
            partitions,
            limit: number("limit")?,
            hold_ms: optional("hold")?,
            start_ms: optional("start")?,
            end_ms: optional("end")?,
            events: number("events")? == 1,
            events_maxlen: optional("maxlen")?,
            queue: None,
        };
        if get("naming") != Some(partition_key(name, "<i>").as_str()) {
            return Err(Error::BadManifest(format!(
                "{name}: unknown partition naming"
            )));
        }
        Ok(PartitionedSale::with_spec(name, spec).placed(link).await)
    }

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
            seal_ms: DEFAULT_SEAL_MS,
            retry: RetryPolicy::default(),
            counters: Counters::default(),
            turns: BuyerTurns::default(),
            cached: None,
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

    fn key_of(&self, user: &[u8]) -> &str {
        &self.keys[self.partition_of(user) as usize]
    }

    /// Finishes every transfer between this sale's partitions that a mover started and did
    /// not finish (it crashed, or lost its connection, between LEND and SETTLE); replies how
    /// many. Safe to run at any time, also while movers are working: every step is idempotent.
    /// `try_buy` runs it when it finds units in flight and none elsewhere.
    pub fn recover<C: ConnectionLike>(&self, con: &mut C) -> Result<u64> {
        block_on(self.recover_on(&mut Blocking(con)))
    }

    /// Each partition's `SECKILL.INFO`, partition 0 first.
    pub fn partition_infos<C: ConnectionLike>(&self, con: &mut C) -> Result<Vec<PartitionInfo>> {
        block_on(self.partition_infos_on(&mut Blocking(con)))
    }

    /// Deletes the sale: partitions, streams, then the manifest (also a half-created one's).
    pub fn delete<C: ConnectionLike>(con: &mut C, name: &str) -> Result<()> {
        block_on(PartitionedSale::delete_on(&mut Blocking(con), name))
    }

    pub(crate) async fn delete_on<L: Link>(link: &mut L, name: &str) -> Result<()> {
        check_name(name)?;
        let partitions: Option<u32> = link.query(cmd("HGET").arg(name).arg("partitions")).await?;
        for index in 0..partitions.unwrap_or(0).min(MAX_PARTITIONS) {
            let key = partition_key(name, index);
            let _: () = link.query(cmd("DEL").arg(&key)).await?;
            let _: () = link.query(cmd("DEL").arg(format!("{key}:events"))).await?;
        }
        let _: () = link.query(cmd("DEL").arg(name)).await?;
        Ok(())
    }

    /// A purchase, and whether any call of it had to be sent again (see
    /// [`crate::FlashSale::try_buy`]).
    pub(crate) async fn buy_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
        qty: u64,
    ) -> Result<(TryReply, bool)> {
        key::check_call(user, Some(qty))?;
        let server = self.buy_on_server(link, user, qty);
        crate::flash_sale::through_cache(self.cached.as_ref(), &self.counters, server).await
    }

    async fn buy_on_server<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
        qty: u64,
    ) -> Result<(TryReply, bool)> {
        let partition = self.partition_of(user) as usize;
        self.counters.tries.fetch_add(1, Ordering::Relaxed);
        let _turn = self.turns.take(user).await;
        let attempt = key::new_attempt_id();
        let mut retrier = Retrier::new(&self.retry, &attempt);
        let mut borrows = 0;
        loop {
            let key = &self.keys[partition];
            let code = key::try_buy(link, &mut retrier, key, user, qty, &attempt).await?;
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

    /// Looks for `qty` units for `partition` in the others: `true` when it may have them now
    /// (borrowed, or returned to it meanwhile), `false` when no partition had any at one
    /// instant.
    async fn borrow<L: Link>(&self, link: &mut L, partition: usize, qty: u64) -> Result<bool> {
        let asked = Instant::now();
        let _borrower = match self.borrowing[partition].try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                // A wait that parks a thread in the sync API and a task in the async one.
                let guard = self.borrowing[partition].lock().await;
                // A scan begun after this buyer asked found nothing it could reach: its
                // answer is this buyer's too (a scan of its own would meet the same failures).
                if self.unreachable_refusal[partition]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some_and(|scanned| scanned >= asked)
                {
                    self.counters
                        .unreachable_refusals
                        .fetch_add(1, Ordering::Relaxed);
                    return Ok(false);
                }
                // Another buyer of this partition just borrowed, or sealed it: look first.
                let info = key::info(link, &self.keys[partition]).await?;
                if info.remaining >= qty {
                    return Ok(true);
                }
                if info.sealed {
                    return Ok(false);
                }
                guard
            }
        };
        // Bounded: each round either moves units, finishes transfers, or saw the sale change.
        for _ in 0..64 {
            let scanned = Instant::now();
            let first = self.scan(link).await?;
            let mine = first[partition].as_ref();
            if mine.is_some_and(|info| info.remaining >= qty) {
                return Ok(true);
            }
            let donor = first
                .iter()
                .enumerate()
                .filter_map(|(i, info)| Some((i, info.as_ref()?)))
                .filter(|&(i, info)| i != partition && info.remaining > 0)
                .max_by_key(|&(_, info)| info.remaining);
            if let Some((donor, info)) = donor {
                let want = qty.max(self.batches[partition].load(Ordering::Relaxed));
                // At most half of what the donor has, so two drained partitions do not pass
                // the same units back and forth; but enough for this purchase if it can.
                let units = want
                    .min(info.remaining.div_ceil(2))
                    .max(qty.min(info.remaining));
                if self.transfer(link, donor, partition, units).await? > 0 {
                    let cap = (self.spec.stock / u64::from(self.spec.partitions)).max(1);
                    let _ = self.batches[partition].fetch_update(
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                        |batch| Some(batch.saturating_mul(2).min(cap)),
                    );
                    return Ok(true);
                }
                continue;
            }
            let read: Vec<&String> = (self.keys.iter().zip(&first))
                .filter_map(|(key, info)| info.as_ref().map(|_| key))
                .collect();
            if first.iter().flatten().any(|info| info.pending_out > 0) {
                // Units in flight: finish those transfers (safe even when their mover is
                // alive) and look again.
                self.recover_keys(link, &read).await?;
                continue;
            }
            let unreachable = read.len() < self.keys.len();
            if !unreachable {
                // Nothing anywhere, as far as these sequential reads show. Each partition
                // changes only by commands, so if a second pass reads every one the same, they
                // all were so at the instant between the passes: the sale had no units.
                // (A seal lapsing meanwhile moves no unit: only the units are compared.)
                let units = |scan: &[Option<PartitionInfo>]| -> Vec<Option<[u64; 10]>> {
                    scan.iter()
                        .map(|info| info.as_ref().map(PartitionInfo::units))
                        .collect()
                };
                if units(&self.scan(link).await?) != units(&first) {
                    continue;
                }
                if mine.is_some_and(|info| info.remaining > 0) {
                    return Ok(false);
                }
            } else {
                // A partition could not be read (its master is down): it cannot lend either.
                // Refused as sold out, which sells nothing, and sealed like a sale found empty:
                // for seal_ms its buyers cost one round trip, and a unit that comes back
                // elsewhere reaches them after it, as with any seal.
                self.counters
                    .unreachable_refusals
                    .fetch_add(1, Ordering::Relaxed);
                *self.unreachable_refusal[partition]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(scanned);
            }
            let sealed: i64 = link
                .query(
                    cmd("SECKILL.SEAL")
                        .arg(&self.keys[partition])
                        .arg(self.seal_ms),
                )
                .await?;
            if unreachable {
                return Ok(false);
            }
            if sealed == 1 {
                self.counters.seals.fetch_add(1, Ordering::Relaxed);
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Moves up to `units` from partition `from` to partition `to`; replies the units moved.
    async fn transfer<L: Link>(
        &self,
        link: &mut L,
        from: usize,
        to: usize,
        units: u64,
    ) -> Result<u64> {
        let id = format!(
            "{}-{}",
            self.mover,
            self.next_transfer.fetch_add(1, Ordering::Relaxed)
        );
        let (from, to) = (&self.keys[from], &self.keys[to]);
        let lent: u64 = link
            .query(
                cmd("SECKILL.LEND")
                    .arg(from)
                    .arg(&id)
                    .arg(units)
                    .arg("TO")
                    .arg(to),
            )
            .await?;
        finish_transfer(link, from, id.as_bytes(), lent, to).await?;
        if lent > 0 {
            self.counters.transfers.fetch_add(1, Ordering::Relaxed);
            self.counters.units_moved.fetch_add(lent, Ordering::Relaxed);
        }
        Ok(lent)
    }

    pub(crate) async fn recover_on<L: Link>(&self, link: &mut L) -> Result<u64> {
        let keys: Vec<&String> = self.keys.iter().collect();
        self.recover_keys(link, &keys).await
    }

    /// Every partition's SECKILL.INFO for a borrow, each read within [`SCAN_READ_TIMEOUT`];
    /// `None` for one marked down or that failed to answer (marked down then: the next scans
    /// skip it at no cost until its probe).
    async fn scan<L: Link>(&self, link: &mut L) -> Result<Vec<Option<PartitionInfo>>> {
        // A link that cannot bound the read (the sync API) reads it at the sale's opening only.
        if link.bounds_calls() && self.placement.due(Instant::now()) {
            self.read_placement(link).await;
        }
        let mut infos = Vec::with_capacity(self.keys.len());
        for (partition, key) in self.keys.iter().enumerate() {
            let node = self.placement.node(partition);
            if !self
                .health
                .may_read(&node, Instant::now(), link.bounds_calls())
            {
                infos.push(None);
                continue;
            }
            let read: RedisResult<Value> = link
                .query_within(cmd("SECKILL.INFO").arg(key), SCAN_READ_TIMEOUT)
                .await;
            match read {
                Ok(reply) => {
                    self.health.answered(&node);
                    infos.push(Some(PartitionInfo::from_fields(&parse_fields(reply)?)?));
                }
                Err(e) if is_retryable(&e) => {
                    self.health.failed(&node, Instant::now());
                    self.placement.stale();
                    infos.push(None);
                }
                Err(e) => {
                    self.health.answered(&node);
                    return Err(e.into());
                }
            }
        }
        Ok(infos)
    }

    async fn recover_keys<L: Link>(&self, link: &mut L, keys: &[&String]) -> Result<u64> {
        let mut finished = 0;
        for &key in keys {
            let pending: Vec<Value> = link.query(cmd("SECKILL.TRANSFERS").arg(key)).await?;
            for transfer in pending.chunks(4) {
                let [id, units, to, _age] = transfer else {
                    continue;
                };
                let id: Vec<u8> = redis::from_redis_value(id.clone())?;
                let units: u64 = redis::from_redis_value(units.clone())?;
                let to: String = redis::from_redis_value(to.clone())?;
                // Only transfers between this sale's own partitions are this client's to end.
                if !self.keys.contains(&to) {
                    continue;
                }
                finish_transfer(link, key, &id, units, &to).await?;
                finished += 1;
            }
        }
        self.counters
            .recovered
            .fetch_add(finished, Ordering::Relaxed);
        Ok(finished)
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
        let bought = self.buy_on(link, user, qty).await?;
        key::with_acknowledgement(link, bought, wait).await
    }

    pub(crate) async fn cancel_on<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
        qty: Option<u64>,
    ) -> Result<u64> {
        key::check_call(user, qty)?;
        let _turn = self.turns.take(user).await;
        key::cancel(link, &self.retry, self.key_of(user), user, qty).await
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
        key::position(link, self.key_of(user), user).await
    }

    /// A partitioned sale has no waiting room (yet): refused before anything is sent.
    pub(crate) async fn admit_on<L: Link>(&self, _link: &mut L, _n: u64) -> Result<u64> {
        Err(crate::Error::NoQueue(
            "a partitioned sale has no waiting room (yet): make a one-key Sale with a queue".into(),
        ))
    }

    pub(crate) async fn confirm_on<L: Link>(&self, link: &mut L, user: &[u8]) -> Result<bool> {
        key::check_call(user, None)?;
        key::confirm(link, self.key_of(user), user).await
    }

    /// Adds `units`, split evenly over the partitions.
    pub(crate) async fn restock_on<L: Link>(&self, link: &mut L, units: u64) -> Result<()> {
        check_units(units)?;
        for (index, key) in self.keys.iter().enumerate() {
            let share = self.spec.share(units, index as u32);
            if share > 0 {
                key::restock(link, key, share).await?;
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

/// ABSORB (when units moved) then SETTLE: the steps after LEND, each idempotent.
async fn finish_transfer<L: Link>(
    link: &mut L,
    from: &str,
    id: &[u8],
    units: u64,
    to: &str,
) -> Result<()> {
    if units > 0 {
        let _: i64 = link
            .query(
                cmd("SECKILL.ABSORB")
                    .arg(to)
                    .arg(id)
                    .arg(units)
                    .arg("FROM")
                    .arg(from),
            )
            .await?;
    }
    let _: i64 = link.query(cmd("SECKILL.SETTLE").arg(from).arg(id)).await?;
    Ok(())
}

/// A sale name becomes the manifest key and the hash tag of every partition: braces in it
/// would change which part of a key is hashed.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains(['{', '}']) {
        return Err(Error::InvalidArgument(format!(
            "sale name {name:?} must be non-empty and without braces"
        )));
    }
    Ok(())
}

/// RESTOCK's units, checked before anything is sent.
pub(crate) fn check_units(units: u64) -> Result<()> {
    if units == 0 || units > i64::MAX as u64 {
        return Err(Error::InvalidArgument(
            "units must be an integer between 1 and 9223372036854775807".to_string(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("sale:1").is_ok());
        for bad in ["", "a{b", "a}b"] {
            assert!(matches!(check_name(bad), Err(Error::InvalidArgument(_))));
        }
        assert_eq!(partition_key("sale:1", 3), "{sale:1/3}");
    }
}
