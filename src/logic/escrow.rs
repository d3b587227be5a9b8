//! The transfer ledger of one sale: stock moved between sale keys by escrow transfers (O'Neil
//! 1986; Barbará and Garcia-Molina 1992), in two single-key steps that are each idempotent, so
//! that the two keys may live on different servers and a mover that crashes half way leaves
//! a record any client can finish from.
//!
//! `LEND` takes units out of the source and records an outgoing transfer under the client's
//! id; `ABSORB` adds them to the destination and remembers the id, so a second ABSORB adds
//! nothing; `SETTLE` marks the outgoing record done. A lent record, pending or settled, keeps
//! what the LEND was (destination and the `n` asked) beside the units it moved: a LEND repeated
//! with the same id, destination and `n` replies the recorded units and moves nothing, and
//! any other LEND with that id is refused. A settled record that forgot its destination would
//! accept the id again towards another key, whose ABSORB would then create units.
//!
//! Memory: each transfer id costs its length plus a few dozen bytes on each side, for as long
//! as the sale can still move stock; once the sale's END has passed, no transfer can start or
//! be absorbed any more, so every finished id is dropped (see `Sale::expire_due`). A sale without
//! END keeps them: one per transfer, never per buyer, and a transfer moves at least one unit
//! (`ABSORB` takes n >= 1), so there are at most as many as units absorbed.

use std::collections::BTreeMap;
use std::num::NonZeroU64;

/// Why a LEND with the id of a transfer settled before encoding v7 is refused: that record no
/// longer says where the units went, so no LEND can be shown to repeat it.
pub const LEGACY_SETTLED: &str =
    "already lent and settled by a module before 0.7, which did not keep its sale key";

/// Longest transfer id: ids are client-chosen (e.g. UUIDs), not payloads.
pub const MAX_TRANSFER_ID: usize = 128;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leg {
    /// Lent by this sale to `to` at `started_ms` (master clock); still to be settled. `asked`
    /// is LEND's `n` (the units moved may be fewer); `None` in records decoded from encodings
    /// before v7, which did not keep it.
    Out {
        to: Vec<u8>,
        asked: Option<NonZeroU64>,
        started_ms: u64,
    },
    /// Lent by this sale and settled: kept, with what the LEND was, so that the same LEND
    /// again moves nothing and another LEND with this id is refused. `to` is `None` in
    /// records decoded from encodings before v7, which dropped it at SETTLE.
    Settled {
        to: Option<Vec<u8>>,
        asked: Option<NonZeroU64>,
    },
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

    /// How `LEND id n TO to` stands against this record of the same id: `Ok(units lent)` when
    /// it repeats the LEND that made the record (it then moves nothing), else why it is refused.
    pub fn repeat_lend(&self, n: u64, to: &[u8]) -> Result<u64, &'static str> {
        let (recorded_to, asked) = match &self.leg {
            Leg::Out { to, asked, .. } => (Some(to.as_slice()), *asked),
            Leg::Settled { to, asked } => (to.as_deref(), *asked),
            Leg::In { .. } => return Err("already absorbed here"),
        };
        match recorded_to {
            None => return Err(LEGACY_SETTLED),
            Some(recorded) if recorded != to => return Err("already lent to another sale key"),
            Some(_) => {}
        }
        // Without the recorded `n` (before v7), any `n` that could have moved these units
        // is taken as the same LEND.
        let same_n = match asked {
            Some(asked) => asked.get() == n,
            None => n >= self.units,
        };
        if same_n {
            Ok(self.units)
        } else {
            Err("already lent with another n")
        }
    }
}

/// A pending outgoing transfer, as SECKILL.TRANSFERS lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending<'a> {
    pub id: &'a [u8],
    pub units: u64,
    pub to: &'a [u8],
    pub started_ms: u64,
    /// The `n` its LEND asked for (None: recorded before v7), which a LEND repeated by another
    /// client must name.
    pub asked: Option<NonZeroU64>,
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
            Leg::Out {
                to,
                started_ms,
                asked,
            } => Some(Pending {
                id,
                units: t.units,
                to,
                started_ms: *started_ms,
                asked: *asked,
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
            Leg::Settled { .. } => self.lent += transfer.units,
            Leg::In { .. } => self.absorbed += transfer.units,
        }
        self.by_id.insert(id.to_vec(), transfer);
    }

    /// Marks an outgoing transfer settled, keeping its destination and `n`; false if there is
    /// no pending one with this id.
    pub fn settle(&mut self, id: &[u8]) -> bool {
        match self.by_id.get_mut(id) {
            Some(t) => match &mut t.leg {
                Leg::Out { to, asked, .. } => {
                    t.leg = Leg::Settled {
                        to: Some(std::mem::take(to)),
                        asked: *asked,
                    };
                    self.pending_units -= t.units;
                    true
                }
                _ => false,
            },
            None => false,
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
    pub fn set_decoded_totals(&mut self, lent: u64, absorbed: u64) -> Result<(), &'static str> {
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

    /// Drops what encodings before v7 did not keep (a lent record's `n`, a settled record's
    /// destination), so a sale built today compares with an old fixture's.
    #[cfg(test)]
    pub fn forget_what_v7_added(&mut self) {
        for transfer in self.by_id.values_mut() {
            match &mut transfer.leg {
                Leg::Out { asked, .. } => *asked = None,
                Leg::Settled { to, asked } => (*to, *asked) = (None, None),
                Leg::In { .. } => {}
            }
        }
    }

    /// Heap bytes, for MEMORY USAGE: a B-tree entry is about its key, value and node share.
    pub fn heap_bytes(&self) -> usize {
        self.by_id
            .iter()
            .map(|(id, t)| {
                let peer = match &t.leg {
                    Leg::Out { to, .. } => to.capacity(),
                    Leg::Settled { to, .. } => to.as_ref().map_or(0, Vec::capacity),
                    Leg::In { from } => from.capacity(),
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
                asked: NonZeroU64::new(units + 1),
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
                started_ms: 7,
                asked: NonZeroU64::new(6),
            }]
        );
        assert!(ledger.settle(b"t1"));
        assert!(!ledger.settle(b"t1"), "settled once");
        assert!(
            !ledger.settle(b"t2"),
            "an incoming transfer is not settled here"
        );
        assert!(!ledger.settle(b"nope"));
        assert_eq!(
            ledger.get(b"t1").unwrap().leg,
            Leg::Settled {
                to: Some(b"b".to_vec()),
                asked: NonZeroU64::new(6)
            },
            "a settled record keeps where it went and what was asked"
        );
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
    fn decoded_totals_cannot_be_below_their_records() {
        let mut ledger = Ledger::default();
        ledger.insert(b"a", out(5, b"x"));
        assert_eq!(
            ledger.set_decoded_totals(4, 0),
            Err("transfer totals below their records")
        );
        assert_eq!(ledger.set_decoded_totals(9, 2), Ok(()));
        assert_eq!((ledger.lent(), ledger.absorbed()), (9, 2));
        assert!(!ledger.is_empty());
    }

    #[test]
    fn a_lend_repeats_only_with_the_same_destination_and_n() {
        let mut ledger = Ledger::default();
        ledger.insert(b"t", out(3, b"b"));
        let pending = ledger.get(b"t").unwrap().clone();
        assert_eq!(pending.repeat_lend(4, b"b"), Ok(3), "asked 4, moved 3");
        assert_eq!(
            pending.repeat_lend(3, b"b"),
            Err("already lent with another n")
        );
        assert_eq!(
            pending.repeat_lend(4, b"c"),
            Err("already lent to another sale key")
        );
        ledger.settle(b"t");
        let settled = ledger.get(b"t").unwrap();
        assert_eq!(settled.repeat_lend(4, b"b"), Ok(3), "also after SETTLE");
        assert_eq!(
            settled.repeat_lend(4, b"c"),
            Err("already lent to another sale key"),
            "the hole of issue 31: a settled id lent again elsewhere"
        );
        assert_eq!(
            settled.repeat_lend(5, b"b"),
            Err("already lent with another n")
        );
        let absorbed = Transfer {
            units: 2,
            leg: Leg::In {
                from: b"a".to_vec(),
            },
        };
        assert_eq!(absorbed.repeat_lend(2, b"a"), Err("already absorbed here"));
    }

    #[test]
    fn records_from_before_v7_repeat_only_what_they_can_prove() {
        // Pending: the destination is known, the `n` asked is not; any n that could have
        // moved the recorded units counts as the same LEND.
        let pending = Transfer {
            units: 3,
            leg: Leg::Out {
                to: b"b".to_vec(),
                asked: None,
                started_ms: 1,
            },
        };
        assert_eq!(pending.repeat_lend(3, b"b"), Ok(3));
        assert_eq!(pending.repeat_lend(9, b"b"), Ok(3));
        assert_eq!(
            pending.repeat_lend(2, b"b"),
            Err("already lent with another n")
        );
        assert_eq!(
            pending.repeat_lend(3, b"c"),
            Err("already lent to another sale key")
        );
        // Settled before v7: the destination is gone, so no LEND can be proven a repeat.
        let settled = Transfer {
            units: 3,
            leg: Leg::Settled {
                to: None,
                asked: None,
            },
        };
        for to in [&b"b"[..], b"c"] {
            assert_eq!(settled.repeat_lend(3, to), Err(LEGACY_SETTLED));
        }
        let mut ledger = Ledger::default();
        ledger.insert(b"old", settled);
        assert_eq!((ledger.lent(), ledger.pending_units()), (3, 0));
        assert_eq!(
            ledger.heap_bytes(),
            3 + std::mem::size_of::<(Vec<u8>, Transfer)>() + 16
        );
    }
}
