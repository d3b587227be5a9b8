//! Stock that follows demand: a drained partition borrows from the others (LEND, ABSORB,
//! SETTLE, each idempotent), seals itself when every partition was found empty, and finishes
//! the transfers a mover left half done.

use super::{PartitionedSale, SCAN_READ_TIMEOUT};
use crate::durability::Change;
use crate::error::{Error, Result};
use crate::info::{PartitionInfo, parse_fields};
use crate::keeping;
use crate::key;
use crate::link::{Blocking, Link, block_on};
use crate::retry::is_retryable;
use redis::{ConnectionLike, RedisResult, Value, cmd};
use std::sync::atomic::Ordering;
use std::time::Instant;

impl PartitionedSale {
    /// For a user waiting in its partition's room: when the partition is drained (and not
    /// sealed), stock is borrowed for it; true when a borrow ran (its room may have changed).
    pub(crate) async fn borrow_for_waiters<L: Link>(
        &self,
        link: &mut L,
        user: &[u8],
    ) -> Result<bool> {
        let partition = self.partition_of(user) as usize;
        let info = key::info(link, &self.keys[partition]).await?;
        if info.remaining > 0 || info.sealed {
            return Ok(false);
        }
        self.borrow(link, partition, 1).await?;
        Ok(true)
    }

    /// Looks for `qty` units for `partition` in the others: `true` when it may have them now
    /// (borrowed, or returned to it meanwhile), `false` when no partition had any at one
    /// instant.
    pub(super) async fn borrow<L: Link>(
        &self,
        link: &mut L,
        partition: usize,
        qty: u64,
    ) -> Result<bool> {
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
                .filter(|&(i, info)| i != partition && info.lendable() > 0)
                .max_by_key(|&(_, info)| info.lendable());
            if let Some((donor, info)) = donor {
                let want = qty.max(self.batches[partition].load(Ordering::Relaxed));
                // At most half of what the donor has, so two drained partitions do not pass
                // the same units back and forth; but enough for this purchase if it can.
                let units = want
                    .min(info.lendable().div_ceil(2))
                    .max(qty.min(info.lendable()));
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
            let unreachable = read.len() < self.keys.len();
            if first.iter().flatten().any(|info| info.pending_out > 0) {
                // Units in flight: finish those transfers (safe even when their mover is
                // alive) and look again. Only those toward a partition just read: one toward
                // a partition that could not be read would wait on its master (it stays
                // pending, its units counted as that partition's, below).
                if self.recover_keys(link, &read, &read).await? > 0 || !unreachable {
                    continue;
                }
            }
            let promised_elsewhere = first
                .iter()
                .enumerate()
                .any(|(i, info)| i != partition && info.as_ref().is_some_and(|i| i.remaining > 0));
            if promised_elsewhere {
                // Units are left only where waiting rooms promised them to admitted users:
                // nothing to lend now, and not sold out (a lapsed window frees its unit).
                return Ok(false);
            }
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
        // Not replicated: the purchase tries again in its time.
        let lent: u64 = match self.kept_lend(link, from, id.as_bytes(), units, to).await {
            Err(Error::NotReplicated { .. }) => {
                let waited = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("loan {id} not acknowledged by a replica in time"),
                );
                return Err(Error::Redis(waited.into()));
            }
            other => other?,
        };
        finish_transfer(link, from, id.as_bytes(), lent, to).await?;
        if lent > 0 {
            self.counters.transfers.fetch_add(1, Ordering::Relaxed);
            self.counters.units_moved.fetch_add(lent, Ordering::Relaxed);
        }
        Ok(lent)
    }

    /// Finishes every transfer between this sale's partitions that a mover started and did
    /// not finish (it crashed, or lost its connection, between LEND and SETTLE); replies how
    /// many. Safe to run at any time, also while movers are working: every step is idempotent.
    /// `try_buy` runs it when it finds units in flight and none elsewhere. With a durability,
    /// a transfer is absorbed only once a replica of its source has the LEND (sent again under
    /// its id, which moves nothing): one no replica acknowledged stays pending.
    pub fn recover<C: ConnectionLike>(&self, con: &mut C) -> Result<u64> {
        block_on(self.recover_on(&mut Blocking(con)))
    }

    pub(crate) async fn recover_on<L: Link>(&self, link: &mut L) -> Result<u64> {
        let keys: Vec<&String> = self.keys.iter().collect();
        self.recover_keys(link, &keys, &keys).await
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

    /// Ends the transfers pending on `keys` toward `targets` (of this sale's partitions):
    /// how many it ended.
    async fn recover_keys<L: Link>(
        &self,
        link: &mut L,
        keys: &[&String],
        targets: &[&String],
    ) -> Result<u64> {
        let mut finished = 0;
        for &key in keys {
            let pending: Vec<Value> = link
                .query(cmd("SECKILL.TRANSFERS").arg(key).arg("WITHASKED"))
                .await?;
            for transfer in pending.chunks(5) {
                let [id, units, to, _age, asked] = transfer else {
                    continue;
                };
                let id: Vec<u8> = redis::from_redis_value(id.clone())?;
                let units: u64 = redis::from_redis_value(units.clone())?;
                let to: String = redis::from_redis_value(to.clone())?;
                let asked: u64 = redis::from_redis_value(asked.clone())?;
                // Only transfers between this sale's own partitions are this client's to end.
                if !targets.iter().any(|target| **target == to) {
                    continue;
                }
                if units > 0 {
                    match self.kept_lend(link, key, &id, asked.max(units), &to).await {
                        // No replica has the LEND yet: left pending.
                        Err(Error::NotReplicated { .. }) => continue,
                        other => other?,
                    };
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

    /// `SECKILL.LEND` as a kept write: the units lent, [`Error::NotReplicated`] when no replica
    /// acknowledged it in time. The units lent must not come back to the source while the
    /// target has them: a LEND a failover of the source's master could take back is not
    /// absorbed (its transfer stays pending, for the next borrow or recover). Sent again for a
    /// transfer another mover started, it moves nothing and propagates a marker the WAIT counts.
    async fn kept_lend<L: Link>(
        &self,
        link: &mut L,
        from: &str,
        id: &[u8],
        units: u64,
        to: &str,
    ) -> Result<u64> {
        let lend = cmd("SECKILL.LEND")
            .arg(from)
            .arg(id)
            .arg(units)
            .arg("TO")
            .arg(to)
            .clone();
        keeping::kept_write(link, &lend, (from, Change::Units), self.keeping()).await
    }
}

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
