//! The flash-sale state machine. No Redis types: the command layer feeds it and replies.
//!
//! Invariants kept by every method: `remaining + sold == stock`, and no buyer holds more than
//! `limit` units. Construction checks its inputs so a decoded or restored sale obeys them too.

use super::buyers::Buyers;

/// Largest stock, limit or quantity: Redis integers are signed 64-bit.
pub const MAX_UNITS: u64 = i64::MAX as u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaleError {
    /// A user id must not be empty.
    EmptyUser,
    /// `qty` must be in 1..=limit.
    QtyOutOfRange { limit: u64 },
    /// Stock or limit out of range, or a restored buyer list that breaks the invariants.
    Invalid(&'static str),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryOutcome {
    /// The units were taken; this many are left.
    Bought { remaining: u64 },
    /// Fewer than `qty` units left.
    SoldOut,
    /// The user would go over the per-user limit.
    LimitExceeded,
}

/// What SECKILL.INFO reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaleSummary {
    pub stock: u64,
    pub remaining: u64,
    pub sold: u64,
    pub buyers: u64,
    pub limit: u64,
    pub sold_out: bool,
}

#[derive(Clone)]
pub struct Sale {
    stock: u64,
    limit: u64,
    buyers: Buyers,
}

impl Sale {
    pub fn new(stock: u64, limit: u64) -> Result<Sale, SaleError> {
        if stock > MAX_UNITS {
            return Err(SaleError::Invalid("stock out of range"));
        }
        if limit == 0 || limit > MAX_UNITS {
            return Err(SaleError::Invalid("limit out of range"));
        }
        Ok(Sale {
            stock,
            limit,
            buyers: Buyers::for_limit(limit),
        })
    }

    /// Rebuilds a sale from persisted parts, refusing anything that breaks an invariant.
    pub fn restore<'a>(
        stock: u64,
        limit: u64,
        buyer_count: usize,
        buyers: impl Iterator<Item = (&'a [u8], u64)>,
    ) -> Result<Sale, SaleError> {
        let mut sale = Sale::new(stock, limit)?;
        sale.buyers.reserve(buyer_count, 0);
        for (user, qty) in buyers {
            if user.is_empty() {
                return Err(SaleError::EmptyUser);
            }
            if qty == 0 || qty > limit {
                return Err(SaleError::Invalid("buyer quantity out of range"));
            }
            if sale.buyers.get(user) != 0 {
                return Err(SaleError::Invalid("duplicate buyer"));
            }
            if qty > sale.remaining() {
                return Err(SaleError::Invalid("buyers hold more than the stock"));
            }
            sale.buyers.add(user, qty);
        }
        Ok(sale)
    }

    pub fn stock(&self) -> u64 {
        self.stock
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn sold(&self) -> u64 {
        self.buyers.total_units()
    }

    pub fn remaining(&self) -> u64 {
        self.stock - self.sold()
    }

    pub fn buyers(&self) -> &Buyers {
        &self.buyers
    }

    /// Checks the arguments of a purchase without touching the sale.
    pub fn check_request(&self, user: &[u8], qty: u64) -> Result<(), SaleError> {
        if user.is_empty() {
            return Err(SaleError::EmptyUser);
        }
        if qty == 0 || qty > self.limit {
            return Err(SaleError::QtyOutOfRange { limit: self.limit });
        }
        Ok(())
    }

    /// One purchase attempt: sold-out check (no buyer lookup), then the per-user limit,
    /// then the units are taken and the buyer recorded.
    pub fn try_buy(&mut self, user: &[u8], qty: u64) -> Result<TryOutcome, SaleError> {
        self.check_request(user, qty)?;
        if self.remaining() < qty {
            return Ok(TryOutcome::SoldOut);
        }
        if self.buyers.get(user) + qty > self.limit {
            return Ok(TryOutcome::LimitExceeded);
        }
        self.buyers.add(user, qty);
        Ok(TryOutcome::Bought {
            remaining: self.remaining(),
        })
    }

    /// Units `user` holds (0 if none).
    pub fn bought(&self, user: &[u8]) -> u64 {
        self.buyers.get(user)
    }

    pub fn summary(&self) -> SaleSummary {
        SaleSummary {
            stock: self.stock,
            remaining: self.remaining(),
            sold: self.sold(),
            buyers: self.buyers.len() as u64,
            limit: self.limit,
            sold_out: self.remaining() == 0,
        }
    }

    /// Heap plus inline bytes, for MEMORY USAGE.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Sale>() + self.buyers.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_invariants(sale: &Sale) {
        let s = sale.summary();
        assert_eq!(s.remaining + s.sold, s.stock);
        assert!(sale.buyers().iter().all(|(_, q)| q >= 1 && q <= s.limit));
        assert_eq!(sale.buyers().iter().map(|(_, q)| q).sum::<u64>(), s.sold);
    }

    #[test]
    fn new_rejects_bad_limits_and_stock() {
        assert_eq!(
            Sale::new(1, 0).err(),
            Some(SaleError::Invalid("limit out of range"))
        );
        assert_eq!(
            Sale::new(1, MAX_UNITS + 1).err(),
            Some(SaleError::Invalid("limit out of range"))
        );
        assert_eq!(
            Sale::new(MAX_UNITS + 1, 1).err(),
            Some(SaleError::Invalid("stock out of range"))
        );
        let sale = Sale::new(MAX_UNITS, MAX_UNITS).unwrap();
        assert_eq!(sale.remaining(), MAX_UNITS);
    }

    #[test]
    fn buys_until_sold_out() {
        let mut sale = Sale::new(2, 1).unwrap();
        assert_eq!(
            sale.try_buy(b"a", 1),
            Ok(TryOutcome::Bought { remaining: 1 })
        );
        assert_eq!(
            sale.try_buy(b"b", 1),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
        assert_eq!(sale.try_buy(b"c", 1), Ok(TryOutcome::SoldOut));
        let s = sale.summary();
        assert!(s.sold_out);
        assert_eq!((s.sold, s.buyers, s.remaining), (2, 2, 0));
        assert_invariants(&sale);
    }

    #[test]
    fn sold_out_wins_over_limit_and_does_not_record() {
        let mut sale = Sale::new(1, 1).unwrap();
        sale.try_buy(b"a", 1).unwrap();
        // `a` is also at its limit, but sold out is checked first.
        assert_eq!(sale.try_buy(b"a", 1), Ok(TryOutcome::SoldOut));
        assert_eq!(sale.try_buy(b"z", 1), Ok(TryOutcome::SoldOut));
        assert_eq!(sale.bought(b"z"), 0);
        assert_eq!(sale.summary().buyers, 1);
    }

    #[test]
    fn limit_counts_units_across_purchases() {
        let mut sale = Sale::new(10, 3).unwrap();
        assert_eq!(
            sale.try_buy(b"a", 2),
            Ok(TryOutcome::Bought { remaining: 8 })
        );
        assert_eq!(sale.try_buy(b"a", 2), Ok(TryOutcome::LimitExceeded));
        assert_eq!(
            sale.try_buy(b"a", 1),
            Ok(TryOutcome::Bought { remaining: 7 })
        );
        assert_eq!(sale.try_buy(b"a", 1), Ok(TryOutcome::LimitExceeded));
        assert_eq!(sale.bought(b"a"), 3);
        assert_eq!(sale.summary().buyers, 1);
        assert_invariants(&sale);
    }

    #[test]
    fn partial_quantity_larger_than_remaining_is_sold_out() {
        let mut sale = Sale::new(3, 5).unwrap();
        assert_eq!(sale.try_buy(b"a", 4), Ok(TryOutcome::SoldOut));
        assert_eq!(
            sale.try_buy(b"a", 3),
            Ok(TryOutcome::Bought { remaining: 0 })
        );
    }

    #[test]
    fn rejects_bad_requests_without_change() {
        let mut sale = Sale::new(3, 2).unwrap();
        assert_eq!(sale.try_buy(b"", 1), Err(SaleError::EmptyUser));
        assert_eq!(
            sale.try_buy(b"a", 0),
            Err(SaleError::QtyOutOfRange { limit: 2 })
        );
        assert_eq!(
            sale.try_buy(b"a", 3),
            Err(SaleError::QtyOutOfRange { limit: 2 })
        );
        assert_eq!(sale.summary().sold, 0);
    }

    #[test]
    fn zero_stock_is_sold_out_from_the_start() {
        let mut sale = Sale::new(0, 1).unwrap();
        assert!(sale.summary().sold_out);
        assert_eq!(sale.try_buy(b"a", 1), Ok(TryOutcome::SoldOut));
    }

    #[test]
    fn restore_checks_every_invariant() {
        let ok = [(&b"a"[..], 1u64), (&b"b"[..], 2)];
        let sale = Sale::restore(5, 2, 2, ok.into_iter()).unwrap();
        assert_eq!(sale.summary().remaining, 2);
        assert_invariants(&sale);

        type Buyer<'a> = (&'a [u8], u64);
        let cases: [(&[Buyer], SaleError); 5] = [
            (&[(b"", 1)], SaleError::EmptyUser),
            (
                &[(b"a", 0)],
                SaleError::Invalid("buyer quantity out of range"),
            ),
            (
                &[(b"a", 3)],
                SaleError::Invalid("buyer quantity out of range"),
            ),
            (
                &[(b"a", 1), (b"a", 1)],
                SaleError::Invalid("duplicate buyer"),
            ),
            (
                &[(b"a", 2), (b"b", 2), (b"c", 2)],
                SaleError::Invalid("buyers hold more than the stock"),
            ),
        ];
        for (buyers, expected) in cases {
            let got = Sale::restore(5, 2, buyers.len(), buyers.iter().copied());
            assert_eq!(got.err(), Some(expected));
        }
    }

    #[test]
    fn memory_grows_with_buyers() {
        let mut sale = Sale::new(1000, 1).unwrap();
        let empty = sale.memory_bytes();
        for i in 0..500u32 {
            sale.try_buy(format!("user{i:06}").as_bytes(), 1).unwrap();
        }
        assert!(sale.memory_bytes() > empty + 500 * 10);
    }
}
