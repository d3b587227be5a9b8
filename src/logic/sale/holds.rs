//! Holds: the deadline of every unconfirmed purchase, and their expiry back to stock.

use super::{EventKind, Sale};
use crate::logic::buyers::{Buyers, RecordId};
use std::collections::VecDeque;

/// Every live hold's `(deadline, record)`, in deadline order, plus stale ones: a confirm or
/// cancel leaves its hold's item behind, and an item counts only while its record still holds
/// units under that deadline (the sale tells, see [`Sale::is_live`]). Deadlines are
/// `now + HOLD`, so they come in order and a purchase appends one in O(1); the sale keeps the
/// front live.
/// Generic over the record handle only so that its tests need no buyer table.
#[derive(Clone, Debug)]
pub struct HoldQueue<R = RecordId> {
    items: VecDeque<(u64, R)>,
}

impl<R> Default for HoldQueue<R> {
    fn default() -> Self {
        HoldQueue {
            items: VecDeque::new(),
        }
    }
}

impl<R: Copy + Ord> HoldQueue<R> {
    /// A queue of `items` already in deadline order (a decoded sale's holds, sorted).
    pub fn from_sorted(items: Vec<(u64, R)>) -> HoldQueue<R> {
        debug_assert!(items.is_sorted());
        HoldQueue {
            items: items.into(),
        }
    }

    /// The front item's deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        self.items.front().map(|&(at, _)| at)
    }

    /// Whether the front item is due at `now_ms`.
    pub fn is_due(&self, now_ms: u64) -> bool {
        self.next_deadline().is_some_and(|at| at <= now_ms)
    }

    /// Queues a new hold's deadline. Deadlines arrive in order unless the clock went back;
    /// then the item goes where its deadline belongs, still near the back for a small step.
    pub fn push(&mut self, at: u64, record_id: R) {
        match self.items.back() {
            Some(&(last, _)) if last > at => {
                let place = self.items.partition_point(|&(queued, _)| queued <= at);
                self.items.insert(place, (at, record_id));
            }
            _ => self.items.push_back((at, record_id)),
        }
    }

    /// Takes the front item if it is due at `now_ms`.
    pub fn pop_due(&mut self, now_ms: u64) -> Option<(u64, R)> {
        if self.is_due(now_ms) {
            self.items.pop_front()
        } else {
            None
        }
    }

    /// Drops the items at the front that `is_live` says are stale, so that the front is the
    /// next hold to expire.
    pub fn drop_stale(&mut self, is_live: impl Fn(u64, R) -> bool) {
        while let Some(&(at, record_id)) = self.items.front()
            && !is_live(at, record_id)
        {
            self.items.pop_front();
        }
    }

    /// Every item, in deadline order.
    pub fn iter(&self) -> impl Iterator<Item = &(u64, R)> {
        self.items.iter()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Bytes the queue holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<(u64, R)>()
    }
}

/// Whether record `record_id` still holds units until `at`.
fn is_live(buyers: &Buyers, at: u64, record_id: RecordId) -> bool {
    let record = buyers.record(record_id).1;
    record.held_qty > 0 && record.expires_at_ms == at
}

impl Sale {
    /// When the earliest live hold expires.
    pub fn next_expiry(&self) -> Option<u64> {
        self.holds.next_deadline()
    }

    /// When the sale's timer must fire next: the earliest hold expiry or waiting-room step.
    pub fn next_timer_ms(&self) -> Option<u64> {
        self.next_expiry()
            .into_iter()
            .chain(self.next_room_step())
            .min()
    }

    /// Whether the hold item `(at, record_id)` still stands for units held until `at`.
    pub(super) fn is_live(&self, at: u64, record_id: RecordId) -> bool {
        is_live(&self.buyers, at, record_id)
    }

    /// Drops the stale holds at the front of the queue.
    pub(super) fn drop_stale_holds(&mut self) {
        let buyers = &self.buyers;
        self.holds
            .drop_stale(|at, record_id| is_live(buyers, at, record_id));
    }

    /// Returns the units of every hold due at `now_ms` to stock; once the sale has ended,
    /// forgets its finished transfers (none can be lent or absorbed again); steps the waiting
    /// room. Every change runs it first, so each sees the sale as of its own clock.
    pub fn expire_due(&mut self, now_ms: u64) {
        if self.has_ended(now_ms) {
            self.changed |= self.ledger.forget_finished();
        }
        let mut popped = false;
        while let Some((at, record_id)) = self.holds.pop_due(now_ms) {
            popped = true;
            if !self.is_live(at, record_id) {
                continue;
            }
            let (_, mut record) = self.buyers.record(record_id);
            let qty = record.held_qty;
            record.held_qty = 0;
            self.buyers.set(record_id, &record);
            self.held -= qty;
            self.remaining += qty;
            self.record(EventKind::Expire, Some(record_id), qty, record.order);
        }
        if popped {
            self.drop_stale_holds();
        }
        self.step_room(now_ms);
    }

    /// Whether [`Sale::expire_due`] at `now_ms` would change anything: it must look at what
    /// `expire_due` does, or a TRY called unchanged could change the sale without its stream.
    pub(super) fn anything_due(&self, now_ms: u64) -> bool {
        (self.has_ended(now_ms) && self.ledger.has_finished())
            || self.holds.is_due(now_ms)
            || self.room_due(now_ms)
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
        sale.expire_due(T0 + 100);
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
    fn expire_due_takes_only_due_holds_in_deadline_order() {
        let mut sale = held(10, 1, 100);
        for (i, user) in [b"a", b"b", b"c"].iter().enumerate() {
            sale.try_buy(*user, 1, T0 + 10 * i as u64).unwrap();
        }
        sale.clear_events();
        sale.expire_due(T0 + 115);
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
        sale.expire_due(T0 + 102);
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
        sale.expire_due(T0 + 100);
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
        sale.expire_due(T0 + 155);
        let users: Vec<&[u8]> = sale
            .events()
            .iter()
            .map(|e| sale.buyers().record(e.record_id.unwrap()).0)
            .collect();
        assert_eq!(users, vec![&b"d"[..], b"a", b"c"]);
        assert_eq!(sale.next_expiry(), Some(T0 + 160));
        assert_invariants(&sale);
    }

    #[test]
    fn the_queue_keeps_deadline_order_and_drops_only_stale_fronts() {
        let mut queue: HoldQueue<u32> = HoldQueue::default();
        assert_eq!(
            (queue.next_deadline(), queue.is_due(u64::MAX)),
            (None, false)
        );
        for (at, record_id) in [(10, 1), (20, 2), (20, 3), (15, 4), (30, 5)] {
            queue.push(at, record_id);
        }
        let order: Vec<_> = queue.iter().copied().collect();
        assert_eq!(order, vec![(10, 1), (15, 4), (20, 2), (20, 3), (30, 5)]);
        assert_eq!(queue.pop_due(9), None);
        assert_eq!(queue.pop_due(10), Some((10, 1)));
        assert!(queue.is_due(15) && !queue.is_due(14));
        queue.drop_stale(|_, record_id| record_id != 4 && record_id != 2);
        assert_eq!(queue.next_deadline(), Some(20));
        assert_eq!(queue.len(), 2, "a live front stops the dropping");
        assert!(queue.heap_bytes() >= 2 * 16);
        let sorted: HoldQueue<u32> = HoldQueue::from_sorted(vec![(1, 1), (2, 2)]);
        let mut sorted = sorted;
        assert_eq!(
            (sorted.pop_due(5), sorted.pop_due(5), sorted.pop_due(5)),
            (Some((1, 1)), Some((2, 2)), None)
        );
        assert!(sorted.is_empty());
    }
}
