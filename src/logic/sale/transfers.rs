//! Stock moved to and from other sale keys (LEND, ABSORB, SETTLE, TRANSFERS), and the seal of
//! a drained partition.

use super::{EventKind, MAX_UNITS, Sale, SaleError};
use crate::logic::escrow::{Leg, MAX_TRANSFER_ID, Pending, Transfer};
use std::num::NonZeroU64;

impl Sale {
    pub(super) fn check_transfer_id(id: &[u8]) -> Result<(), SaleError> {
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
            let lent = known
                .repeat_lend(units, to)
                .map_err(SaleError::TransferConflict)?;
            // A repeat that moved units covers a write: a WAIT after it must count it (a
            // recovering client confirms a crashed mover's LEND is replicated before ABSORB).
            self.answered_repeat = lent > 0;
            return Ok(lent);
        }
        if self.has_ended(now_ms) {
            return Err(SaleError::Ended);
        }
        self.expire_due(now_ms);
        // Units the waiting room promised to admitted users are not this key's to lend: an
        // admitted user must find its unit (tests/client_room.rs saw one refused without this).
        let lent = units.min(self.remaining.saturating_sub(self.promised_units()));
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
        self.expire_due(now_ms);
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

    pub(super) fn is_sealed(&self, now_ms: u64) -> bool {
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
        self.expire_due(now_ms);
        if self.remaining > 0 {
            return Ok(false);
        }
        self.totals.sealed_until_ms = now_ms.saturating_add(ms);
        self.changed = true;
        // Every partition was found empty: a room closes here as at a one-key sale's sell-out.
        self.settle_room(now_ms);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::escrow::MAX_TRANSFER_ID;
    use crate::logic::sale::fixtures::*;
    use crate::logic::sale::*;

    #[test]
    fn lend_moves_only_remaining_units_and_is_idempotent() {
        let mut sale = held(5, 2, 100);
        sale.try_buy(b"a", 2, T0).unwrap();
        sale.clear_events();
        assert_eq!(sale.lend(b"t1", 2, b"{b}", T0), Ok(2));
        assert_eq!(kinds(&sale), vec![(EventKind::Lend, 2, 1)]);
        sale.clear_events();
        assert!(!sale.take_repeat(), "a first LEND is its own write");
        assert_eq!(
            sale.pending_transfers().next().unwrap().asked,
            NonZeroU64::new(2),
            "TRANSFERS WITHASKED lists the n to repeat it with"
        );
        // The same id, n and key again: the same amount, nothing more moves, nothing recorded;
        // a repeat that moved units marks itself, so the command layer propagates a marker a
        // WAIT counts.
        assert_eq!(sale.lend(b"t1", 2, b"{b}", T0 + 1), Ok(2));
        assert!(!sale.changed());
        assert!(sale.take_repeat());
        assert!(!sale.take_repeat(), "cleared by the reading");
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
        assert_eq!(sale.lend(b"t3", 1, b"{b}", T0), Ok(0));
        assert!(
            !sale.take_repeat(),
            "a repeat that moved nothing covers no write"
        );
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
        sale.expire_due(T0 + 10);
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
}
