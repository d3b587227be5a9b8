//! The transfer ledger of one sale: stock moved between sale keys by escrow transfers (O'Neil
//! 1986; Barbará and Garcia-Molina 1992), in two single-key steps that are each idempotent, so
//! that the two keys may live on different servers and a mover that crashes half way leaves
//! a record any client can finish from.
//!
//! `LEND` takes units out of the source and records an outgoing transfer under the client's
//! id; `ABSORB` adds them to the destination and remembers the id, so a second ABSORB adds
//! nothing; `SETTLE` marks the outgoing record done. A settled record keeps its id and amount
//! (a LEND repeated after SETTLE must not move units again) and forgets its destination.
//!
//! Memory: each transfer id costs its length plus a few dozen bytes on each side, for as long
//! as the sale can still move stock; once the sale's END has passed, no transfer can start or
//! be absorbed any more, so every finished id is dropped (see `Sale::settle`). A sale without
//! END keeps them: one per transfer, never per buyer, and a transfer moves at least one unit
//! (`ABSORB` takes n >= 1), so there are at most as many as units absorbed.

use std::collections::BTreeMap;

/// Longest transfer id: ids are client-chosen (e.g. UUIDs), not payloads.
pub const MAX_TRANSFER_ID: usize = 128;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leg {
    /// Lent by this sale to `to` at `started_ms` (master clock); still to be settled.
    Out { to: Vec<u8>, started_ms: u64 },
    /// Lent by this sale and settled: kept so that the same LEND again moves nothing.
    Settled,
    /// Absorbed by this sale from `from`.
    In { from: Vec<u8> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub units: u64,
    pub leg: Leg,
}

impl Transfer {
    /// Settled or absorbed: only a pending outgoing transfer can still move.
    fn is_finished(&self) -> bool {
        !matches!(self.leg, Leg::Out { .. })
    }
}

/// A pending outgoing transfer, as SECKILL.TRANSFERS lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending<'a> {
    pub id: &'a [u8],
    pub units: u64,
    pub to: &'a [u8],
    pub started_ms: u64,
}

/// Every transfer a sale took part in, by id (sorted, so encodings and listings are the same
/// on every server), with the totals the sale's identity needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    by_id: BTreeMap<Vec<u8>, Transfer>,
    /// Units ever lent out (settled or not).
    lent: u64,
    /// Units ever absorbed.
    absorbed: u64,
    /// Units of outgoing transfers not yet settled.
    pending_units: u64,
}

impl Ledger {
    pub fn lent(&self) -> u64 {
        self.lent
    }

    pub fn absorbed(&self) -> u64 {
        self.absorbed
    }

    pub fn pending_units(&self) -> u64 {
        self.pending_units
    }

    pub fn get(&self, id: &[u8]) -> Option<&Transfer> {
        self.by_id.get(id)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Every record in id order, for the encoding.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Transfer)> {
        self.by_id.iter().map(|(id, t)| (id.as_slice(), t))
    }

    /// Outgoing transfers not yet settled, in id order.
    pub fn pending(&self) -> impl Iterator<Item = Pending<'_>> {
        self.by_id.iter().filter_map(|(id, t)| match &t.leg {
            Leg::Out { to, started_ms } => Some(Pending {
                id,
                units: t.units,
                to,
                started_ms: *started_ms,
            }),
            _ => None,
        })
    }

    /// Records a transfer (caller checked the id is new and moved the units).
    pub fn insert(&mut self, id: &[u8], transfer: Transfer) {
        match transfer.leg {
            Leg::Out { .. } => {
                self.lent += transfer.units;
                self.pending_units += transfer.units;
            }
            Leg::Settled => self.lent += transfer.units,
            Leg::In { .. } => self.absorbed += transfer.units,
        }
        self.by_id.insert(id.to_vec(), transfer);
    }

    /// Marks an outgoing transfer settled; false if there is no pending one with this id.
    pub fn settle(&mut self, id: &[u8]) -> bool {
        match self.by_id.get_mut(id) {
            Some(t) if matches!(t.leg, Leg::Out { .. }) => {
                t.leg = Leg::Settled;
                self.pending_units -= t.units;
                true
            }
            _ => false,
        }
    }

    /// Drops every finished record (settled or absorbed), keeping the totals; returns whether
    /// anything was dropped.
    pub fn forget_finished(&mut self) -> bool {
        let before = self.by_id.len();
        self.by_id.retain(|_, t| !t.is_finished());
        self.by_id.len() != before
    }

    /// Whether [`Ledger::forget_finished`] would forget anything.
    pub fn has_finished(&self) -> bool {
        self.by_id.values().any(Transfer::is_finished)
    }

    /// Sets the totals of a decoded ledger whose finished records may have been forgotten.
    pub fn restore_totals(&mut self, lent: u64, absorbed: u64) -> Result<(), &'static str> {
        let (listed_lent, listed_absorbed) =
            self.iter()
                .fold((0u64, 0u64), |(l, a), (_, t)| match t.leg {
                    Leg::In { .. } => (l, a.saturating_add(t.units)),
                    _ => (l.saturating_add(t.units), a),
                });
        if listed_lent > lent || listed_absorbed > absorbed {
            return Err("transfer totals below their records");
        }
        self.lent = lent;
        self.absorbed = absorbed;
        Ok(())
    }

    /// Heap bytes, for MEMORY USAGE: a B-tree entry is about its key, value and node share.
    pub fn heap_bytes(&self) -> usize {
        self.by_id
            .iter()
            .map(|(id, t)| {
                let peer = match &t.leg {
                    Leg::Out { to, .. } => to.capacity(),
                    Leg::In { from } => from.capacity(),
                    Leg::Settled => 0,
                };
                id.capacity() + peer + std::mem::size_of::<(Vec<u8>, Transfer)>() + 16
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(units: u64, to: &[u8]) -> Transfer {
        Transfer {
            units,
            leg: Leg::Out {
                to: to.to_vec(),
                started_ms: 7,
            },
        }
    }

    #[test]
    fn totals_follow_every_leg() {
        let mut ledger = Ledger::default();
        ledger.insert(b"t1", out(5, b"b"));
        ledger.insert(
            b"t2",
            Transfer {
                units: 3,
                leg: Leg::In {
                    from: b"c".to_vec(),
                },
            },
        );
        assert_eq!(
            (ledger.lent(), ledger.absorbed(), ledger.pending_units()),
            (5, 3, 5)
        );
        assert_eq!(
            ledger.pending().collect::<Vec<_>>(),
            vec![Pending {
                id: b"t1",
                units: 5,
                to: b"b",
                started_ms: 7
            }]
        );
        assert!(ledger.settle(b"t1"));
        assert!(!ledger.settle(b"t1"), "settled once");
        assert!(
            !ledger.settle(b"t2"),
            "an incoming transfer is not settled here"
        );
        assert!(!ledger.settle(b"nope"));
        assert_eq!(ledger.get(b"t1").unwrap().leg, Leg::Settled);
        assert_eq!((ledger.lent(), ledger.pending_units()), (5, 0));
        assert_eq!(ledger.pending().count(), 0);
        assert!(ledger.heap_bytes() > 0);
    }

    #[test]
    fn forgetting_keeps_pending_records_and_totals() {
        let mut ledger = Ledger::default();
        ledger.insert(b"a", out(1, b"x"));
        ledger.insert(b"b", out(2, b"x"));
        ledger.settle(b"b");
        ledger.insert(
            b"c",
            Transfer {
                units: 4,
                leg: Leg::In {
                    from: b"y".to_vec(),
                },
            },
        );
        assert!(ledger.forget_finished());
        assert!(!ledger.forget_finished());
        assert_eq!(ledger.len(), 1);
        assert_eq!((ledger.lent(), ledger.absorbed()), (3, 4));
        assert!(ledger.get(b"a").is_some());
    }

    #[test]
    fn restored_totals_cannot_be_below_their_records() {
        let mut ledger = Ledger::default();
        ledger.insert(b"a", out(5, b"x"));
        assert_eq!(
            ledger.restore_totals(4, 0),
            Err("transfer totals below their records")
        );
        assert_eq!(ledger.restore_totals(9, 2), Ok(()));
        assert_eq!((ledger.lent(), ledger.absorbed()), (9, 2));
        assert!(!ledger.is_empty());
    }
}
