//! A partitioned sale: P ordinary seckill sale keys, each in its own hash slot, plus a manifest
//! hash. Every command goes to one key, so the underlying client (a `redis::Connection`, or a
//! `redis::cluster::ClusterConnection` that follows MOVED and ASK) routes it.

use crate::error::{Error, Result};
use crate::info::{Buyer, PartitionInfo, SaleEvent, SaleInfo, parse_fields};
use crate::protocol::{DRAINED, MAX_PARTITIONS};
use crate::reply::TryReply;
use crate::retry::{Retrier, RetryPolicy, is_retryable, with_retries};
use crate::routing::{partition_key, partition_of};
use crate::spec::{MANIFEST_VERSION, SaleSpec};
use redis::{ConnectionLike, RedisResult, Value, cmd};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// How long a partition that found no stock anywhere stays sealed, unless stock comes back to
/// it first: while sealed, a buyer it refuses costs one round trip.
pub const DEFAULT_SEAL_MS: u64 = 1_000;

/// How many times one purchase may borrow stock for its partition, which other buyers of that
/// partition then bought first, before it gives up with [`Error::Contended`].
const MAX_BORROWS: u32 = 1_000;

/// How long a `create` holds a sale's name before its manifest is done (plus 1 ms per
/// partition): the name of a creator that died half way is free again after it.
pub const CREATE_CLAIM_MS: u64 = 5_000;

/// `HSETNX name partitions P`, and an expiry on the claim in the same step.
const CLAIM_SCRIPT: &str = "if redis.call('HSETNX', KEYS[1], 'partitions', ARGV[1]) == 1 then \
     redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end return 0";

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
}

#[derive(Default)]
struct Counters {
    tries: AtomicU64,
    borrowing_tries: AtomicU64,
    transfers: AtomicU64,
    units_moved: AtomicU64,
    seals: AtomicU64,
    recovered: AtomicU64,
}

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
    counters: Counters,
}

impl PartitionedSale {
    /// Creates the sale `name`: its P partitions `{name/0}` .. `{name/P-1}` (each with its
    /// share of the stock, and its stream `{name/i}:events` with `events`), then the manifest
    /// hash `name`. Every argument is checked, and the module's presence too
    /// ([`Error::ModuleMissing`]), before anything is written. Fails with
    /// [`Error::SaleExists`] if a manifest of that name exists. The name is claimed with an
    /// expiry that the finished manifest drops: a create that fails half way gives the name
    /// back at once, and one whose process died gives it back within
    /// [`CREATE_CLAIM_MS`] (plus a millisecond per partition).
    pub fn create<C: ConnectionLike>(
        con: &mut C,
        name: &str,
        spec: &SaleSpec,
    ) -> Result<PartitionedSale> {
        check_name(name)?;
        spec.check()?;
        require_module(con)?;
        // The claim: whoever sets the manifest's first field owns the name, for a while.
        let claim_ms = CREATE_CLAIM_MS + u64::from(spec.partitions);
        let claimed: i64 = redis::Script::new(CLAIM_SCRIPT)
            .key(name)
            .arg(spec.partitions)
            .arg(claim_ms)
            .invoke(con)?;
        if claimed == 0 {
            return Err(Error::SaleExists(name.to_string()));
        }
        let sale = PartitionedSale::with_spec(name, spec.clone());
        match sale.write_partitions_and_manifest(con) {
            Ok(()) => Ok(sale),
            Err(e) => {
                // Give the name back; should this fail too, the claim's expiry does.
                let _: RedisResult<()> = cmd("DEL").arg(name).query(con);
                Err(e)
            }
        }
    }

    /// The partitions, then the manifest with its `ready` mark in one HSET, claim dropped.
    fn write_partitions_and_manifest<C: ConnectionLike>(&self, con: &mut C) -> Result<()> {
        let (name, spec) = (&self.name, &self.spec);
        for (index, key) in self.keys.iter().enumerate() {
            let index = index as u32;
            let mut init = cmd("SECKILL.INIT");
            init.arg(key)
                .arg(spec.share(spec.stock, index))
                .arg("LIMIT")
                .arg(spec.limit);
            for (option, value) in [
                ("HOLD", spec.hold_ms),
                ("START", spec.start_ms),
                ("END", spec.end_ms),
            ] {
                if let Some(value) = value {
                    init.arg(option).arg(value);
                }
            }
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
            let _: () = init.query(con)?;
        }
        let mut manifest = cmd("HSET");
        manifest.arg(name);
        for (field, value) in spec.manifest_fields(name) {
            manifest.arg(field).arg(value);
        }
        // Written last: a sale opens only once every partition exists.
        manifest.arg("ready").arg(1);
        let _: () = manifest.query(con)?;
        let _: () = cmd("PERSIST").arg(name).query(con)?;
        Ok(())
    }

    /// Opens the sale `name` from its manifest.
    pub fn open<C: ConnectionLike>(con: &mut C, name: &str) -> Result<PartitionedSale> {
        check_name(name)?;
        let fields: Vec<(String, String)> = cmd("HGETALL").arg(name).query(con)?;
        if fields.is_empty() {
            return Err(Error::NoSale(name.to_string()));
        }
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
        };
        if get("naming") != Some(partition_key(name, "<i>").as_str()) {
            return Err(Error::BadManifest(format!(
                "{name}: unknown partition naming"
            )));
        }
        Ok(PartitionedSale::with_spec(name, spec))
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
            keys,
            spec,
            mover: random_id(),
            next_transfer: AtomicU64::new(0),
            seal_ms: DEFAULT_SEAL_MS,
            retry: RetryPolicy::default(),
            counters: Counters::default(),
        }
    }

    /// How long a partition that found no stock anywhere stays sealed (default
    /// [`DEFAULT_SEAL_MS`]): longer makes a sold-out sale's refusals cheaper, shorter finds
    /// stock returned to another partition (a cancel, an expired hold) sooner.
    pub fn with_seal_ms(mut self, ms: u64) -> PartitionedSale {
        self.seal_ms = ms.max(1);
        self
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

    pub fn stats(&self) -> ClientStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let c = &self.counters;
        ClientStats {
            tries: get(&c.tries),
            borrowing_tries: get(&c.borrowing_tries),
            transfers: get(&c.transfers),
            units_moved: get(&c.units_moved),
            seals: get(&c.seals),
            recovered: get(&c.recovered),
        }
    }

    /// Buys `qty` units for `user` in the user's partition. When that partition is drained it
    /// borrows units from the others (LEND/ABSORB/SETTLE) and tries again, so the sale sells
    /// out completely; when no partition has any, the partition is sealed and later buyers
    /// there are refused in one round trip.
    ///
    /// The purchase carries a fresh attempt id: a call whose answer is lost (timeout, dropped
    /// connection, failover) is sent again with it until a definite answer, within the
    /// [`RetryPolicy`]; it is never bought twice. Past the deadline: [`Error::OutcomeUnknown`].
    pub fn try_buy<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]>,
        qty: u64,
    ) -> Result<TryReply> {
        Ok(self.buy(con, user.as_ref(), qty)?.0)
    }

    /// [`PartitionedSale::try_buy`], and whether any call of it had to be sent again.
    fn buy<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: &[u8],
        qty: u64,
    ) -> Result<(TryReply, bool)> {
        let partition = self.partition_of(user) as usize;
        self.counters.tries.fetch_add(1, Ordering::Relaxed);
        let attempt = new_attempt_id();
        let mut retrier = Retrier::new(&self.retry, &attempt);
        let mut borrows = 0;
        loop {
            let code: i64 = retrier.call(|| {
                cmd("SECKILL.TRY")
                    .arg(&self.keys[partition])
                    .arg(user)
                    .arg(qty)
                    .arg("ID")
                    .arg(&attempt)
                    .query(con)
            })?;
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
            match self.borrow(con, partition, qty) {
                Ok(true) => {}
                Ok(false) => return Ok((TryReply::SoldOut, retrier.retried())),
                Err(Error::Redis(e)) if is_retryable(&e) => retrier.pause(e)?,
                Err(e) => return Err(e),
            }
        }
    }

    /// [`PartitionedSale::try_buy`], then `WAIT replicas timeout_ms` on the same connection:
    /// also replies how many replicas acknowledged the purchase (and every earlier write of
    /// this connection) before the timeout. A purchase acknowledged by a replica survives the
    /// failover to it (see docs/durability.md). On a `ClusterConnection`
    /// WAIT goes to every master and the fewest acknowledgements are replied.
    pub fn try_buy_acked<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]>,
        qty: u64,
        replicas: u64,
        timeout_ms: u64,
    ) -> Result<(TryReply, u64)> {
        let (reply, retried) = self.buy(con, user.as_ref(), qty)?;
        // WAIT counts this connection's own writes. After a retry the write may have been made
        // on a connection lost since (or on a master since gone), and after a lost connection
        // nobody can say: the purchase then counts as acknowledged by none.
        let acked: u64 = if retried {
            0
        } else {
            match cmd("WAIT").arg(replicas).arg(timeout_ms).query(con) {
                Err(e) if is_retryable(&e) => 0,
                other => other?,
            }
        };
        Ok((reply, acked))
    }

    /// Looks for `qty` units for `partition` in the others: `true` when it may have them now
    /// (borrowed, or returned to it meanwhile), `false` when no partition had any at one
    /// instant.
    fn borrow<C: ConnectionLike>(&self, con: &mut C, partition: usize, qty: u64) -> Result<bool> {
        let _borrower = match self.borrowing[partition].try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                let guard = self.borrowing[partition]
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                // Another buyer of this partition just borrowed, or sealed it: look first.
                let info = self.partition_info(con, partition)?;
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
            let first = self.partition_infos(con)?;
            if first[partition].remaining >= qty {
                return Ok(true);
            }
            let donor = first
                .iter()
                .enumerate()
                .filter(|&(i, info)| i != partition && info.remaining > 0)
                .max_by_key(|&(_, info)| info.remaining);
            if let Some((donor, info)) = donor {
                let want = qty.max(self.batches[partition].load(Ordering::Relaxed));
                // At most half of what the donor has, so two drained partitions do not pass
                // the same units back and forth; but enough for this purchase if it can.
                let units = want
                    .min(info.remaining.div_ceil(2))
                    .max(qty.min(info.remaining));
                if self.transfer(con, donor, partition, units)? > 0 {
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
            if first.iter().any(|info| info.pending_out > 0) {
                // Units in flight: finish those transfers (safe even when their mover is
                // alive) and look again.
                self.recover(con)?;
                continue;
            }
            // Nothing anywhere, as far as these sequential reads show. Each partition changes
            // only by commands, so if a second pass reads every one the same, they all were
            // so at the instant between the passes: the sale had no units for this purchase.
            if self.partition_infos(con)? != first {
                continue;
            }
            if first[partition].remaining > 0 {
                return Ok(false);
            }
            let sealed: i64 = cmd("SECKILL.SEAL")
                .arg(&self.keys[partition])
                .arg(self.seal_ms)
                .query(con)?;
            if sealed == 1 {
                self.counters.seals.fetch_add(1, Ordering::Relaxed);
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Moves up to `units` from partition `from` to partition `to`; replies the units moved.
    fn transfer<C: ConnectionLike>(
        &self,
        con: &mut C,
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
        let lent: u64 = cmd("SECKILL.LEND")
            .arg(from)
            .arg(&id)
            .arg(units)
            .arg("TO")
            .arg(to)
            .query(con)?;
        finish_transfer(con, from, id.as_bytes(), lent, to)?;
        if lent > 0 {
            self.counters.transfers.fetch_add(1, Ordering::Relaxed);
            self.counters.units_moved.fetch_add(lent, Ordering::Relaxed);
        }
        Ok(lent)
    }

    /// Finishes every transfer between this sale's partitions that a mover started and did
    /// not finish (it crashed, or lost its connection, between LEND and SETTLE); replies how
    /// many. Safe to run at any time, also while movers are working: every step is idempotent.
    /// `try_buy` runs it when it finds units in flight and none elsewhere.
    pub fn recover<C: ConnectionLike>(&self, con: &mut C) -> Result<u64> {
        let mut finished = 0;
        for key in &self.keys {
            let pending: Vec<Value> = cmd("SECKILL.TRANSFERS").arg(key).query(con)?;
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
                finish_transfer(con, key, &id, units, &to)?;
                finished += 1;
            }
        }
        self.counters
            .recovered
            .fetch_add(finished, Ordering::Relaxed);
        Ok(finished)
    }

    /// Each partition's `SECKILL.INFO`, partition 0 first.
    pub fn partition_infos<C: ConnectionLike>(&self, con: &mut C) -> Result<Vec<PartitionInfo>> {
        (0..self.keys.len())
            .map(|index| self.partition_info(con, index))
            .collect()
    }

    fn partition_info<C: ConnectionLike>(
        &self,
        con: &mut C,
        index: usize,
    ) -> Result<PartitionInfo> {
        let reply: Value = cmd("SECKILL.INFO").arg(&self.keys[index]).query(con)?;
        PartitionInfo::from_fields(&parse_fields(reply)?)
    }

    /// Totals over the partitions. The partitions are read one after the other, so under
    /// traffic the sum is of slightly different instants; units in flight are counted apart.
    pub fn info<C: ConnectionLike>(&self, con: &mut C) -> Result<SaleInfo> {
        Ok(SaleInfo::total(self.partition_infos(con)?))
    }

    /// Units `user` owns (held or final).
    pub fn bought<C: ConnectionLike>(&self, con: &mut C, user: impl AsRef<[u8]>) -> Result<u64> {
        let user = user.as_ref();
        Ok(cmd("SECKILL.BOUGHT")
            .arg(self.key_of(user))
            .arg(user)
            .query(con)?)
    }

    /// Makes the user's held units final: `false` if nothing was held.
    pub fn confirm<C: ConnectionLike>(&self, con: &mut C, user: impl AsRef<[u8]>) -> Result<bool> {
        let user = user.as_ref();
        let confirmed: i64 = cmd("SECKILL.CONFIRM")
            .arg(self.key_of(user))
            .arg(user)
            .query(con)?;
        Ok(confirmed == 1)
    }

    /// Returns `qty` of the user's units (all with `None`) to the user's partition; replies
    /// the units returned. Retried with an attempt id as `try_buy` is: never returned twice.
    pub fn cancel<C: ConnectionLike>(
        &self,
        con: &mut C,
        user: impl AsRef<[u8]>,
        qty: Option<u64>,
    ) -> Result<u64> {
        let user = user.as_ref();
        let attempt = new_attempt_id();
        let mut cancel = cmd("SECKILL.CANCEL");
        cancel.arg(self.key_of(user)).arg(user);
        if let Some(qty) = qty {
            cancel.arg(qty);
        }
        cancel.arg("ID").arg(&attempt);
        with_retries(&self.retry, &attempt, || cancel.query(con))
    }

    /// Adds `units`, split evenly over the partitions.
    pub fn restock<C: ConnectionLike>(&self, con: &mut C, units: u64) -> Result<()> {
        if units == 0 {
            return Err(Error::InvalidArgument(
                "units must be an integer between 1 and 9223372036854775807".to_string(),
            ));
        }
        for (index, key) in self.keys.iter().enumerate() {
            let share = self.spec.share(units, index as u32);
            if share > 0 {
                let _: i64 = cmd("SECKILL.RESTOCK").arg(key).arg(share).query(con)?;
            }
        }
        Ok(())
    }

    /// Every buyer of every partition (a merged `SECKILL.BUYERS` scan). A user buys in one
    /// partition only, so nobody appears twice.
    pub fn buyers<C: ConnectionLike>(&self, con: &mut C) -> Result<Vec<Buyer>> {
        let mut all = Vec::new();
        for (partition, key) in self.keys.iter().enumerate() {
            let mut cursor = "0".to_string();
            loop {
                let (next, rows): (String, Vec<Value>) = cmd("SECKILL.BUYERS")
                    .arg(key)
                    .arg(&cursor)
                    .arg("COUNT")
                    .arg(1_000)
                    .query(con)?;
                for row in rows.chunks(3) {
                    all.push(Buyer::from_row(partition as u32, row)?);
                }
                if next == "0" {
                    break;
                }
                cursor = next;
            }
        }
        Ok(all)
    }

    /// Creates the consumer group `group` on every partition's stream (reading from the
    /// start); a group that exists already is kept.
    pub fn create_group<C: ConnectionLike>(&self, con: &mut C, group: &str) -> Result<()> {
        for stream in self.event_streams() {
            let created: redis::RedisResult<()> = cmd("XGROUP")
                .arg("CREATE")
                .arg(&stream)
                .arg(group)
                .arg("0")
                .arg("MKSTREAM")
                .query(con);
            match created {
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Up to `count` new events per partition for `consumer` of `group` (XREADGROUP `>` on
    /// each stream in turn; streams of different slots cannot be read in one call).
    pub fn read_group<C: ConnectionLike>(
        &self,
        con: &mut C,
        group: &str,
        consumer: &str,
        count: usize,
    ) -> Result<Vec<SaleEvent>> {
        let mut events = Vec::new();
        for (partition, stream) in self.event_streams().into_iter().enumerate() {
            let reply: Option<redis::streams::StreamReadReply> = cmd("XREADGROUP")
                .arg("GROUP")
                .arg(group)
                .arg(consumer)
                .arg("COUNT")
                .arg(count)
                .arg("STREAMS")
                .arg(&stream)
                .arg(">")
                .query(con)?;
            for key in reply.map(|r| r.keys).unwrap_or_default() {
                for entry in key.ids {
                    events.push(SaleEvent::from_entry(partition as u32, &stream, entry)?);
                }
            }
        }
        Ok(events)
    }

    /// Acknowledges an event read by [`PartitionedSale::read_group`].
    pub fn ack<C: ConnectionLike>(
        &self,
        con: &mut C,
        group: &str,
        event: &SaleEvent,
    ) -> Result<bool> {
        let acked: i64 = cmd("XACK")
            .arg(&event.stream)
            .arg(group)
            .arg(&event.id)
            .query(con)?;
        Ok(acked == 1)
    }

    /// Deletes the sale: partitions, streams, then the manifest (also a half-created one's).
    pub fn delete<C: ConnectionLike>(con: &mut C, name: &str) -> Result<()> {
        check_name(name)?;
        let partitions: Option<u32> = cmd("HGET").arg(name).arg("partitions").query(con)?;
        for index in 0..partitions.unwrap_or(0).min(MAX_PARTITIONS) {
            let key = partition_key(name, index);
            let _: () = cmd("DEL").arg(&key).query(con)?;
            let _: () = cmd("DEL").arg(format!("{key}:events")).query(con)?;
        }
        let _: () = cmd("DEL").arg(name).query(con)?;
        Ok(())
    }
}

/// ABSORB (when units moved) then SETTLE: the steps after LEND, each idempotent.
fn finish_transfer<C: ConnectionLike>(
    con: &mut C,
    from: &str,
    id: &[u8],
    units: u64,
    to: &str,
) -> Result<()> {
    if units > 0 {
        let _: i64 = cmd("SECKILL.ABSORB")
            .arg(to)
            .arg(id)
            .arg(units)
            .arg("FROM")
            .arg(from)
            .query(con)?;
    }
    let _: i64 = cmd("SECKILL.SETTLE").arg(from).arg(id).query(con)?;
    Ok(())
}

/// [`Error::ModuleMissing`] unless the server knows `SECKILL.INIT`; nothing written.
fn require_module<C: ConnectionLike>(con: &mut C) -> Result<()> {
    let described: Vec<Value> = cmd("COMMAND").arg("INFO").arg("SECKILL.INIT").query(con)?;
    match described.first() {
        Some(Value::Nil) | None => Err(Error::ModuleMissing),
        Some(_) => Ok(()),
    }
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

/// A purchase's or a cancel's attempt id: 32 random hex digits.
fn new_attempt_id() -> String {
    format!("{}{}", random_id(), random_id())
}

/// 16 random hex digits, from the standard library's randomly keyed hasher.
fn random_id() -> String {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
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
        let ids: std::collections::HashSet<String> = (0..100).map(|_| random_id()).collect();
        assert_eq!(ids.len(), 100);
    }
}
