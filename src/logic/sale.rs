//! The flash-sale state machine. No Redis types: the command layer passes the clock in, feeds
//! it and replies; so every branch is unit-tested with a fake clock, and a replica that is
//! given its master's clock reaches exactly the master's state.
//!
//! Per user there is one order at a time (see `Entry`): a user's first purchase opens it, and
//! later purchases add to it until all its units have gone back to stock. With HOLD, bought
//! units are *held* until confirmed; an unconfirmed hold expires and its units go back.
//!
//! The identity kept by every method, at every instant:
//! `remaining + held + sold == stock + restocked`, where `sold` counts final units still
//! owned (refunds take them out), and no user owns more than `limit` units.

use super::buyers::{Buyers, Entry, Layout, Slot};
use super::escrow::{Ledger, Leg, MAX_TRANSFER_ID, Pending, Transfer};
use std::collections::VecDeque;
use std::num::NonZeroU64;

/// Largest stock, limit or quantity: Redis integers are signed 64-bit.
pub const MAX_UNITS: u64 = i64::MAX as u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaleError {
    /// A user id must not be empty.
    EmptyUser,
    /// `qty` must be in 1..=limit.
    QtyOutOfRange { limit: u64 },
    /// A restock would take the sale's units past `MAX_UNITS`.
    TooMuchStock,
    /// CONFIRM on a sale made without HOLD, where nothing is ever held.
    NoHolds,
    /// A BUYERS cursor that no scan of this sale returned.
    InvalidCursor,
    /// LEND or ABSORB at or after the sale's END: its transfer ids are being forgotten.
    Ended,
    /// A transfer id reused for another transfer.
    TransferConflict(&'static str),
    /// Bad settings, or a restored sale that breaks the invariants.
    Invalid(&'static str),
    /// The buyer table holds all the user ids it can (about 4 GiB of them).
    BuyersFull,
    /// SEAL on a sale that is not a partition of a larger one.
    NotPartition,
}

/// Most partitions one sale may have: one per cluster hash slot.
pub const MAX_PARTITIONS: u64 = 16_384;

/// A sale key that is one partition of a larger sale, described by its manifest key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub manifest: Vec<u8>,
    pub index: u64,
    pub count: u64,
}

/// How a sale is set up by SECKILL.INIT.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SaleConfig {
    pub stock: u64,
    pub limit: u64,
    /// Purchases are held this long awaiting confirmation; `None`: final at once.
    pub hold_ms: Option<u64>,
    /// TRY before this instant (unix ms) is refused.
    pub start_ms: Option<u64>,
    /// TRY at or after this instant (unix ms) is refused.
    pub end_ms: Option<u64>,
    /// The stream every state change is written to.
    pub events: Option<Vec<u8>>,
    /// The stream is trimmed to about this many entries (approximately, whole nodes).
    pub events_maxlen: Option<u64>,
    /// Set when this sale key is one partition of a larger sale.
    pub partition: Option<Partition>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryOutcome {
    /// The units were taken (held, with HOLD); this many are left.
    Bought { remaining: u64 },
    /// Fewer than `qty` units left (in a partition: and it is sealed, so none is left
    /// anywhere in the sale).
    SoldOut,
    /// A partition with fewer than `qty` units left that is not sealed: other partitions may
    /// still lend it some.
    Drained,
    /// The user would go over the per-user limit.
    LimitExceeded,
    /// Before the sale's START.
    NotStarted,
    /// At or after the sale's END.
    Ended,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Purchase,
    Confirm,
    Cancel,
    Expire,
    Restock,
    /// Units lent to another sale key.
    Lend,
    /// Units absorbed from another sale key.
    Absorb,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Purchase => "purchase",
            EventKind::Confirm => "confirm",
            EventKind::Cancel => "cancel",
            EventKind::Expire => "expire",
            EventKind::Restock => "restock",
            EventKind::Lend => "lend",
            EventKind::Absorb => "absorb",
        }
    }
}

/// One state change, for the event stream and the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaleEvent {
    pub kind: EventKind,
    /// The buyer's record (`None` for a restock): records never move, so the user is found there.
    pub slot: Option<Slot>,
    pub qty: u64,
    /// The order number (0 for a restock, and in sales without an event stream).
    pub order: u64,
    /// Units left after the change.
    pub remaining: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuyerState {
    /// Some units await confirmation.
    Held,
    /// Every unit is final.
    Final,
}

impl BuyerState {
    pub fn name(self) -> &'static str {
        match self {
            BuyerState::Held => "held",
            BuyerState::Final => "final",
        }
    }
}

/// One buyer in a scan: user, units owned, state.
pub type BuyerRow<'a> = (&'a [u8], u64, BuyerState);

/// What SECKILL.INFO reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaleSummary {
    pub stock: u64,
    pub remaining: u64,
    pub sold: u64,
    pub buyers: u64,
    pub limit: u64,
    pub sold_out: bool,
    pub held: u64,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    pub hold_ms: Option<u64>,
    pub restocked: u64,
    pub refunded: u64,
    /// Units ever lent to other sale keys, and absorbed from them.
    pub lent: u64,
    pub absorbed: u64,
    /// Units of outgoing transfers not yet settled.
    pub pending_out: u64,
    /// A partition sealed as sold out (until stock comes back or the seal lapses).
    pub sealed: bool,
}

/// The persisted counters of a sale, besides its config and buyers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SaleTotals {
    pub seed: [u8; 16],
    pub restocked: u64,
    pub refunded: u64,
    /// The last order number issued.
    pub orders: u64,
    /// A partition found no stock anywhere in its sale: until then (unix ms) a purchase that
    /// finds it drained is sold out, not `Drained`. Stock coming back lifts it.
    pub sealed_until_ms: u64,
    /// The clock (unix ms) of the last change replicated together with its clock. A change
    /// made at this same ms may replicate as the bare command: the replica, whose copy of the
    /// sale holds the same value, replays it at this clock.
    pub replay_clock_ms: u64,
    /// The ID (ms, seq) of the last stream entry written for this sale, from which the next
    /// one's is derived alike on a master and its replicas; (0, 0) before the first.
    pub last_entry_id: (u64, u64),
}

#[derive(Clone)]
pub struct Sale {
    config: SaleConfig,
    totals: SaleTotals,
    remaining: u64,
    held: u64,
    sold: u64,
    buyers: Buyers,
    /// Every live hold's `(deadline, slot)`, in deadline order, plus stale ones: a confirm or
    /// cancel leaves its hold's item behind, and an item counts only while its record still
    /// holds units under that deadline (see [`Sale::is_live`]). Deadlines are `now + HOLD`,
    /// so they come in order and a purchase appends one in O(1); the front is kept live.
    holds: VecDeque<(u64, Slot)>,
    /// Stock moved to and from other sale keys.
    ledger: Ledger,
    /// Changes not yet taken by the command layer.
    events: Vec<SaleEvent>,
    /// Whether anything changed since the last `clear_events`, with or without an event (a
    /// settled transfer, forgotten transfer ids): what the command layer replicates.
    changed: bool,
}

/// The ID a stream entry takes at `now_ms` after an entry with ID `last`, as a stream's own
/// `*` gives it: `now-0`, or one past `last` within its ms when the clock has not moved past
/// it. `None` past the largest ID.
pub fn next_entry_id(last: (u64, u64), now_ms: u64) -> Option<(u64, u64)> {
    let (ms, seq) = last;
    if now_ms > ms {
        Some((now_ms, 0))
    } else if let Some(seq) = seq.checked_add(1) {
        Some((ms, seq))
    } else {
        Some((ms.checked_add(1)?, 0))
    }
}

/// A bijection on 62-bit integers, so distinct order numbers give distinct UUIDs.
fn scramble62(mut x: u64) -> u64 {
    const MASK: u64 = (1 << 62) - 1;
    x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) & MASK;
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9) & MASK;
    x ^ (x >> 32)
}

impl Sale {
    pub fn new(config: SaleConfig, seed: [u8; 16]) -> Result<Sale, SaleError> {
        if config.stock > MAX_UNITS {
            return Err(SaleError::Invalid("stock out of range"));
        }
        if config.limit == 0 || config.limit > MAX_UNITS {
            return Err(SaleError::Invalid("limit out of range"));
        }
        if config.hold_ms.is_some_and(|ms| ms == 0 || ms > MAX_UNITS) {
            return Err(SaleError::Invalid("HOLD out of range"));
        }
        if config.end_ms == Some(0) {
            return Err(SaleError::Invalid("END out of range"));
        }
        if let (Some(start), Some(end)) = (config.start_ms, config.end_ms)
            && start >= end
        {
            return Err(SaleError::Invalid("END must be after START"));
        }
        if config.events.as_ref().is_some_and(|name| name.is_empty()) {
            return Err(SaleError::Invalid("EVENTS stream name is empty"));
        }
        if let Some(p) = &config.partition
            && (p.manifest.is_empty()
                || p.count == 0
                || p.count > MAX_PARTITIONS
                || p.index >= p.count)
        {
            return Err(SaleError::Invalid("PARTITION out of range"));
        }
        let layout = Layout {
            limit: config.limit,
            holds: config.hold_ms.is_some(),
            orders: config.events.is_some(),
        };
        Ok(Sale {
            remaining: config.stock,
            held: 0,
            sold: 0,
            buyers: Buyers::new(layout),
            holds: VecDeque::new(),
            ledger: Ledger::default(),
            events: Vec::new(),
            changed: false,
            totals: SaleTotals {
                seed,
                ..SaleTotals::default()
            },
            config,
        })
    }

    /// Rebuilds a sale from persisted parts, refusing anything that breaks an invariant.
    pub fn restore<'a>(
        config: SaleConfig,
        totals: SaleTotals,
        ledger: Ledger,
        record_count: usize,
        user_bytes: usize,
        records: impl Iterator<Item = (&'a [u8], Entry)>,
    ) -> Result<Sale, SaleError> {
        let mut sale = Sale::new(config, totals.seed)?;
        sale.totals = totals;
        sale.ledger = ledger;
        let supply = sale
            .units_added(0)
            .and_then(|added| added.checked_sub(sale.ledger.lent()))
            .ok_or(SaleError::Invalid("stock out of range"))?;
        let (mut owned, mut held, mut sold) = (0u64, 0, 0);
        let mut holds = Vec::new();
        sale.buyers.reserve(record_count, user_bytes);
        let layout = sale.buyers.layout();
        let limit = sale.config.limit;
        let mut loader = sale.buyers.loader(record_count);
        for (user, entry) in records {
            if user.is_empty() {
                return Err(SaleError::EmptyUser);
            }
            // A field the layout does not store would be lost, and the sale's encoding with it.
            let unstorable = (!layout.holds && (entry.held_qty != 0 || entry.expires_at_ms != 0))
                || (!layout.orders && entry.order != 0);
            if entry.units() > limit || unstorable || entry.order > totals.orders {
                return Err(SaleError::Invalid("buyer record out of range"));
            }
            if !loader.has_room() {
                return Err(SaleError::BuyersFull);
            }
            owned = owned
                .checked_add(entry.units())
                .filter(|&units| units <= supply)
                .ok_or(SaleError::Invalid("buyers hold more than the stock"))?;
            let slot = loader
                .push(user, &entry)
                .ok_or(SaleError::Invalid("duplicate buyer"))?;
            if entry.held_qty > 0 {
                holds.push((entry.expires_at_ms, slot));
            }
            held += entry.held_qty;
            sold += entry.final_qty;
        }
        if !loader.finish() {
            return Err(SaleError::Invalid("duplicate buyer"));
        }
        sale.held = held;
        sale.sold = sold;
        sale.remaining = supply - owned;
        sale.buyers.shrink_to_fit();
        holds.sort_unstable();
        sale.holds = holds.into();
        Ok(sale)
    }

    pub fn config(&self) -> &SaleConfig {
        &self.config
    }

    /// Every unit that ever came into the sale (stock, restocks, absorbed transfers) plus
    /// `more`, if that stays within `MAX_UNITS`.
    fn units_added(&self, more: u64) -> Option<u64> {
        self.config
            .stock
            .checked_add(self.totals.restocked)?
            .checked_add(self.ledger.absorbed())?
            .checked_add(more)
            .filter(|&units| units <= MAX_UNITS)
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    #[cfg(test)]
    pub fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    fn has_ended(&self, now_ms: u64) -> bool {
        self.config.end_ms.is_some_and(|end| now_ms >= end)
    }

    pub fn totals(&self) -> &SaleTotals {
        &self.totals
    }

    pub fn buyers(&self) -> &Buyers {
        &self.buyers
    }

    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// When the earliest live hold expires.
    pub fn next_expiry(&self) -> Option<u64> {
        self.holds.front().map(|&(at, _)| at)
    }

    /// Whether the hold item `(at, slot)` still stands for units held until `at`.
    fn is_live(&self, at: u64, slot: Slot) -> bool {
        let entry = self.buyers.entry(slot).1;
        entry.held_qty > 0 && entry.expires_at_ms == at
    }

    /// Queues a new hold's deadline. Deadlines arrive in order unless the clock went back;
    /// then the item goes where its deadline belongs, still near the back for a small step.
    fn queue_hold(&mut self, at: u64, slot: Slot) {
        match self.holds.back() {
            Some(&(last, _)) if last > at => {
                let place = self.holds.partition_point(|&(queued, _)| queued <= at);
                self.holds.insert(place, (at, slot));
            }
            _ => self.holds.push_back((at, slot)),
        }
    }

    /// Drops the stale items at the front, so that the front is the next hold to expire.
    fn drop_stale_holds(&mut self) {
        while let Some(&(at, slot)) = self.holds.front()
            && !self.is_live(at, slot)
        {
            self.holds.pop_front();
        }
    }

    /// The UUID of order number `order`: version 8 (RFC 9562), derived from the sale's random
    /// seed so it costs no storage and replays identically; unique within the sale.
    /// The order's UUID in its 36-character text form, written without allocating: it is
    /// formatted for every purchase of a sale with a stream.
    pub fn order_uuid(&self, order: u64) -> [u8; 36] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let seed = self.totals.seed;
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&seed[..8]);
        let tail = u64::from_be_bytes(seed[8..].try_into().expect("8 bytes"));
        let low = (scramble62(order) ^ tail) & ((1 << 62) - 1) | (0b10 << 62);
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        bytes[6] = (bytes[6] & 0x0f) | 0x80;
        let mut text = [b'-'; 36];
        let mut at = 0;
        for (i, byte) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                at += 1;
            }
            text[at] = HEX[usize::from(byte >> 4)];
            text[at + 1] = HEX[usize::from(byte & 0x0f)];
            at += 2;
        }
        text
    }

    /// Checks the arguments of a purchase without touching the sale.
    pub fn check_request(&self, user: &[u8], qty: u64) -> Result<(), SaleError> {
        if user.is_empty() {
            return Err(SaleError::EmptyUser);
        }
        if qty == 0 || qty > self.config.limit {
            return Err(SaleError::QtyOutOfRange {
                limit: self.config.limit,
            });
        }
        Ok(())
    }

    fn record(&mut self, kind: EventKind, slot: Option<Slot>, qty: u64, order: u64) {
        self.changed = true;
        if matches!(
            kind,
            EventKind::Cancel | EventKind::Expire | EventKind::Restock | EventKind::Absorb
        ) {
            // Stock came back: a buyer who finds this partition drained again must look for
            // more in the others, not be told the whole sale is sold out.
            self.totals.sealed_until_ms = 0;
        }
        self.events.push(SaleEvent {
            kind,
            slot,
            qty,
            order,
            remaining: self.remaining,
        });
    }

    /// The changes made since the last [`Sale::clear_events`], in order.
    pub fn events(&self) -> &[SaleEvent] {
        &self.events
    }

    /// Whether the sale changed since the last [`Sale::clear_events`].
    pub fn changed(&self) -> bool {
        self.changed
    }

    pub fn clear_events(&mut self) {
        self.events.clear();
        self.changed = false;
    }

    /// Returns the units of every hold due at `now_ms` to stock; once the sale has ended,
    /// forgets its finished transfers (none can be lent or absorbed again).
    pub fn settle(&mut self, now_ms: u64) {
        if self.has_ended(now_ms) {
            self.changed |= self.ledger.forget_finished();
        }
        let mut popped = false;
        while let Some(&(at, slot)) = self.holds.front()
            && at <= now_ms
        {
            self.holds.pop_front();
            popped = true;
            if !self.is_live(at, slot) {
                continue;
            }
            let (_, mut entry) = self.buyers.entry(slot);
            let qty = entry.held_qty;
            entry.held_qty = 0;
            self.buyers.set(slot, &entry);
            self.held -= qty;
            self.remaining += qty;
            self.record(EventKind::Expire, Some(slot), qty, entry.order);
        }
        if popped {
            self.drop_stale_holds();
        }
    }

    /// Whether [`Sale::settle`] at `now_ms` would change anything: it must look at what
    /// `settle` does, or a TRY called unchanged could change the sale without its stream.
    fn settle_due(&self, now_ms: u64) -> bool {
        (self.has_ended(now_ms) && self.ledger.has_finished())
            || self.holds.front().is_some_and(|&(at, _)| at <= now_ms)
    }

    /// The refusal a TRY of `qty` at `now_ms` gets before any buyer is looked up (window,
    /// sold out, drained), once due holds are settled.
    fn refusal_before_lookup(&self, qty: u64, now_ms: u64) -> Option<TryOutcome> {
        if self.config.start_ms.is_some_and(|start| now_ms < start) {
            return Some(TryOutcome::NotStarted);
        }
        if self.has_ended(now_ms) {
            return Some(TryOutcome::Ended);
        }
        if self.remaining < qty {
            return Some(
                if self.config.partition.is_some() && !self.is_sealed(now_ms) {
                    TryOutcome::Drained
                } else {
                    TryOutcome::SoldOut
                },
            );
        }
        None
    }

    /// The refusal a TRY of `qty` at `now_ms` gets without changing the sale at all, if it
    /// is known without a buyer lookup: then the command layer need not open the sale's
    /// stream (a sold-out storm on a sale with EVENTS). `None` when the TRY may change the
    /// sale, or is refused only after a lookup (LIMIT).
    pub fn unchanged_refusal(&self, qty: u64, now_ms: u64) -> Option<TryOutcome> {
        if self.settle_due(now_ms) {
            return None;
        }
        self.refusal_before_lookup(qty, now_ms)
    }

    /// One purchase attempt at `now_ms`: due holds expire, then the window is checked, then
    /// sold out (no buyer lookup), then the per-user limit; then the units are taken.
    pub fn try_buy(&mut self, user: &[u8], qty: u64, now_ms: u64) -> Result<TryOutcome, SaleError> {
        self.check_request(user, qty)?;
        self.settle(now_ms);
        if let Some(refusal) = self.refusal_before_lookup(qty, now_ms) {
            return Ok(refusal);
        }
        let found = self.buyers.find(user);
        let mut entry = found.map_or_else(Entry::default, |(_, entry)| entry);
        if entry.units() + qty > self.config.limit {
            return Ok(TryOutcome::LimitExceeded);
        }
        if found.is_none() && !self.buyers.has_room() {
            return Err(SaleError::BuyersFull);
        }
        if entry.units() == 0 && self.buyers.layout().orders {
            self.totals.orders += 1;
            entry.order = self.totals.orders;
        }
        let opens_hold = self.config.hold_ms.is_some() && entry.held_qty == 0;
        match self.config.hold_ms {
            Some(hold_ms) => {
                if opens_hold {
                    entry.expires_at_ms = now_ms.saturating_add(hold_ms);
                }
                // Units bought while a hold is live join it, under its deadline.
                entry.held_qty += qty;
                self.held += qty;
            }
            None => {
                entry.final_qty += qty;
                self.sold += qty;
            }
        }
        let slot = match found {
            Some((slot, _)) => {
                self.buyers.set(slot, &entry);
                slot
            }
            None => self.buyers.insert(user, &entry),
        };
        if opens_hold {
            self.queue_hold(entry.expires_at_ms, slot);
        }
        self.remaining -= qty;
        self.record(EventKind::Purchase, Some(slot), qty, entry.order);
        Ok(TryOutcome::Bought {
            remaining: self.remaining,
        })
    }

    /// Makes the user's live hold final: `false` if there was none (never held, already
    /// final, or expired); an error for a sale without HOLD, where there never is one.
    pub fn confirm(&mut self, user: &[u8], now_ms: u64) -> Result<bool, SaleError> {
        if user.is_empty() {
            return Err(SaleError::EmptyUser);
        }
        if self.config.hold_ms.is_none() {
            return Err(SaleError::NoHolds);
        }
        self.settle(now_ms);
        let Some((slot, mut entry)) = self.buyers.find(user) else {
            return Ok(false);
        };
        if entry.held_qty == 0 {
            return Ok(false);
        }
        let qty = entry.held_qty;
        entry.final_qty += qty;
        entry.held_qty = 0;
        self.buyers.set(slot, &entry);
        self.drop_stale_holds();
        self.held -= qty;
        self.sold += qty;
        self.record(EventKind::Confirm, Some(slot), qty, entry.order);
        Ok(true)
    }

    /// Returns up to `qty` (default: all) of the user's units to stock, held ones first, then
    /// final ones (a refund). Replies the units returned. `qty` must be in 1..=limit, as for
    /// a purchase: nobody owns more.
    pub fn cancel(&mut self, user: &[u8], qty: Option<u64>, now_ms: u64) -> Result<u64, SaleError> {
        if let Some(qty) = qty {
            self.check_request(user, qty)?;
        } else if user.is_empty() {
            return Err(SaleError::EmptyUser);
        }
        self.settle(now_ms);
        let Some((slot, mut entry)) = self.buyers.find(user) else {
            return Ok(0);
        };
        let returned = qty.map_or(entry.units(), |qty| qty.min(entry.units()));
        if returned == 0 {
            return Ok(0);
        }
        let from_hold = returned.min(entry.held_qty);
        let refunded = returned - from_hold;
        entry.held_qty -= from_hold;
        entry.final_qty -= refunded;
        self.buyers.set(slot, &entry);
        self.drop_stale_holds();
        self.held -= from_hold;
        self.sold -= refunded;
        self.totals.refunded += refunded;
        self.remaining += returned;
        self.record(EventKind::Cancel, Some(slot), returned, entry.order);
        Ok(returned)
    }

    /// Adds `units` to the sale; replies the units remaining.
    pub fn restock(&mut self, units: u64, now_ms: u64) -> Result<u64, SaleError> {
        // Checked before anything changes, so a refused restock leaves the sale as it was.
        if units == 0 || self.units_added(units).is_none() {
            return Err(SaleError::TooMuchStock);
        }
        self.settle(now_ms);
        self.totals.restocked += units;
        self.remaining += units;
        self.record(EventKind::Restock, None, units, 0);
        Ok(self.remaining)
    }

    fn check_transfer_id(id: &[u8]) -> Result<(), SaleError> {
        if id.is_empty() || id.len() > MAX_TRANSFER_ID {
            return Err(SaleError::Invalid("transfer id out of range"));
        }
        Ok(())
    }

    /// Moves up to `units` of the remaining stock (never held or sold units) out of the sale
    /// to the sale key `to`, under transfer `id`; replies the units lent. The same id, `units`
    /// and `to` again (also after SETTLE) replies the same amount and moves nothing; the id
    /// with another `units` or `to` is refused.
    pub fn lend(
        &mut self,
        id: &[u8],
        units: u64,
        to: &[u8],
        now_ms: u64,
    ) -> Result<u64, SaleError> {
        Sale::check_transfer_id(id)?;
        if units == 0 || units > MAX_UNITS || to.is_empty() {
            return Err(SaleError::Invalid("lend out of range"));
        }
        if let Some(known) = self.ledger.get(id) {
            return known
                .repeat_lend(units, to)
                .map_err(SaleError::TransferConflict);
        }
        if self.has_ended(now_ms) {
            return Err(SaleError::Ended);
        }
        self.settle(now_ms);
        let lent = units.min(self.remaining);
        self.remaining -= lent;
        self.ledger.insert(
            id,
            Transfer {
                units: lent,
                leg: Leg::Out {
                    to: to.to_vec(),
                    asked: NonZeroU64::new(units),
                    started_ms: now_ms,
                },
            },
        );
        self.record(EventKind::Lend, None, lent, 0);
        Ok(lent)
    }

    /// Adds the `units` of transfer `id` from the sale key `from` to the remaining stock:
    /// `true` when added, `false` when this id was absorbed before.
    pub fn absorb(
        &mut self,
        id: &[u8],
        units: u64,
        from: &[u8],
        now_ms: u64,
    ) -> Result<bool, SaleError> {
        Sale::check_transfer_id(id)?;
        if units == 0 || units > MAX_UNITS || from.is_empty() {
            return Err(SaleError::Invalid("absorb out of range"));
        }
        if let Some(known) = self.ledger.get(id) {
            return match &known.leg {
                Leg::In { from: recorded } if recorded.as_slice() != from => Err(
                    SaleError::TransferConflict("already absorbed from another sale key"),
                ),
                Leg::In { .. } if known.units != units => Err(SaleError::TransferConflict(
                    "already absorbed with another n",
                )),
                Leg::In { .. } => Ok(false),
                Leg::Out { .. } | Leg::Settled { .. } => {
                    Err(SaleError::TransferConflict("already lent from here"))
                }
            };
        }
        if self.has_ended(now_ms) {
            return Err(SaleError::Ended);
        }
        if self.units_added(units).is_none() {
            return Err(SaleError::TooMuchStock);
        }
        self.settle(now_ms);
        self.remaining += units;
        self.ledger.insert(
            id,
            Transfer {
                units,
                leg: Leg::In {
                    from: from.to_vec(),
                },
            },
        );
        self.record(EventKind::Absorb, None, units, 0);
        Ok(true)
    }

    /// Records that a change made at `now_ms` replicated with its clock (see
    /// [`SaleTotals::replay_clock_ms`]).
    pub fn set_replay_clock(&mut self, now_ms: u64) {
        self.totals.replay_clock_ms = now_ms;
    }

    /// Records the ID of the stream entry just written for this sale.
    pub fn set_last_entry_id(&mut self, id: (u64, u64)) {
        self.totals.last_entry_id = id;
    }

    fn is_sealed(&self, now_ms: u64) -> bool {
        now_ms < self.totals.sealed_until_ms
    }

    /// Marks a drained partition sold out for `ms` (or until stock comes back), after its
    /// client found no stock in any other partition: `false`, and nothing changes, when the
    /// partition has stock again.
    pub fn seal(&mut self, ms: u64, now_ms: u64) -> Result<bool, SaleError> {
        if self.config.partition.is_none() {
            return Err(SaleError::NotPartition);
        }
        if ms == 0 || ms > MAX_UNITS {
            return Err(SaleError::Invalid("seal out of range"));
        }
        self.settle(now_ms);
        if self.remaining > 0 {
            return Ok(false);
        }
        self.totals.sealed_until_ms = now_ms.saturating_add(ms);
        self.changed = true;
        Ok(true)
    }

    /// Marks outgoing transfer `id` settled: `true` if it was pending.
    pub fn settle_transfer(&mut self, id: &[u8]) -> Result<bool, SaleError> {
        Sale::check_transfer_id(id)?;
        let settled = self.ledger.settle(id);
        self.changed |= settled;
        Ok(settled)
    }

    /// Outgoing transfers not yet settled.
    pub fn pending_transfers(&self) -> impl Iterator<Item = Pending<'_>> {
        self.ledger.pending()
    }

    /// `entry` as of `now_ms`: a hold that is due counts as gone even before `settle` runs,
    /// so reads (which never change the sale) see what the next write will.
    fn entry_at(entry: Entry, now_ms: u64) -> Entry {
        if entry.held_qty > 0 && entry.expires_at_ms <= now_ms {
            Entry {
                held_qty: 0,
                ..entry
            }
        } else {
            entry
        }
    }

    /// Units `user` owns at `now_ms` (0 if none).
    pub fn bought(&self, user: &[u8], now_ms: u64) -> u64 {
        self.buyers
            .find(user)
            .map_or(0, |(_, entry)| Sale::entry_at(entry, now_ms).units())
    }

    pub fn summary(&self, now_ms: u64) -> SaleSummary {
        let (mut due_units, mut due_buyers) = (0, 0);
        // A hold cancelled and opened again within one ms has two live items: count it once.
        let mut due: Vec<Slot> = self
            .holds
            .iter()
            .take_while(|&&(at, _)| at <= now_ms)
            .filter(|&&(at, slot)| self.is_live(at, slot))
            .map(|&(_, slot)| slot)
            .collect();
        due.sort_unstable();
        due.dedup();
        for slot in due {
            let entry = self.buyers.entry(slot).1;
            due_units += entry.held_qty;
            due_buyers += u64::from(entry.final_qty == 0);
        }
        let remaining = self.remaining + due_units;
        SaleSummary {
            stock: self.config.stock,
            remaining,
            sold: self.sold,
            buyers: self.buyers.len() as u64 - due_buyers,
            limit: self.config.limit,
            sold_out: remaining == 0,
            held: self.held - due_units,
            start_ms: self.config.start_ms,
            end_ms: self.config.end_ms,
            hold_ms: self.config.hold_ms,
            restocked: self.totals.restocked,
            refunded: self.totals.refunded,
            lent: self.ledger.lent(),
            absorbed: self.ledger.absorbed(),
            pending_out: self.ledger.pending_units(),
            sealed: remaining == 0 && self.is_sealed(now_ms),
        }
    }

    /// Up to `count` buyers from cursor `cursor` (0 starts), as of `now_ms`, and the cursor to
    /// continue from (0 when done). At most `10 * count` records are examined per call, as
    /// SCAN may return fewer than asked. A cursor is a record number, so one past the last
    /// record is one that no scan returned.
    pub fn scan(
        &self,
        cursor: u64,
        count: u64,
        now_ms: u64,
    ) -> Result<(u64, Vec<BuyerRow<'_>>), SaleError> {
        if cursor != 0 && cursor >= self.buyers.records() {
            return Err(SaleError::InvalidCursor);
        }
        let budget = count.saturating_mul(10);
        let mut found = Vec::new();
        for (next, (_, user, entry)) in (cursor..).zip(self.buyers.iter_from(cursor)) {
            if found.len() as u64 == count || next - cursor == budget {
                return Ok((next, found));
            }
            let entry = Sale::entry_at(entry, now_ms);
            if entry.units() > 0 {
                let state = if entry.held_qty > 0 {
                    BuyerState::Held
                } else {
                    BuyerState::Final
                };
                found.push((user, entry.units(), state));
            }
        }
        Ok((0, found))
    }

    /// Heap plus inline bytes, for MEMORY USAGE.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Sale>()
            + self.buyers.heap_bytes()
            + crate::logic::buyers::allocated(self.holds.capacity() * 16)
            + self.ledger.heap_bytes()
            + self.config.events.as_ref().map_or(0, Vec::capacity)
            + self.events.capacity() * std::mem::size_of::<SaleEvent>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::escrow::MAX_TRANSFER_ID;

    const T0: u64 = 1_700_000_000_000;

    fn config(stock: u64, limit: u64) -> SaleConfig {
        SaleConfig {
            stock,
            limit,
            ..SaleConfig::default()
        }
    }

    fn held(stock: u64, limit: u64, hold_ms: u64) -> Sale {
        Sale::new(
            SaleConfig {
                hold_ms: Some(hold_ms),
                events: Some(b"events".to_vec()),
                ..config(stock, limit)
            },
            [7; 16],
        )
        .unwrap()
    }

    fn plain(stock: u64, limit: u64) -> Sale {
        Sale::new(config(stock, limit), [0; 16]).unwrap()
    }

    /// A TRY that `unchanged_refusal` says is refused unchanged is refused so and changes
    /// nothing, over random walks of sales with holds, a window, a partition and transfers.
    #[test]
    fn an_unchanged_refusal_is_what_try_answers_and_changes_nothing() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        let mut seen = std::collections::HashSet::new();
        let mut tried_unchanged = 0;
        for walk in 0..200 {
            let mut sale = Sale::new(
                SaleConfig {
                    stock: 1 + next(6),
                    limit: 1 + next(3),
                    hold_ms: (walk % 2 == 0).then_some(50),
                    start_ms: (walk % 3 == 0).then_some(T0 + 100),
                    end_ms: (walk % 5 == 0).then_some(T0 + 400),
                    events: Some(b"events".to_vec()),
                    partition: (walk % 4 == 0).then(|| Partition {
                        manifest: b"m".to_vec(),
                        index: 0,
                        count: 2,
                    }),
                    ..SaleConfig::default()
                },
                [1; 16],
            )
            .unwrap();
            let mut now = T0;
            for step in 0..60 {
                now += next(40);
                let user = format!("u{}", next(8));
                let _ = match next(8) {
                    0 => sale.confirm(user.as_bytes(), now).map(|_| ()),
                    1 => sale.cancel(user.as_bytes(), None, now).map(|_| ()),
                    2 => sale.restock(1, now).map(|_| ()),
                    3 => sale
                        .lend(format!("t{step}").as_bytes(), 1, b"{b}", now)
                        .map(|_| ()),
                    4 => sale
                        .absorb(format!("a{step}").as_bytes(), 1, b"{b}", now)
                        .map(|_| ()),
                    5 => sale
                        .settle_transfer(format!("t{}", next(60)).as_bytes())
                        .map(|_| ()),
                    6 => sale.seal(next(100), now).map(|_| ()),
                    _ => sale.try_buy(user.as_bytes(), 1, now).map(|_| ()),
                };
                sale.clear_events();
                let qty = 1 + next(sale.config.limit);
                let at = now + next(40);
                let Some(refusal) = sale.unchanged_refusal(qty, at) else {
                    continue;
                };
                let mut tried = sale.clone();
                assert_eq!(tried.try_buy(user.as_bytes(), qty, at), Ok(refusal));
                assert!(!tried.changed(), "{refusal:?} changed the sale");
                assert_eq!(tried.summary(at), sale.summary(at));
                seen.insert(format!("{refusal:?}"));
                tried_unchanged += 1;
            }
        }
        assert!(
            tried_unchanged > 500,
            "only {tried_unchanged} unchanged refusals"
        );
        let mut seen: Vec<_> = seen.into_iter().collect();
        seen.sort();
        assert_eq!(seen, ["Drained", "Ended", "NotStarted", "SoldOut"]);
    }

    #[test]
    fn a_due_hold_or_a_transfer_to_forget_is_not_an_unchanged_refusal() {
        let mut sale = held(1, 1, 100);
        assert_eq!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
        assert_eq!(
            sale.unchanged_refusal(1, T0 + 99),
            Some(TryOutcome::SoldOut)
        );
        assert_eq!(sale.unchanged_refusal(1, T0 + 100), None);

        let mut ended = Sale::new(
            SaleConfig {
                end_ms: Some(T0 + 10),
                ..config(5, 1)
            },
            [0; 16],
        )
        .unwrap();
        assert_eq!(ended.absorb(b"t", 1, b"{b}", T0), Ok(true));
        assert_eq!(ended.unchanged_refusal(1, T0 + 9), None);
        assert_eq!(ended.unchanged_refusal(1, T0 + 10), None);
        ended.settle(T0 + 10);
        assert_eq!(ended.unchanged_refusal(1, T0 + 10), Some(TryOutcome::Ended));
    }

    /// The documented identity and the per-user limit, from the stored records.
    fn assert_invariants(sale: &Sale) {
        let (mut held, mut sold, mut live) = (0, 0, 0);
        for (_, _, entry) in sale.buyers().iter() {
            assert!(entry.units() <= sale.config.limit);
            held += entry.held_qty;
            sold += entry.final_qty;
            live += u64::from(entry.units() > 0);
        }
        assert_eq!((held, sold), (sale.held, sale.sold));
        assert_eq!(live, sale.buyers().len() as u64);
        assert_eq!(
            sale.remaining + sale.held + sale.sold,
            sale.config.stock + sale.totals.restocked + sale.ledger.absorbed() - sale.ledger.lent()
        );
        let holding: Vec<Slot> = sale
            .buyers()
            .iter()
            .filter(|(_, _, e)| e.held_qty > 0)
            .map(|(slot, _, _)| slot)
            .collect();
        let mut queued: Vec<Slot> = sale
            .holds
            .iter()
            .filter(|&&(at, slot)| sale.is_live(at, slot))
            .map(|&(_, slot)| slot)
            .collect();
        queued.sort_unstable();
        queued.dedup();
        assert_eq!(queued, holding, "every live hold is queued");
        assert!(
            sale.holds
                .iter()
                .zip(sale.holds.iter().skip(1))
                .all(|(a, b)| a.0 <= b.0),
            "in deadline order"
        );
        if let Some(&(at, slot)) = sale.holds.front() {
            assert!(sale.is_live(at, slot), "the front is live");
        }
    }

    fn kinds(sale: &Sale) -> Vec<(EventKind, u64, u64)> {
        sale.events()
            .iter()
            .map(|e| (e.kind, e.qty, e.remaining))
            .collect()
    }

    #[test]
    fn new_rejects_bad_settings() {
        let cases = [
            (config(1, 0), "limit out of range"),
            (config(1, MAX_UNITS + 1), "limit out of range"),
            (config(MAX_UNITS + 1, 1), "stock out of range"),
            (
                SaleConfig {
                    hold_ms: Some(0),
                    ..config(1, 1)
                },
                "HOLD out of range",
            ),
            (
                SaleConfig {
                    end_ms: Some(0),
                    ..config(1, 1)
                },
                "END out of range",
            ),
            (
                SaleConfig {
                    start_ms: Some(5),
                    end_ms: Some(5),
                    ..config(1, 1)
                },
                "END must be after START",
            ),
            (
                SaleConfig {
                    events: Some(Vec::new()),
                    ..config(1, 1)
                },
                "EVENTS stream name is empty",
            ),
        ];
        for (config, why) in cases {
            assert_eq!(
                Sale::new(config, [0; 16]).err(),
                Some(SaleError::Invalid(why))
            );
        }
        assert_eq!(plain(MAX_UNITS, MAX_UNITS).remaining(), MAX_UNITS);
    }

    #[test]
    fn buys_until_sold_out() {
        let mut sale = plain(2, 1);
        assert_eq!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 1 })
        );
        assert_eq!(
            sale.try_buy(b"b", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
        assert_eq!(sale.try_buy(b"c", 1, T0), Ok(TryOutcome::SoldOut));
        let s = sale.summary(T0);
        assert!(s.sold_out);
        assert_eq!((s.sold, s.buyers, s.remaining, s.held), (2, 2, 0, 0));
        assert_invariants(&sale);
    }

    #[test]
    fn sold_out_wins_over_limit_and_does_not_record() {
        let mut sale = plain(1, 1);
        sale.try_buy(b"a", 1, T0).unwrap();
        // `a` is also at its limit, but sold out is checked first.
        assert_eq!(sale.try_buy(b"a", 1, T0), Ok(TryOutcome::SoldOut));
        assert_eq!(sale.try_buy(b"z", 1, T0), Ok(TryOutcome::SoldOut));
        assert_eq!(sale.bought(b"z", T0), 0);
        assert_eq!(sale.summary(T0).buyers, 1);
    }

    #[test]
    fn limit_counts_units_across_purchases() {
        let mut sale = plain(10, 3);
        assert_eq!(
            sale.try_buy(b"a", 2, T0),
            Ok(TryOutcome::Bought { remaining: 8 })
        );
        assert_eq!(sale.try_buy(b"a", 2, T0), Ok(TryOutcome::LimitExceeded));
        assert_eq!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 7 })
        );
        assert_eq!(sale.try_buy(b"a", 1, T0), Ok(TryOutcome::LimitExceeded));
        assert_eq!(sale.bought(b"a", T0), 3);
        assert_eq!(sale.summary(T0).buyers, 1);
        assert_invariants(&sale);
    }

    #[test]
    fn partial_quantity_larger_than_remaining_is_sold_out() {
        let mut sale = plain(3, 5);
        assert_eq!(sale.try_buy(b"a", 4, T0), Ok(TryOutcome::SoldOut));
        assert_eq!(
            sale.try_buy(b"a", 3, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
    }

    #[test]
    fn rejects_bad_requests_without_change() {
        let mut sale = plain(3, 2);
        assert_eq!(sale.try_buy(b"", 1, T0), Err(SaleError::EmptyUser));
        for qty in [0, 3] {
            assert_eq!(
                sale.try_buy(b"a", qty, T0),
                Err(SaleError::QtyOutOfRange { limit: 2 })
            );
        }
        assert_eq!(sale.summary(T0).sold, 0);
        assert!(sale.events().is_empty());
    }

    #[test]
    fn zero_stock_is_sold_out_from_the_start() {
        let mut sale = plain(0, 1);
        assert!(sale.summary(T0).sold_out);
        assert_eq!(sale.try_buy(b"a", 1, T0), Ok(TryOutcome::SoldOut));
    }

    #[test]
    fn the_window_is_start_inclusive_end_exclusive_and_checked_first() {
        let mut sale = Sale::new(
            SaleConfig {
                start_ms: Some(T0),
                end_ms: Some(T0 + 10),
                ..config(1, 1)
            },
            [0; 16],
        )
        .unwrap();
        assert_eq!(sale.try_buy(b"a", 1, T0 - 1), Ok(TryOutcome::NotStarted));
        assert_eq!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
        // Sold out and over the limit too, but the window answers first.
        assert_eq!(sale.try_buy(b"a", 1, T0 + 10), Ok(TryOutcome::Ended));
        assert_eq!(sale.try_buy(b"a", 1, T0 + 9), Ok(TryOutcome::SoldOut));
        let s = sale.summary(T0);
        assert_eq!((s.start_ms, s.end_ms), (Some(T0), Some(T0 + 10)));
    }

    #[test]
    fn a_hold_expires_back_to_stock_and_the_user_may_buy_again() {
        let mut sale = held(1, 1, 100);
        assert_eq!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
        assert_eq!(sale.next_expiry(), Some(T0 + 100));
        assert_eq!(sale.try_buy(b"b", 1, T0 + 99), Ok(TryOutcome::SoldOut));
        // Reads see the expiry before any write applies it.
        let s = sale.summary(T0 + 100);
        assert_eq!((s.remaining, s.held, s.buyers), (1, 0, 0));
        assert_eq!(sale.bought(b"a", T0 + 100), 0);
        assert_eq!(sale.bought(b"a", T0 + 99), 1);
        assert_eq!(sale.held, 1, "reads change nothing");

        assert_eq!(
            sale.try_buy(b"b", 1, T0 + 100),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
        assert_eq!(
            kinds(&sale),
            vec![
                (EventKind::Purchase, 1, 0),
                (EventKind::Expire, 1, 1),
                (EventKind::Purchase, 1, 0)
            ]
        );
        assert!(!sale.confirm(b"a", T0 + 101).unwrap(), "expired");
        assert_eq!(sale.try_buy(b"a", 1, T0 + 101), Ok(TryOutcome::SoldOut));
        assert_invariants(&sale);
    }

    #[test]
    fn confirm_makes_a_hold_final_once() {
        let mut sale = held(5, 2, 100);
        assert!(!sale.confirm(b"a", T0).unwrap(), "never held");
        sale.try_buy(b"a", 1, T0).unwrap();
        assert!(sale.confirm(b"a", T0 + 99).unwrap());
        assert!(!sale.confirm(b"a", T0 + 99).unwrap(), "already final");
        assert_eq!(sale.next_expiry(), None);
        sale.settle(T0 + 1_000_000);
        assert_eq!(
            sale.bought(b"a", T0 + 1_000_000),
            1,
            "final units never expire"
        );
        let s = sale.summary(T0 + 1_000_000);
        assert_eq!((s.sold, s.held, s.remaining), (1, 0, 4));
        assert_invariants(&sale);
        assert_eq!(sale.confirm(b"", T0), Err(SaleError::EmptyUser));
        let mut no_holds = plain(5, 1);
        no_holds.try_buy(b"a", 1, T0).unwrap();
        assert_eq!(no_holds.confirm(b"a", T0), Err(SaleError::NoHolds));
        assert!(
            no_holds.events().len() == 1,
            "the refused confirm recorded nothing"
        );
    }

    #[test]
    fn units_bought_while_held_join_the_hold_and_its_deadline() {
        let mut sale = held(5, 3, 100);
        sale.try_buy(b"a", 1, T0).unwrap();
        sale.try_buy(b"a", 1, T0 + 50).unwrap();
        let order = sale.buyers().find(b"a").unwrap().1.order;
        assert_eq!(sale.next_expiry(), Some(T0 + 100));
        assert_eq!(sale.holds.len(), 1);
        sale.settle(T0 + 100);
        assert_eq!(sale.bought(b"a", T0 + 100), 0);
        assert_eq!(
            sale.events().last().map(|e| (e.qty, e.order)),
            Some((2, order))
        );
        // A new purchase after the expiry is a new order.
        sale.try_buy(b"a", 1, T0 + 200).unwrap();
        assert_ne!(sale.buyers().find(b"a").unwrap().1.order, order);
        assert_invariants(&sale);
    }

    #[test]
    fn a_user_may_hold_and_own_final_units_at_once() {
        let mut sale = held(5, 3, 100);
        sale.try_buy(b"a", 1, T0).unwrap();
        assert!(sale.confirm(b"a", T0).unwrap());
        sale.try_buy(b"a", 2, T0 + 10).unwrap();
        assert_eq!(
            sale.scan(0, 10, T0 + 10).unwrap().1,
            vec![(&b"a"[..], 3, BuyerState::Held)]
        );
        sale.settle(T0 + 110);
        assert_eq!(
            sale.scan(0, 10, T0 + 110).unwrap().1,
            vec![(&b"a"[..], 1, BuyerState::Final)]
        );
        assert_invariants(&sale);
    }

    #[test]
    fn cancel_takes_held_units_first_then_refunds() {
        let mut sale = held(10, 5, 100);
        assert_eq!(sale.cancel(b"nobody", None, T0).unwrap(), 0);
        sale.try_buy(b"a", 2, T0).unwrap();
        assert!(sale.confirm(b"a", T0).unwrap());
        sale.try_buy(b"a", 2, T0).unwrap();
        assert_eq!(sale.cancel(b"a", Some(1), T0).unwrap(), 1);
        assert_eq!((sale.held, sale.sold, sale.totals.refunded), (1, 2, 0));
        assert_eq!(sale.next_expiry(), Some(T0 + 100), "one held unit left");
        assert_eq!(sale.cancel(b"a", Some(2), T0).unwrap(), 2);
        assert_eq!((sale.held, sale.sold, sale.totals.refunded), (0, 1, 1));
        assert_eq!(sale.next_expiry(), None);
        assert_eq!(
            sale.cancel(b"a", Some(5), T0).unwrap(),
            1,
            "capped at what is owned"
        );
        assert_eq!(
            sale.cancel(b"a", Some(6), T0),
            Err(SaleError::QtyOutOfRange { limit: 5 }),
            "nobody owns more than LIMIT"
        );
        assert_eq!(sale.cancel(b"", None, T0), Err(SaleError::EmptyUser));
        assert_eq!(sale.cancel(b"a", None, T0).unwrap(), 0);
        assert_eq!(sale.buyers().len(), 0);
        assert_eq!(sale.remaining(), 10);
        assert_invariants(&sale);
    }

    #[test]
    fn cancel_clears_sold_out_and_a_refunded_user_may_buy_again() {
        let mut sale = plain(1, 1);
        sale.try_buy(b"a", 1, T0).unwrap();
        assert!(sale.summary(T0).sold_out);
        assert_eq!(sale.cancel(b"a", None, T0).unwrap(), 1);
        assert!(!sale.summary(T0).sold_out);
        assert_eq!(sale.summary(T0).refunded, 1);
        assert_eq!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
        assert_eq!(sale.buyers().records(), 1, "the same record is reused");
        assert_invariants(&sale);
    }

    #[test]
    fn restock_adds_units_and_checks_the_ceiling() {
        let mut sale = plain(1, 1);
        sale.try_buy(b"a", 1, T0).unwrap();
        assert_eq!(sale.restock(2, T0), Ok(2));
        assert_eq!(sale.summary(T0).restocked, 2);
        assert_eq!(sale.restock(0, T0), Err(SaleError::TooMuchStock));
        assert_eq!(
            sale.restock(MAX_UNITS - 2, T0),
            Err(SaleError::TooMuchStock)
        );
        assert_eq!(sale.restock(MAX_UNITS - 3, T0), Ok(MAX_UNITS - 1));
        assert_eq!(
            sale.events().last().map(|e| (e.kind, e.slot)),
            Some((EventKind::Restock, None))
        );
        assert_invariants(&sale);
    }

    #[test]
    fn settle_expires_only_due_holds_in_expiry_order() {
        let mut sale = held(10, 1, 100);
        for (i, user) in [b"a", b"b", b"c"].iter().enumerate() {
            sale.try_buy(*user, 1, T0 + 10 * i as u64).unwrap();
        }
        sale.clear_events();
        sale.settle(T0 + 115);
        let expired: Vec<u64> = sale.events().iter().map(|e| e.order).collect();
        assert_eq!(expired, vec![1, 2]);
        assert_eq!(sale.next_expiry(), Some(T0 + 120));
        assert_invariants(&sale);
    }

    #[test]
    fn confirmed_and_cancelled_holds_leave_the_next_expiry_on_a_live_hold() {
        let mut sale = held(10, 2, 100);
        for (i, user) in [b"a", b"b", b"c", b"d"].iter().enumerate() {
            sale.try_buy(*user, 1, T0 + i as u64).unwrap();
        }
        // b's item goes stale in the middle, a's at the front.
        assert!(sale.confirm(b"b", T0 + 10).unwrap());
        assert_eq!(sale.next_expiry(), Some(T0 + 100));
        assert_eq!(sale.cancel(b"a", None, T0 + 10).unwrap(), 1);
        assert_eq!(
            sale.next_expiry(),
            Some(T0 + 102),
            "past a's and b's stale items"
        );
        assert_invariants(&sale);
        sale.clear_events();
        sale.settle(T0 + 102);
        assert_eq!(kinds(&sale), vec![(EventKind::Expire, 1, 8)]);
        assert_eq!(sale.next_expiry(), Some(T0 + 103));
        assert_invariants(&sale);
    }

    #[test]
    fn a_hold_cancelled_and_opened_again_in_one_ms_counts_and_expires_once() {
        let mut sale = held(10, 2, 100);
        sale.try_buy(b"z", 1, T0).unwrap();
        sale.try_buy(b"a", 2, T0).unwrap();
        assert_eq!(sale.cancel(b"a", None, T0).unwrap(), 2);
        sale.try_buy(b"a", 1, T0).unwrap();
        assert_eq!(
            sale.holds.len(),
            3,
            "a's stale item and its new one, same deadline"
        );
        assert_invariants(&sale);
        let due = sale.summary(T0 + 100);
        assert_eq!((due.remaining, due.held, due.buyers), (10, 0, 0));
        sale.clear_events();
        sale.settle(T0 + 100);
        assert_eq!(
            kinds(&sale),
            vec![(EventKind::Expire, 1, 9), (EventKind::Expire, 1, 10)]
        );
        assert!(sale.holds.is_empty());
        assert_eq!(sale.remaining(), 10);
        assert_invariants(&sale);
    }

    #[test]
    fn a_clock_that_goes_back_still_expires_holds_in_deadline_order() {
        let mut sale = held(10, 1, 100);
        sale.try_buy(b"a", 1, T0 + 50).unwrap();
        sale.try_buy(b"b", 1, T0 + 60).unwrap();
        sale.try_buy(b"c", 1, T0 + 55).unwrap();
        sale.try_buy(b"d", 1, T0).unwrap();
        assert_eq!(sale.next_expiry(), Some(T0 + 100));
        assert_invariants(&sale);
        sale.clear_events();
        sale.settle(T0 + 155);
        let users: Vec<&[u8]> = sale
            .events()
            .iter()
            .map(|e| sale.buyers().entry(e.slot.unwrap()).0)
            .collect();
        assert_eq!(users, vec![&b"d"[..], b"a", b"c"]);
        assert_eq!(sale.next_expiry(), Some(T0 + 160));
        assert_invariants(&sale);
    }

    #[test]
    fn the_next_entry_id_follows_the_last_as_a_streams_own_does() {
        assert_eq!(next_entry_id((0, 0), T0), Some((T0, 0)));
        assert_eq!(next_entry_id((T0, 4), T0), Some((T0, 5)), "same ms");
        assert_eq!(
            next_entry_id((T0, 4), T0 - 9),
            Some((T0, 5)),
            "clock went back"
        );
        assert_eq!(next_entry_id((T0, 4), T0 + 1), Some((T0 + 1, 0)));
        assert_eq!(next_entry_id((T0, u64::MAX), T0), Some((T0 + 1, 0)));
        assert_eq!(next_entry_id((u64::MAX, u64::MAX), T0), None);
    }

    #[test]
    fn order_uuids_are_well_formed_distinct_and_seeded() {
        let sale = held(1, 1, 1);
        let text = |n| String::from_utf8(sale.order_uuid(n).to_vec()).unwrap();
        let uuid = text(1);
        assert_eq!(uuid.len(), 36);
        assert_eq!(
            [8, 13, 18, 23].map(|i| &uuid[i..=i]),
            ["-"; 4],
            "8-4-4-4-12 groups"
        );
        assert!(
            uuid.chars()
                .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(&uuid[14..15], "8", "version 8");
        assert!(
            matches!(&uuid[19..20], "8" | "9" | "a" | "b"),
            "RFC variant"
        );
        let all: std::collections::HashSet<String> = (1..10_000).map(text).collect();
        assert_eq!(all.len(), 9_999);
        assert_eq!(uuid[..18], text(2)[..18], "the first 8 bytes name the sale");
        let other = Sale::new(config(1, 1), [8; 16]).unwrap();
        assert_ne!(other.order_uuid(1), sale.order_uuid(1));
    }

    #[test]
    fn order_uuid_text_is_the_one_0_3_wrote() {
        // Module 0.3 formatted the bytes with `format!`: streams written then must not change.
        let sale = Sale::new(config(1, 1), *b"0123456789abcdef").unwrap();
        for order in (1..2_000).chain([u64::MAX / 3, u64::MAX]) {
            let seed = *b"0123456789abcdef";
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&seed[..8]);
            let tail = u64::from_be_bytes(seed[8..].try_into().unwrap());
            let low = (scramble62(order) ^ tail) & ((1 << 62) - 1) | (0b10 << 62);
            bytes[8..].copy_from_slice(&low.to_be_bytes());
            bytes[6] = (bytes[6] & 0x0f) | 0x80;
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let reference = format!(
                "{}-{}-{}-{}-{}",
                &hex[..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..]
            );
            assert_eq!(sale.order_uuid(order), reference.as_bytes());
        }
    }

    #[test]
    fn scan_visits_every_present_buyer_once_across_changes() {
        let mut sale = held(1000, 1, 1_000);
        for i in 0..200 {
            sale.try_buy(format!("u{i:03}").as_bytes(), 1, T0).unwrap();
        }
        let mut seen = Vec::new();
        let mut cursor = 0;
        let mut step = 0;
        loop {
            let (next, page) = sale.scan(cursor, 7, T0).unwrap();
            seen.extend(page.iter().map(|(u, _, _)| u.to_vec()));
            // Changes during the scan: newcomers, and a cancel of someone not yet visited.
            step += 1;
            sale.try_buy(format!("new{step}").as_bytes(), 1, T0)
                .unwrap();
            if step == 3 {
                sale.cancel(b"u150", None, T0).unwrap();
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        for i in (0..200).filter(|&i| i != 150) {
            let user = format!("u{i:03}").into_bytes();
            assert_eq!(seen.iter().filter(|u| **u == user).count(), 1, "u{i:03}");
        }
        assert!(!seen.contains(&b"u150".to_vec()));
    }

    #[test]
    fn scan_examines_a_bounded_number_of_records() {
        let mut sale = plain(100, 1);
        for i in 0..50 {
            let user = format!("u{i}");
            sale.try_buy(user.as_bytes(), 1, T0).unwrap();
            sale.cancel(user.as_bytes(), None, T0).unwrap();
        }
        sale.try_buy(b"last", 1, T0).unwrap();
        assert_eq!(sale.scan(0, 2, T0).unwrap(), (20, vec![]));
        assert_eq!(
            sale.scan(40, 2, T0).unwrap(),
            (0, vec![(&b"last"[..], 1, BuyerState::Final)])
        );
        // Cursors are record numbers: 51 records, so 50 is the last valid one.
        assert_eq!(
            sale.scan(50, 2, T0).unwrap(),
            (0, vec![(&b"last"[..], 1, BuyerState::Final)])
        );
        for cursor in [51, 1_000, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            assert_eq!(sale.scan(cursor, 2, T0), Err(SaleError::InvalidCursor));
        }
        assert_eq!(plain(1, 1).scan(0, 10, T0).unwrap(), (0, vec![]));
        assert_eq!(plain(1, 1).scan(1, 10, T0), Err(SaleError::InvalidCursor));
    }

    #[test]
    fn restore_checks_every_invariant() {
        let entry = |final_qty, held_qty| Entry {
            final_qty,
            held_qty,
            ..Entry::default()
        };
        let totals = SaleTotals::default();
        let ok = [(&b"a"[..], entry(1, 0)), (&b"b"[..], entry(2, 0))];
        let sale = Sale::restore(
            config(5, 2),
            totals,
            Ledger::default(),
            2,
            0,
            ok.into_iter(),
        )
        .unwrap();
        assert_eq!(sale.summary(T0).remaining, 2);
        assert_invariants(&sale);

        type Record<'a> = (&'a [u8], Entry);
        let cases: [(&[Record], SaleError); 6] = [
            (&[(b"", entry(1, 0))], SaleError::EmptyUser),
            (
                &[(b"a", entry(3, 0))],
                SaleError::Invalid("buyer record out of range"),
            ),
            (
                &[(b"a", entry(0, 1))],
                SaleError::Invalid("buyer record out of range"),
            ),
            (
                &[(
                    b"a",
                    Entry {
                        order: 1,
                        ..entry(1, 0)
                    },
                )],
                SaleError::Invalid("buyer record out of range"),
            ),
            (
                &[(b"a", entry(1, 0)), (b"a", entry(1, 0))],
                SaleError::Invalid("duplicate buyer"),
            ),
            (
                &[
                    (b"a", entry(2, 0)),
                    (b"b", entry(2, 0)),
                    (b"c", entry(2, 0)),
                ],
                SaleError::Invalid("buyers hold more than the stock"),
            ),
        ];
        for (records, expected) in cases {
            let got = Sale::restore(
                config(5, 2),
                totals,
                Ledger::default(),
                records.len(),
                0,
                records.iter().copied(),
            );
            assert_eq!(got.err(), Some(expected));
        }
        let too_much = SaleTotals {
            restocked: MAX_UNITS,
            ..totals
        };
        assert!(
            Sale::restore(
                config(5, 2),
                too_much,
                Ledger::default(),
                0,
                0,
                std::iter::empty()
            )
            .is_err()
        );
    }

    #[test]
    fn memory_grows_with_buyers() {
        let mut sale = plain(1000, 1);
        let empty = sale.memory_bytes();
        for i in 0..500u32 {
            sale.try_buy(format!("user{i:06}").as_bytes(), 1, T0)
                .unwrap();
        }
        assert!(sale.memory_bytes() > empty + 500 * 10);
    }

    #[test]
    fn lend_moves_only_remaining_units_and_is_idempotent() {
        let mut sale = held(5, 2, 100);
        sale.try_buy(b"a", 2, T0).unwrap();
        sale.clear_events();
        assert_eq!(sale.lend(b"t1", 2, b"{b}", T0), Ok(2));
        assert_eq!(kinds(&sale), vec![(EventKind::Lend, 2, 1)]);
        sale.clear_events();
        // The same id, n and key again: the same amount, nothing more moves, nothing recorded.
        assert_eq!(sale.lend(b"t1", 2, b"{b}", T0 + 1), Ok(2));
        assert!(!sale.changed());
        assert_eq!(
            sale.lend(b"t1", 5, b"{b}", T0),
            Err(SaleError::TransferConflict("already lent with another n"))
        );
        assert_eq!(
            sale.lend(b"t1", 2, b"{c}", T0),
            Err(SaleError::TransferConflict(
                "already lent to another sale key"
            ))
        );
        // More than is left lends what is left; held units are never lent.
        assert_eq!(sale.lend(b"t2", 10, b"{b}", T0), Ok(1));
        assert_eq!(sale.remaining(), 0);
        assert_eq!(sale.try_buy(b"c", 1, T0), Ok(TryOutcome::SoldOut));
        assert_eq!(sale.lend(b"t3", 1, b"{b}", T0), Ok(0), "nothing left: 0");
        assert_eq!(sale.summary(T0).pending_out, 3);
        assert_invariants(&sale);
        // The hold expires: its units come back and can be lent.
        assert_eq!(sale.lend(b"t4", 9, b"{b}", T0 + 100), Ok(2));
        assert_invariants(&sale);
        let listed: Vec<_> = sale.pending_transfers().map(|t| (t.id, t.units)).collect();
        assert_eq!(
            listed,
            vec![(&b"t1"[..], 2), (b"t2", 1), (b"t3", 0), (b"t4", 2)]
        );
        assert_eq!(sale.pending_transfers().next().unwrap().started_ms, T0);
    }

    #[test]
    fn settle_then_lend_again_moves_nothing() {
        let mut sale = plain(5, 1);
        assert_eq!(sale.lend(b"t", 3, b"{b}", T0), Ok(3));
        sale.clear_events();
        assert_eq!(sale.settle_transfer(b"t"), Ok(true));
        assert!(sale.changed(), "a settle is a change to replicate");
        assert!(sale.events().is_empty(), "but no stream entry");
        assert_eq!(sale.settle_transfer(b"t"), Ok(false));
        assert_eq!(sale.settle_transfer(b"unknown"), Ok(false));
        assert_eq!(sale.lend(b"t", 3, b"{b}", T0), Ok(3));
        assert_eq!(sale.remaining(), 2);
        assert_eq!(sale.pending_transfers().count(), 0);
        // Issue 31: the settled id towards another key (or with another n) moves nothing and
        // says so, so no second destination can absorb units this sale never gave.
        for (n, to, why) in [
            (3, &b"{c}"[..], "already lent to another sale key"),
            (2, b"{b}", "already lent with another n"),
        ] {
            assert_eq!(
                sale.lend(b"t", n, to, T0),
                Err(SaleError::TransferConflict(why))
            );
        }
        assert_eq!(sale.remaining(), 2);
        assert_eq!(
            (sale.summary(T0).lent, sale.summary(T0).pending_out),
            (3, 0)
        );
        assert_eq!(
            sale.settle_transfer(b""),
            Err(SaleError::Invalid("transfer id out of range"))
        );
    }

    #[test]
    fn absorb_adds_once_and_a_sold_out_sale_sells_again() {
        let mut sale = plain(1, 1);
        sale.try_buy(b"a", 1, T0).unwrap();
        assert_eq!(sale.try_buy(b"b", 1, T0), Ok(TryOutcome::SoldOut));
        sale.clear_events();
        assert_eq!(sale.absorb(b"t", 2, b"{a}", T0), Ok(true));
        assert_eq!(kinds(&sale), vec![(EventKind::Absorb, 2, 2)]);
        sale.clear_events();
        assert_eq!(sale.absorb(b"t", 2, b"{a}", T0), Ok(false));
        assert!(!sale.changed());
        assert_eq!(
            sale.absorb(b"t", 3, b"{a}", T0),
            Err(SaleError::TransferConflict(
                "already absorbed with another n"
            ))
        );
        assert_eq!(
            sale.absorb(b"t", 2, b"{c}", T0),
            Err(SaleError::TransferConflict(
                "already absorbed from another sale key"
            ))
        );
        assert_eq!(
            sale.lend(b"t", 1, b"{c}", T0),
            Err(SaleError::TransferConflict("already absorbed here"))
        );
        assert_eq!(
            sale.try_buy(b"b", 1, T0),
            Ok(TryOutcome::Bought { remaining: 1 })
        );
        assert_eq!(sale.summary(T0).absorbed, 2);
        assert_invariants(&sale);
        sale.lend(b"out", 1, b"{c}", T0).unwrap();
        assert_eq!(
            sale.absorb(b"out", 1, b"{c}", T0),
            Err(SaleError::TransferConflict("already lent from here"))
        );
        assert_eq!(
            sale.settle_transfer(b"t"),
            Ok(false),
            "absorbed ids are not settled"
        );
        assert_eq!(
            sale.absorb(b"big", MAX_UNITS, b"{c}", T0),
            Err(SaleError::TooMuchStock)
        );
        for bad in [(&b""[..], 1), (b"x", 0)] {
            assert!(sale.absorb(bad.0, bad.1, b"{c}", T0).is_err());
            assert!(sale.lend(bad.0, bad.1, b"{c}", T0).is_err());
        }
        let long = vec![b'x'; MAX_TRANSFER_ID + 1];
        assert!(sale.lend(&long, 1, b"{c}", T0).is_err());
        assert!(sale.absorb(b"y", 1, b"", T0).is_err());
        assert_invariants(&sale);
    }

    #[test]
    fn after_end_no_stock_moves_and_finished_ids_are_forgotten() {
        let mut sale = Sale::new(
            SaleConfig {
                end_ms: Some(T0 + 10),
                ..config(10, 1)
            },
            [0; 16],
        )
        .unwrap();
        sale.lend(b"pending", 2, b"{b}", T0).unwrap();
        sale.lend(b"done", 2, b"{b}", T0).unwrap();
        sale.settle_transfer(b"done").unwrap();
        sale.absorb(b"in", 1, b"{c}", T0).unwrap();
        assert_eq!(sale.ledger().len(), 3);
        sale.clear_events();
        assert_eq!(sale.lend(b"new", 1, b"{b}", T0 + 10), Err(SaleError::Ended));
        assert_eq!(
            sale.absorb(b"new", 1, b"{b}", T0 + 10),
            Err(SaleError::Ended)
        );
        // A pending LEND is still answered; it stays listed so its units stay accounted.
        assert_eq!(sale.lend(b"pending", 2, b"{b}", T0 + 10), Ok(2));
        sale.settle(T0 + 10);
        assert!(sale.changed(), "forgetting ids is a change to replicate");
        assert_eq!(sale.ledger().len(), 1);
        assert_eq!(
            sale.absorb(b"in", 1, b"{c}", T0 + 11),
            Err(SaleError::Ended)
        );
        assert_eq!(
            sale.lend(b"done", 2, b"{b}", T0 + 11),
            Err(SaleError::Ended)
        );
        let s = sale.summary(T0 + 11);
        assert_eq!(
            (s.lent, s.absorbed, s.pending_out, s.remaining),
            (4, 1, 2, 7)
        );
        assert_invariants(&sale);
        assert_eq!(sale.settle_transfer(b"pending"), Ok(true));
    }

    #[test]
    fn two_sales_moving_stock_keep_the_summed_identity() {
        let mut a = plain(10, 1);
        let mut b = plain(0, 1);
        let mut in_transit = 0;
        for round in 0..20u64 {
            let id = format!("t{round}");
            let from = if round % 2 == 0 { &mut a } else { &mut b };
            let lent = from.lend(id.as_bytes(), 3, b"peer", T0).unwrap();
            in_transit += lent;
            let sum = a.remaining() + b.remaining() + in_transit;
            assert_eq!(sum, 10, "units in pending transfers close the sum");
            let (from, to) = if round % 2 == 0 {
                (&mut a, &mut b)
            } else {
                (&mut b, &mut a)
            };
            if lent > 0 {
                assert!(to.absorb(id.as_bytes(), lent, b"peer", T0).unwrap());
                in_transit -= lent;
            }
            assert!(from.settle_transfer(id.as_bytes()).unwrap());
            assert_eq!(a.remaining() + b.remaining(), 10);
        }
        assert_invariants(&a);
        assert_invariants(&b);
    }

    #[test]
    fn a_full_buyer_table_refuses_new_buyers_and_changes_nothing() {
        let mut sale = Sale::new(config(100, 2), [1; 16]).unwrap();
        sale.buyers.limit_arena(40);
        let mut n = 0;
        let refused = loop {
            match sale.try_buy(format!("user-{n}").as_bytes(), 1, 0) {
                Ok(TryOutcome::Bought { .. }) => n += 1,
                other => break other,
            }
        };
        assert_eq!(refused, Err(SaleError::BuyersFull));
        assert!(n > 0);
        sale.clear_events();
        let before = sale.summary(0);
        assert_eq!(sale.try_buy(b"one-more", 1, 0), Err(SaleError::BuyersFull));
        assert_eq!(sale.summary(0), before, "nothing changed");
        assert!(sale.events().is_empty());
        // Who already bought still can, up to LIMIT, and returns work.
        assert!(matches!(
            sale.try_buy(b"user-0", 1, 0),
            Ok(TryOutcome::Bought { .. })
        ));
        assert_eq!(sale.cancel(b"user-0", Some(2), 0), Ok(2));
    }

    fn partition(stock: u64, hold_ms: Option<u64>) -> Sale {
        let config = SaleConfig {
            hold_ms,
            partition: Some(Partition {
                manifest: b"sale:1".to_vec(),
                index: 3,
                count: 16,
            }),
            ..config(stock, 2)
        };
        Sale::new(config, [2; 16]).unwrap()
    }

    #[test]
    fn a_drained_partition_asks_for_stock_until_sealed() {
        let mut sale = partition(1, None);
        assert!(matches!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        ));
        assert_eq!(sale.try_buy(b"b", 1, T0), Ok(TryOutcome::Drained));
        sale.clear_events();
        assert_eq!(sale.seal(1_000, T0), Ok(true));
        assert!(
            sale.changed() && sale.events().is_empty(),
            "a seal has no event"
        );
        assert!(sale.summary(T0).sealed);
        assert_eq!(sale.try_buy(b"b", 1, T0 + 999), Ok(TryOutcome::SoldOut));
        // The seal lapses: the next buyer looks for stock in the other partitions again.
        assert_eq!(sale.try_buy(b"b", 1, T0 + 1_000), Ok(TryOutcome::Drained));
        assert!(!sale.summary(T0 + 1_000).sealed);
        assert_invariants(&sale);
    }

    #[test]
    fn only_a_drained_partition_is_sealed() {
        let mut sale = partition(2, None);
        assert_eq!(sale.seal(1_000, T0), Ok(false), "it has stock");
        assert!(!sale.changed());
        assert!(matches!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 1 })
        ));
        // One unit left, two asked: drained for this purchase, but not sealable.
        assert_eq!(sale.try_buy(b"b", 2, T0), Ok(TryOutcome::Drained));
        assert_eq!(sale.seal(1_000, T0), Ok(false));
        let mut plain = Sale::new(config(0, 1), [0; 16]).unwrap();
        assert_eq!(plain.seal(1_000, T0), Err(SaleError::NotPartition));
        assert_eq!(plain.try_buy(b"a", 1, T0), Ok(TryOutcome::SoldOut));
        assert!(sale.seal(0, T0).is_err());
        assert!(sale.seal(MAX_UNITS + 1, T0).is_err());
    }

    #[test]
    fn stock_coming_back_lifts_the_seal() {
        let sealed = |sale: &mut Sale| {
            let mut n = 0;
            while let Ok(TryOutcome::Bought { .. }) =
                sale.try_buy(format!("u{n}").as_bytes(), 1, T0)
            {
                n += 1;
            }
            assert_eq!(sale.seal(60_000, T0), Ok(true));
            assert!(sale.summary(T0).sealed);
        };
        let mut sale = partition(2, Some(100));
        sealed(&mut sale);
        // A hold expiring returns its unit.
        assert!(!sale.summary(T0 + 100).sealed);
        assert_eq!(
            sale.seal(60_000, T0 + 100),
            Ok(false),
            "the expired hold came back"
        );
        let mut sale = partition(1, None);
        sealed(&mut sale);
        sale.restock(1, T0).unwrap();
        assert!(!sale.summary(T0).sealed);
        let mut sale = partition(1, None);
        sealed(&mut sale);
        assert_eq!(sale.absorb(b"t", 1, b"{sale:1/0}", T0), Ok(true));
        assert!(!sale.summary(T0).sealed);
        let mut sale = partition(1, None);
        sealed(&mut sale);
        assert_eq!(sale.cancel(b"u0", None, T0), Ok(1));
        assert!(!sale.summary(T0).sealed);
        // Drained again by its own buyers, it asks for stock rather than answering sold out.
        assert!(matches!(
            sale.try_buy(b"x", 1, T0),
            Ok(TryOutcome::Bought { .. })
        ));
        assert_eq!(sale.try_buy(b"y", 1, T0), Ok(TryOutcome::Drained));
    }

    #[test]
    fn partition_settings_are_checked() {
        for (index, count, manifest) in [
            (0, 0, &b"m"[..]),
            (16, 16, b"m"),
            (0, MAX_PARTITIONS + 1, b"m"),
            (0, 1, b""),
        ] {
            let config = SaleConfig {
                partition: Some(Partition {
                    manifest: manifest.to_vec(),
                    index,
                    count,
                }),
                ..config(1, 1)
            };
            assert!(Sale::new(config, [0; 16]).is_err(), "{index}/{count}");
        }
    }
}
