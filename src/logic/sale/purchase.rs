//! Purchases: TRY and its refusals, CONFIRM, CANCEL (a refund for final units) and RESTOCK.

use super::attempts::{Attempt, AttemptKind, MAX_ATTEMPT_ID, Repeat, digest};
use super::{EventKind, Sale, SaleError};
use crate::logic::buyers::BuyerRecord;

/// The digest of a well-formed attempt id.
fn attempt_digest(id: &[u8]) -> Result<[u64; 2], SaleError> {
    if id.is_empty() || id.len() > MAX_ATTEMPT_ID {
        return Err(SaleError::Invalid("attempt id out of range"));
    }
    Ok(digest(id))
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
    /// A sale with QUEUE, and the user is not admitted (or its window lapsed).
    NotAdmitted,
}

impl Sale {
    /// The refusal a TRY of `qty` at `now_ms` gets before any buyer is looked up (window,
    /// sold out, drained), once due holds are settled.
    pub(super) fn refusal_before_lookup(&self, qty: u64, now_ms: u64) -> Option<TryOutcome> {
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
    /// sale, or is refused only after a lookup (LIMIT). A TRY with an attempt id that repeats
    /// the buyer's last one answers a success instead, and changes nothing either.
    pub fn unchanged_refusal(&self, qty: u64, now_ms: u64) -> Option<TryOutcome> {
        if self.anything_due(now_ms) {
            return None;
        }
        self.refusal_before_lookup(qty, now_ms)
    }

    /// One purchase at `now_ms`: due holds expire, then the window is checked, then sold out
    /// (no buyer lookup), then the per-user limit; then the units are taken.
    pub fn try_buy(&mut self, user: &[u8], qty: u64, now_ms: u64) -> Result<TryOutcome, SaleError> {
        self.try_buy_attempt(user, qty, None, now_ms)
    }

    /// [`Sale::try_buy`] under an attempt id: the buyer's last attempt repeated (see
    /// `attempts.rs` for the window) replies the units left and changes nothing, before any
    /// refusal is looked at, since the first call bought.
    pub fn try_buy_attempt(
        &mut self,
        user: &[u8],
        qty: u64,
        attempt: Option<&[u8]>,
        now_ms: u64,
    ) -> Result<TryOutcome, SaleError> {
        self.check_request(user, qty)?;
        let digest = attempt.map(attempt_digest).transpose()?;
        self.expire_due(now_ms);
        // The buyer's record, looked up once for the repeat check and the purchase; only a
        // call with an attempt id needs it before the refusals.
        let mut found = None;
        if let Some(digest) = digest
            && let Some((record_id, record)) = *found.insert(self.buyers.find(user))
            && let Some(last) = self.attempts.get(record_id)
        {
            match last.repeat(AttemptKind::Try, digest, qty) {
                Repeat::Of(bought) if record.units() >= bought => {
                    self.answered_repeat = true;
                    return Ok(TryOutcome::Bought {
                        remaining: self.remaining,
                    });
                }
                Repeat::Conflict(why) => return Err(SaleError::AttemptConflict(why)),
                // The units it bought went back: the call is judged as a new one.
                Repeat::Of(_) | Repeat::New => {}
            }
        }
        if let Some(refusal) = self.refusal_before_lookup(qty, now_ms) {
            return Ok(refusal);
        }
        if !self.admitted(user) {
            return Ok(TryOutcome::NotAdmitted);
        }
        let found = found.unwrap_or_else(|| self.buyers.find(user));
        let mut record = found.map_or_else(BuyerRecord::default, |(_, record)| record);
        if record.units() + qty > self.config.limit {
            return Ok(TryOutcome::LimitExceeded);
        }
        if found.is_none() && !self.buyers.has_room() {
            return Err(SaleError::BuyersFull);
        }
        if record.units() == 0 && self.buyers.layout().orders {
            self.totals.orders += 1;
            record.order = self.totals.orders;
        }
        let opens_hold = self.config.hold_ms.is_some() && record.held_qty == 0;
        match self.config.hold_ms {
            Some(hold_ms) => {
                if opens_hold {
                    record.expires_at_ms = now_ms.saturating_add(hold_ms);
                }
                // Units bought while a hold is live join it, under its deadline.
                record.held_qty += qty;
                self.held += qty;
            }
            None => {
                record.final_qty += qty;
                self.sold += qty;
            }
        }
        let record_id = match found {
            Some((record_id, _)) => {
                self.buyers.set(record_id, &record);
                record_id
            }
            None => self.buyers.insert(user, &record),
        };
        if opens_hold {
            self.holds.push(record.expires_at_ms, record_id);
        }
        if let Some(digest) = digest {
            self.attempts.set(
                record_id,
                Attempt {
                    kind: AttemptKind::Try,
                    digest,
                    asked: qty,
                    units: qty,
                },
            );
        }
        self.remaining -= qty;
        self.record(EventKind::Purchase, Some(record_id), qty, record.order);
        self.left_room(user, now_ms);
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
        self.expire_due(now_ms);
        let Some((record_id, mut record)) = self.buyers.find(user) else {
            return Ok(false);
        };
        if record.held_qty == 0 {
            return Ok(false);
        }
        let qty = record.held_qty;
        record.final_qty += qty;
        record.held_qty = 0;
        self.buyers.set(record_id, &record);
        self.drop_stale_holds();
        self.held -= qty;
        self.sold += qty;
        self.record(EventKind::Confirm, Some(record_id), qty, record.order);
        Ok(true)
    }

    /// Returns up to `qty` (default: all) of the user's units to stock, held ones first, then
    /// final ones (a refund). Replies the units returned. `qty` must be in 1..=limit, as for
    /// a purchase: nobody owns more.
    pub fn cancel(&mut self, user: &[u8], qty: Option<u64>, now_ms: u64) -> Result<u64, SaleError> {
        self.cancel_attempt(user, qty, None, now_ms)
    }

    /// [`Sale::cancel`] under an attempt id: the buyer's last attempt repeated (see
    /// `attempts.rs`) replies the units the first call returned and changes nothing.
    pub fn cancel_attempt(
        &mut self,
        user: &[u8],
        qty: Option<u64>,
        attempt: Option<&[u8]>,
        now_ms: u64,
    ) -> Result<u64, SaleError> {
        if let Some(qty) = qty {
            self.check_request(user, qty)?;
        } else if user.is_empty() {
            return Err(SaleError::EmptyUser);
        }
        let digest = attempt.map(attempt_digest).transpose()?;
        self.expire_due(now_ms);
        let Some((record_id, mut record)) = self.buyers.find(user) else {
            return Ok(0);
        };
        let asked = qty.unwrap_or(0);
        if let Some(digest) = digest
            && let Some(last) = self.attempts.get(record_id)
        {
            match last.repeat(AttemptKind::Cancel, digest, asked) {
                Repeat::Of(returned) => {
                    self.answered_repeat = returned > 0;
                    return Ok(returned);
                }
                Repeat::Conflict(why) => return Err(SaleError::AttemptConflict(why)),
                Repeat::New => {}
            }
        }
        let returned = qty.map_or(record.units(), |qty| qty.min(record.units()));
        if let Some(digest) = digest {
            // Kept even when nothing is returned, so that a late repeat cannot take back
            // units the buyer bought after this call.
            self.attempts.set(
                record_id,
                Attempt {
                    kind: AttemptKind::Cancel,
                    digest,
                    asked,
                    units: returned,
                },
            );
            self.changed = true;
        }
        if returned == 0 {
            return Ok(0);
        }
        let from_hold = returned.min(record.held_qty);
        let refunded = returned - from_hold;
        record.held_qty -= from_hold;
        record.final_qty -= refunded;
        self.buyers.set(record_id, &record);
        self.drop_stale_holds();
        self.held -= from_hold;
        self.sold -= refunded;
        self.totals.refunded += refunded;
        self.remaining += returned;
        self.record(EventKind::Cancel, Some(record_id), returned, record.order);
        Ok(returned)
    }

    /// Adds `units` to the sale; replies the units remaining.
    pub fn restock(&mut self, units: u64, now_ms: u64) -> Result<u64, SaleError> {
        // Checked before anything changes, so a refused restock leaves the sale as it was.
        if units == 0 || self.units_added(units).is_none() {
            return Err(SaleError::TooMuchStock);
        }
        self.expire_due(now_ms);
        self.totals.restocked += units;
        self.remaining += units;
        self.record(EventKind::Restock, None, units, 0);
        Ok(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::sale::fixtures::*;
    use crate::logic::sale::*;

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
        ended.expire_due(T0 + 10);
        assert_eq!(ended.unchanged_refusal(1, T0 + 10), Some(TryOutcome::Ended));
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
    fn confirm_makes_a_hold_final_once() {
        let mut sale = held(5, 2, 100);
        assert!(!sale.confirm(b"a", T0).unwrap(), "never held");
        sale.try_buy(b"a", 1, T0).unwrap();
        assert!(sale.confirm(b"a", T0 + 99).unwrap());
        assert!(!sale.confirm(b"a", T0 + 99).unwrap(), "already final");
        assert_eq!(sale.next_expiry(), None);
        sale.expire_due(T0 + 1_000_000);
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
    fn a_user_may_hold_and_own_final_units_at_once() {
        let mut sale = held(5, 3, 100);
        sale.try_buy(b"a", 1, T0).unwrap();
        assert!(sale.confirm(b"a", T0).unwrap());
        sale.try_buy(b"a", 2, T0 + 10).unwrap();
        assert_eq!(
            sale.scan(0, 10, T0 + 10).unwrap().1,
            vec![(&b"a"[..], 3, BuyerState::Held)]
        );
        sale.expire_due(T0 + 110);
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
            sale.events().last().map(|e| (e.kind, e.record_id)),
            Some((EventKind::Restock, None))
        );
        assert_invariants(&sale);
    }

    #[test]
    fn a_try_repeated_with_its_attempt_id_changes_nothing_and_succeeds() {
        let mut sale = plain(2, 1);
        let first = sale.try_buy_attempt(b"dave", 1, Some(b"a1"), T0);
        assert_eq!(first, Ok(TryOutcome::Bought { remaining: 1 }));
        sale.clear_events();
        // The client timed out and sends it again: the buyer owns it, LIMIT 1 is no refusal.
        assert_eq!(
            sale.try_buy_attempt(b"dave", 1, Some(b"a1"), T0 + 5),
            Ok(TryOutcome::Bought { remaining: 1 })
        );
        assert!(!sale.changed() && sale.events().is_empty());
        assert!(
            sale.take_repeat(),
            "a repeat, for the command layer's marker"
        );
        assert!(!sale.take_repeat(), "read once");
        // Sold out since: the repeat still answers the purchase, with the units left now.
        sale.try_buy(b"erin", 1, T0).unwrap();
        assert_eq!(
            sale.try_buy_attempt(b"dave", 1, Some(b"a1"), T0 + 6),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
        // Without the id, or with another, it is a new purchase: over LIMIT here.
        sale.take_repeat();
        assert_eq!(sale.try_buy(b"dave", 1, T0), Ok(TryOutcome::SoldOut));
        assert_eq!(
            sale.try_buy_attempt(b"dave", 1, Some(b"a2"), T0),
            Ok(TryOutcome::SoldOut)
        );
        assert!(!sale.take_repeat(), "a refusal is no repeat");
        assert_eq!(sale.bought(b"dave", T0), 1);
        assert_invariants(&sale);
    }

    #[test]
    fn the_same_attempt_id_for_another_call_is_refused_and_changes_nothing() {
        let mut sale = plain(5, 3);
        sale.try_buy_attempt(b"u", 2, Some(b"a1"), T0).unwrap();
        sale.clear_events();
        assert_eq!(
            sale.try_buy_attempt(b"u", 1, Some(b"a1"), T0),
            Err(SaleError::AttemptConflict(
                "attempt id already used with another qty"
            ))
        );
        assert_eq!(
            sale.cancel_attempt(b"u", Some(2), Some(b"a1"), T0),
            Err(SaleError::AttemptConflict(
                "attempt id already used by another command"
            ))
        );
        assert!(!sale.changed());
        for bad in [&b""[..], &[b'x'; 65]] {
            assert_eq!(
                sale.try_buy_attempt(b"u", 1, Some(bad), T0),
                Err(SaleError::Invalid("attempt id out of range"))
            );
            assert_eq!(
                sale.cancel_attempt(b"u", None, Some(bad), T0),
                Err(SaleError::Invalid("attempt id out of range"))
            );
        }
        assert_eq!(sale.bought(b"u", T0), 2);
    }

    #[test]
    fn the_window_ends_when_the_units_go_back_or_another_attempt_comes() {
        let mut sale = held(5, 2, 100);
        sale.try_buy_attempt(b"u", 1, Some(b"a1"), T0).unwrap();
        // The hold expires: the units went back, so a late repeat buys again.
        assert_eq!(
            sale.try_buy_attempt(b"u", 1, Some(b"a1"), T0 + 100),
            Ok(TryOutcome::Bought { remaining: 4 })
        );
        assert_eq!(sale.bought(b"u", T0 + 100), 1);
        // Another attempt replaces it: the first id is then judged as a new call.
        sale.try_buy_attempt(b"u", 1, Some(b"a2"), T0 + 101)
            .unwrap();
        assert_eq!(
            sale.try_buy_attempt(b"u", 1, Some(b"a1"), T0 + 102),
            Ok(TryOutcome::LimitExceeded)
        );
        // A refused first call changed nothing; its repeat is judged afresh.
        let mut sold_out = plain(0, 1);
        assert_eq!(
            sold_out.try_buy_attempt(b"v", 1, Some(b"b1"), T0),
            Ok(TryOutcome::SoldOut)
        );
        sold_out.restock(1, T0).unwrap();
        assert_eq!(
            sold_out.try_buy_attempt(b"v", 1, Some(b"b1"), T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
        assert_invariants(&sale);
        assert_invariants(&sold_out);
    }

    #[test]
    fn a_cancel_repeated_with_its_attempt_id_returns_nothing_more() {
        let mut sale = plain(5, 3);
        sale.try_buy(b"u", 3, T0).unwrap();
        assert_eq!(sale.cancel_attempt(b"u", Some(2), Some(b"c1"), T0), Ok(2));
        sale.clear_events();
        assert_eq!(sale.cancel_attempt(b"u", Some(2), Some(b"c1"), T0), Ok(2));
        assert!(!sale.changed());
        assert!(
            sale.take_repeat(),
            "units returned the first time: a repeat to mark"
        );
        assert_eq!(sale.bought(b"u", T0), 1);
        // All, with another id: what is left; its repeat again that.
        assert_eq!(sale.cancel_attempt(b"u", None, Some(b"c2"), T0), Ok(1));
        assert_eq!(sale.cancel_attempt(b"u", None, Some(b"c2"), T0), Ok(1));
        // A cancel that found nothing is kept too: bought again, its late repeat takes nothing.
        assert_eq!(sale.cancel_attempt(b"u", None, Some(b"c3"), T0), Ok(0));
        assert!(sale.changed(), "the attempt is state, replicated");
        sale.try_buy(b"u", 1, T0).unwrap();
        sale.take_repeat();
        assert_eq!(sale.cancel_attempt(b"u", None, Some(b"c3"), T0), Ok(0));
        assert!(
            !sale.take_repeat(),
            "nothing was returned: no write to cover"
        );
        assert_eq!(sale.bought(b"u", T0), 1);
        // A buyer the sale never saw: nothing to return, nothing kept.
        assert_eq!(sale.cancel_attempt(b"nobody", None, Some(b"c4"), T0), Ok(0));
        assert_eq!(sale.attempts().count(), 1);
        assert_invariants(&sale);
    }

    /// Bytes per buyer with and without attempt ids (printed; `cargo test -- --nocapture`).
    #[test]
    fn a_sale_whose_buyers_send_no_ids_pays_nothing_for_them() {
        const BUYERS: u64 = 10_000;
        let (mut without, mut with) = (plain(BUYERS, 1), plain(BUYERS, 1));
        let empty = without.memory_bytes();
        for i in 0..BUYERS {
            let user = format!("user:{i:06}");
            without.try_buy(user.as_bytes(), 1, T0).unwrap();
            let attempt = format!("{i:032x}");
            with.try_buy_attempt(user.as_bytes(), 1, Some(attempt.as_bytes()), T0)
                .unwrap();
        }
        let per_buyer = |sale: &Sale| (sale.memory_bytes() - empty) as f64 / BUYERS as f64;
        let (plain_bytes, id_bytes) = (per_buyer(&without), per_buyer(&with));
        println!("bytes per buyer: {plain_bytes:.1} without ids, {id_bytes:.1} with ids");
        assert_eq!(without.attempts.heap_bytes(), 0);
        assert!(id_bytes > plain_bytes && id_bytes < plain_bytes + 100.0);
    }
}
