//! What reads see: a buyer's units, the sale's summary (INFO) and the buyer scan (BUYERS), with
//! due holds counted as gone before the next write expires them.

use super::{Sale, SaleError};
use crate::logic::buyers::{BuyerRecord, RecordId};

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

impl Sale {
    /// `record` as of `now_ms`: a hold that is due counts as gone even before `expire_due` runs,
    /// so reads (which never change the sale) see what the next write will.
    pub(super) fn record_at(record: BuyerRecord, now_ms: u64) -> BuyerRecord {
        if record.held_qty > 0 && record.expires_at_ms <= now_ms {
            BuyerRecord {
                held_qty: 0,
                ..record
            }
        } else {
            record
        }
    }

    /// Units `user` owns at `now_ms` (0 if none).
    pub fn bought(&self, user: &[u8], now_ms: u64) -> u64 {
        self.buyers
            .find(user)
            .map_or(0, |(_, record)| Sale::record_at(record, now_ms).units())
    }

    pub fn summary(&self, now_ms: u64) -> SaleSummary {
        let (mut due_units, mut due_buyers) = (0, 0);
        // A hold cancelled and opened again within one ms has two live items: count it once.
        let mut due: Vec<RecordId> = self
            .holds
            .iter()
            .take_while(|&&(at, _)| at <= now_ms)
            .filter(|&&(at, record_id)| self.is_live(at, record_id))
            .map(|&(_, record_id)| record_id)
            .collect();
        due.sort_unstable();
        due.dedup();
        for record_id in due {
            let record = self.buyers.record(record_id).1;
            due_units += record.held_qty;
            due_buyers += u64::from(record.final_qty == 0);
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
        for (next, (_, user, record)) in (cursor..).zip(self.buyers.iter_from(cursor)) {
            if found.len() as u64 == count || next - cursor == budget {
                return Ok((next, found));
            }
            let record = Sale::record_at(record, now_ms);
            if record.units() > 0 {
                let state = if record.held_qty > 0 {
                    BuyerState::Held
                } else {
                    BuyerState::Final
                };
                found.push((user, record.units(), state));
            }
        }
        Ok((0, found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::sale::fixtures::*;
    use crate::logic::sale::*;

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
}
