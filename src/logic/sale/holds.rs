//! Holds: the deadline of every unconfirmed purchase, and their expiry back to stock.

use super::{EventKind, Sale};
use crate::logic::buyers::Slot;

impl Sale {
    /// When the earliest live hold expires.
    pub fn next_expiry(&self) -> Option<u64> {
        self.holds.front().map(|&(at, _)| at)
    }

    /// Whether the hold item `(at, slot)` still stands for units held until `at`.
    pub(super) fn is_live(&self, at: u64, slot: Slot) -> bool {
        let entry = self.buyers.entry(slot).1;
        entry.held_qty > 0 && entry.expires_at_ms == at
    }

    /// Queues a new hold's deadline. Deadlines arrive in order unless the clock went back;
    /// then the item goes where its deadline belongs, still near the back for a small step.
    pub(super) fn queue_hold(&mut self, at: u64, slot: Slot) {
        match self.holds.back() {
            Some(&(last, _)) if last > at => {
                let place = self.holds.partition_point(|&(queued, _)| queued <= at);
                self.holds.insert(place, (at, slot));
            }
            _ => self.holds.push_back((at, slot)),
        }
    }

    /// Drops the stale items at the front, so that the front is the next hold to expire.
    pub(super) fn drop_stale_holds(&mut self) {
        while let Some(&(at, slot)) = self.holds.front()
            && !self.is_live(at, slot)
        {
            self.holds.pop_front();
        }
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
    pub(super) fn settle_due(&self, now_ms: u64) -> bool {
        (self.has_ended(now_ms) && self.ledger.has_finished())
            || self.holds.front().is_some_and(|&(at, _)| at <= now_ms)
    }
}

#[cfg(test)]
mod tests {
    use crate::logic::sale::fixtures::*;
    use crate::logic::sale::*;

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
}
