//! The flash-sale state machine. No Redis types: the command layer passes the clock in, feeds
//! it and replies; so every branch is unit-tested with a fake clock, and a replica that is
//! given its master's clock reaches exactly the master's state.
//!
//! Per user there is one order at a time (see `BuyerRecord`): a user's first purchase opens it, and
//! later purchases add to it until all its units have gone back to stock. With HOLD, bought
//! units are *held* until confirmed; an unconfirmed hold expires and its units go back.
//!
//! The identity kept by every method, at every instant:
//! `remaining + held + sold == stock + restocked`, where `sold` counts final units still
//! owned (refunds take them out), and no user owns more than `limit` units.

mod attempts;
mod holds;
mod ids;
mod purchase;
mod queue;
mod report;
mod transfers;

pub use attempts::{Attempt, AttemptKind, Attempts, MAX_ATTEMPT_ID};
pub use holds::HoldQueue;
pub use ids::next_entry_id;
pub use purchase::TryOutcome;
pub use report::{BuyerRow, BuyerState, SaleSummary};

use super::buyers::{BuyerRecord, Buyers, Layout, RecordId};
use super::escrow::Ledger;
use super::room::{Room, RoomConfig, RoomError, UserRef};
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
    /// An attempt id reused for another call.
    AttemptConflict(&'static str),
    /// Bad settings, or a restored sale that breaks the invariants.
    Invalid(&'static str),
    /// The buyer table holds all the user ids it can (about 4 GiB of them).
    BuyersFull,
    /// SEAL on a sale that is not a partition of a larger one.
    NotPartition,
    /// JOIN, POSITION or ADMIT on a sale made without QUEUE.
    NoQueue,
    /// The waiting room holds all the users it can.
    RoomFull,
}

impl From<RoomError> for SaleError {
    fn from(e: RoomError) -> SaleError {
        match e {
            RoomError::EmptyUser => SaleError::EmptyUser,
            RoomError::Full => SaleError::RoomFull,
        }
    }
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
    /// A waiting room in front of the stock (`QUEUE`).
    pub queue: Option<RoomConfig>,
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
    /// A user admitted from the waiting room (no unit moves).
    Admit,
    /// START passed: the waiting room's cohort was put in its random order (`qty` users).
    Draw,
    /// An admitted user's window ended before it bought.
    Lapse,
    /// A user left the waiting room (`qty`: the position it left, 0 if admitted or before
    /// START).
    Leave,
    /// A user's turn came after it stopped joining again (PRESENCE).
    Drop,
}

impl EventKind {
    /// Every kind, in declared order (`kind as usize` is its index here).
    pub const ALL: [EventKind; 12] = [
        EventKind::Purchase,
        EventKind::Confirm,
        EventKind::Cancel,
        EventKind::Expire,
        EventKind::Restock,
        EventKind::Lend,
        EventKind::Absorb,
        EventKind::Admit,
        EventKind::Draw,
        EventKind::Lapse,
        EventKind::Leave,
        EventKind::Drop,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EventKind::Purchase => "purchase",
            EventKind::Confirm => "confirm",
            EventKind::Cancel => "cancel",
            EventKind::Expire => "expire",
            EventKind::Restock => "restock",
            EventKind::Lend => "lend",
            EventKind::Absorb => "absorb",
            EventKind::Admit => "admit",
            EventKind::Draw => "draw",
            EventKind::Lapse => "lapse",
            EventKind::Leave => "leave",
            EventKind::Drop => "drop",
        }
    }
}

/// One state change, for the event stream and the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaleEvent {
    pub kind: EventKind,
    /// The buyer's record (`None` for a restock): records never move, so the user is found there.
    pub record_id: Option<RecordId>,
    pub qty: u64,
    /// The order number (0 for a restock, and in sales without an event stream).
    pub order: u64,
    /// Units left after the change.
    pub remaining: u64,
    /// The waiting room's user of an `Admit`, `Lapse`, `Leave` or `Drop` (a handle into the
    /// room).
    pub room_user: Option<UserRef>,
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
    /// The deadline of every hold (see [`HoldQueue`]).
    holds: HoldQueue,
    /// Stock moved to and from other sale keys.
    ledger: Ledger,
    /// Each buyer's last TRY or CANCEL with an attempt id (see `attempts.rs`).
    attempts: Attempts,
    /// The waiting room of a sale made with QUEUE (see `queue.rs`).
    room: Option<Box<Room>>,
    /// Changes not yet taken by the command layer.
    events: Vec<SaleEvent>,
    /// Whether anything changed since the last `clear_events`, with or without an event (a
    /// settled transfer, forgotten transfer ids): what the command layer replicates.
    changed: bool,
    /// Whether the last call was answered from its attempt record (a repeat of a TRY or a
    /// CANCEL that changed something the first time): runtime only, read once by
    /// [`Sale::take_repeat`].
    answered_repeat: bool,
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
        if let Some(queue) = &config.queue
            && (queue.window_ms == 0
                || queue.window_ms > MAX_UNITS
                || queue.rate.is_some_and(|r| {
                    r.users == 0 || r.per_ms == 0 || r.users > MAX_UNITS || r.per_ms > MAX_UNITS
                }))
        {
            return Err(SaleError::Invalid("QUEUE out of range"));
        }
        let room = config
            .queue
            .map(|queue| Box::new(Room::new(queue, room_seed(&seed), config.start_ms, 0)));
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
            holds: HoldQueue::default(),
            ledger: Ledger::default(),
            attempts: Attempts::default(),
            room,
            events: Vec::new(),
            changed: false,
            answered_repeat: false,
            totals: SaleTotals {
                seed,
                ..SaleTotals::default()
            },
            config,
        })
    }

    /// Rebuilds a sale from persisted parts, refusing anything that breaks an invariant.
    pub fn from_parts<'a>(
        config: SaleConfig,
        totals: SaleTotals,
        ledger: Ledger,
        record_count: usize,
        user_bytes: usize,
        records: impl Iterator<Item = (&'a [u8], BuyerRecord)>,
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
        for (user, record) in records {
            if user.is_empty() {
                return Err(SaleError::EmptyUser);
            }
            // A field the layout does not store would be lost, and the sale's encoding with it.
            let unstorable = (!layout.holds && (record.held_qty != 0 || record.expires_at_ms != 0))
                || (!layout.orders && record.order != 0);
            if record.units() > limit || unstorable || record.order > totals.orders {
                return Err(SaleError::Invalid("buyer record out of range"));
            }
            if !loader.has_room() {
                return Err(SaleError::BuyersFull);
            }
            owned = owned
                .checked_add(record.units())
                .filter(|&units| units <= supply)
                .ok_or(SaleError::Invalid("buyers hold more than the stock"))?;
            let record_id = loader
                .push(user, &record)
                .ok_or(SaleError::Invalid("duplicate buyer"))?;
            if record.held_qty > 0 {
                holds.push((record.expires_at_ms, record_id));
            }
            held += record.held_qty;
            sold += record.final_qty;
        }
        if !loader.finish() {
            return Err(SaleError::Invalid("duplicate buyer"));
        }
        sale.held = held;
        sale.sold = sold;
        sale.remaining = supply - owned;
        sale.buyers.shrink_to_fit();
        holds.sort_unstable();
        sale.holds = HoldQueue::from_sorted(holds);
        Ok(sale)
    }

    pub fn config(&self) -> &SaleConfig {
        &self.config
    }

    /// Every unit that ever came into the sale (stock, restocks, absorbed transfers) plus
    /// `more`, if that stays within `MAX_UNITS`.
    pub(super) fn units_added(&self, more: u64) -> Option<u64> {
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

    /// Every buyer's last attempt, with the buyer's user id, in record (creation) order.
    pub fn attempts(&self) -> impl Iterator<Item = (&[u8], Attempt)> {
        self.attempts
            .in_record_order()
            .into_iter()
            .map(|(record_id, attempt)| (self.buyers.record(record_id).0, attempt))
    }

    /// Puts back a decoded buyer's last attempt.
    pub fn set_decoded_attempt(&mut self, user: &[u8], attempt: Attempt) -> Result<(), SaleError> {
        let (record_id, _) = self
            .buyers
            .find(user)
            .ok_or(SaleError::Invalid("attempt of an unknown buyer"))?;
        if self.attempts.get(record_id).is_some() {
            return Err(SaleError::Invalid("two attempts of one buyer"));
        }
        self.attempts.set(record_id, attempt);
        Ok(())
    }

    #[cfg(test)]
    pub fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    pub(super) fn has_ended(&self, now_ms: u64) -> bool {
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

    pub(super) fn record(
        &mut self,
        kind: EventKind,
        record_id: Option<RecordId>,
        qty: u64,
        order: u64,
    ) {
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
            record_id,
            qty,
            order,
            remaining: self.remaining,
            room_user: None,
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

    /// Whether the last call repeated an attempt that changed the sale (a purchase, units
    /// returned), answered from its record with nothing changed now; cleared by the reading.
    /// The command layer propagates a marker for it, so that a `WAIT` on the connection of the
    /// repeat covers the write it repeats (a client resends a purchase on a new connection,
    /// whose own last write would otherwise be none).
    pub fn take_repeat(&mut self) -> bool {
        std::mem::take(&mut self.answered_repeat)
    }

    pub fn clear_events(&mut self) {
        self.events.clear();
        self.changed = false;
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

    /// Heap plus inline bytes, for MEMORY USAGE.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Sale>()
            + self.buyers.heap_bytes()
            + crate::logic::buyers::allocated(self.holds.heap_bytes())
            + self.ledger.heap_bytes()
            + self.attempts.heap_bytes()
            + self.config.events.as_ref().map_or(0, Vec::capacity)
            + self.events.capacity() * std::mem::size_of::<SaleEvent>()
            + self.room.as_ref().map_or(0, |room| room.bytes())
    }
}

/// The waiting room's shuffle seed: the sale's random seed (drawn at INIT, replicated with it).
fn room_seed(seed: &[u8; 16]) -> u64 {
    let (high, low) = seed.split_at(8);
    u64::from_le_bytes(high.try_into().expect("8 bytes"))
        ^ u64::from_le_bytes(low.try_into().expect("8 bytes"))
}

/// What the tests of every part of the sale share: settings, sales, and the invariants.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    pub(crate) const T0: u64 = 1_700_000_000_000;

    pub(crate) fn config(stock: u64, limit: u64) -> SaleConfig {
        SaleConfig {
            stock,
            limit,
            ..SaleConfig::default()
        }
    }

    pub(crate) fn held(stock: u64, limit: u64, hold_ms: u64) -> Sale {
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

    pub(crate) fn plain(stock: u64, limit: u64) -> Sale {
        Sale::new(config(stock, limit), [0; 16]).unwrap()
    }

    /// The documented identity and the per-user limit, from the stored records.
    pub(crate) fn assert_invariants(sale: &Sale) {
        let (mut held, mut sold, mut live) = (0, 0, 0);
        for (_, _, record) in sale.buyers().iter() {
            assert!(record.units() <= sale.config.limit);
            held += record.held_qty;
            sold += record.final_qty;
            live += u64::from(record.units() > 0);
        }
        assert_eq!((held, sold), (sale.held, sale.sold));
        assert_eq!(live, sale.buyers().len() as u64);
        assert_eq!(
            sale.remaining + sale.held + sale.sold,
            sale.config.stock + sale.totals.restocked + sale.ledger.absorbed() - sale.ledger.lent()
        );
        let holding: Vec<RecordId> = sale
            .buyers()
            .iter()
            .filter(|(_, _, e)| e.held_qty > 0)
            .map(|(record_id, _, _)| record_id)
            .collect();
        let mut queued: Vec<RecordId> = sale
            .holds
            .iter()
            .filter(|&&(at, record_id)| sale.is_live(at, record_id))
            .map(|&(_, record_id)| record_id)
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
        if let Some(&(at, record_id)) = sale.holds.iter().next() {
            assert!(sale.is_live(at, record_id), "the front is live");
        }
    }

    pub(crate) fn kinds(sale: &Sale) -> Vec<(EventKind, u64, u64)> {
        sale.events()
            .iter()
            .map(|e| (e.kind, e.qty, e.remaining))
            .collect()
    }

    pub(crate) fn partition(stock: u64, hold_ms: Option<u64>) -> Sale {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::sale::fixtures::*;

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
    fn from_parts_checks_every_invariant() {
        let record = |final_qty, held_qty| BuyerRecord {
            final_qty,
            held_qty,
            ..BuyerRecord::default()
        };
        let totals = SaleTotals::default();
        let ok = [(&b"a"[..], record(1, 0)), (&b"b"[..], record(2, 0))];
        let sale = Sale::from_parts(
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

        type Record<'a> = (&'a [u8], BuyerRecord);
        let cases: [(&[Record], SaleError); 6] = [
            (&[(b"", record(1, 0))], SaleError::EmptyUser),
            (
                &[(b"a", record(3, 0))],
                SaleError::Invalid("buyer record out of range"),
            ),
            (
                &[(b"a", record(0, 1))],
                SaleError::Invalid("buyer record out of range"),
            ),
            (
                &[(
                    b"a",
                    BuyerRecord {
                        order: 1,
                        ..record(1, 0)
                    },
                )],
                SaleError::Invalid("buyer record out of range"),
            ),
            (
                &[(b"a", record(1, 0)), (b"a", record(1, 0))],
                SaleError::Invalid("duplicate buyer"),
            ),
            (
                &[
                    (b"a", record(2, 0)),
                    (b"b", record(2, 0)),
                    (b"c", record(2, 0)),
                ],
                SaleError::Invalid("buyers hold more than the stock"),
            ),
        ];
        for (records, expected) in cases {
            let got = Sale::from_parts(
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
            Sale::from_parts(
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
