//! What the client reads back: partition and sale totals, buyers, stream events.

use crate::error::{Error, Result};
use redis::Value;
use std::collections::HashMap;

/// One partition's `SECKILL.INFO` (the fields a partitioned sale adds up).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionInfo {
    pub stock: u64,
    pub remaining: u64,
    pub sold: u64,
    pub held: u64,
    pub buyers: u64,
    pub restocked: u64,
    pub refunded: u64,
    pub lent: u64,
    pub absorbed: u64,
    pub pending_out: u64,
    pub sealed: bool,
    pub partition: u64,
    pub partitions: u64,
    /// Admitted users who have not bought (a sale with a waiting room; 0 without): each is
    /// promised a unit of `remaining`, which the key does not lend.
    pub admitted: u64,
    /// Users waiting in the room (0 without one).
    pub waiting: u64,
}

impl PartitionInfo {
    /// Every counter a unit's move changes (not `sealed`, which moves none): two reads with
    /// the same units saw no unit come or go between them.
    pub(crate) fn units(&self) -> [u64; 10] {
        [
            self.stock,
            self.remaining,
            self.sold,
            self.held,
            self.buyers,
            self.restocked,
            self.refunded,
            self.lent,
            self.absorbed,
            self.pending_out,
        ]
    }

    pub(crate) fn from_fields(fields: &HashMap<String, Value>) -> Result<PartitionInfo> {
        let number = |name: &str| -> Result<u64> {
            match fields.get(name) {
                Some(Value::Int(n)) => u64::try_from(*n).map_err(|_| bad(name)),
                Some(Value::Boolean(b)) => Ok(u64::from(*b)),
                Some(Value::Nil) | None => Err(bad(name)),
                Some(other) => redis::from_redis_value(other.clone()).map_err(|_| bad(name)),
            }
        };
        Ok(PartitionInfo {
            stock: number("stock")?,
            remaining: number("remaining")?,
            sold: number("sold")?,
            held: number("held")?,
            buyers: number("buyers")?,
            restocked: number("restocked")?,
            refunded: number("refunded")?,
            lent: number("lent")?,
            absorbed: number("absorbed")?,
            pending_out: number("pending_out")?,
            sealed: number("sealed")? == 1,
            // Null on a one-key sale.
            partition: match fields.get("partition") {
                Some(Value::Nil) => 0,
                _ => number("partition")?,
            },
            partitions: number("partitions")?,
            admitted: match fields.get("admitted") {
                None => 0,
                Some(_) => number("admitted")?,
            },
            waiting: match fields.get("waiting") {
                None => 0,
                Some(_) => number("waiting")?,
            },
        })
    }

    /// Units the key may lend: the ones left that no admitted user was promised.
    pub(crate) fn lendable(&self) -> u64 {
        self.remaining.saturating_sub(self.admitted)
    }

    /// The partition's own identity, which the module keeps at every instant.
    pub fn balanced(&self) -> bool {
        self.remaining + self.held + self.sold + self.lent
            == self.stock + self.restocked + self.absorbed
    }
}

fn bad(field: &str) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "SECKILL.INFO lacks a field (is this a partition of a module 0.5+ server?)",
        field.to_string(),
    )))
}

/// SECKILL.INFO's flat `[field, value, ...]` (RESP2) or map (RESP3) by field name.
pub(crate) fn parse_fields(reply: Value) -> Result<HashMap<String, Value>> {
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut pairs = Vec::new();
            let mut items = items.into_iter();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        other => {
            return Err(Error::Redis(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "SECKILL.INFO did not reply fields",
                format!("{other:?}"),
            ))));
        }
    };
    pairs
        .into_iter()
        .map(|(k, v)| Ok((redis::from_redis_value::<String>(k)?, v)))
        .collect()
}

/// The sale's totals: sums over the partitions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SaleInfo {
    pub stock: u64,
    pub remaining: u64,
    pub sold: u64,
    pub held: u64,
    pub buyers: u64,
    pub restocked: u64,
    pub refunded: u64,
    /// Units partitions lent to others, and absorbed from others, ever.
    pub lent: u64,
    pub absorbed: u64,
    /// Units lent by one partition and not yet absorbed by another.
    pub in_flight: u64,
    /// Transfers started and not yet settled, in units.
    pub pending_out: u64,
    /// Partitions sealed as sold out.
    pub sealed: u32,
    /// No unit left anywhere, nor in flight.
    pub sold_out: bool,
    /// Users waiting in the rooms (0 without a waiting room).
    pub waiting: u64,
    pub partitions: Vec<PartitionInfo>,
}

impl SaleInfo {
    pub(crate) fn total(partitions: Vec<PartitionInfo>) -> SaleInfo {
        let sum = |f: fn(&PartitionInfo) -> u64| partitions.iter().map(f).sum::<u64>();
        let lent = sum(|p| p.lent);
        let absorbed = sum(|p| p.absorbed);
        let remaining = sum(|p| p.remaining);
        let in_flight = lent.saturating_sub(absorbed);
        SaleInfo {
            stock: sum(|p| p.stock),
            remaining,
            sold: sum(|p| p.sold),
            held: sum(|p| p.held),
            buyers: sum(|p| p.buyers),
            restocked: sum(|p| p.restocked),
            refunded: sum(|p| p.refunded),
            lent,
            absorbed,
            in_flight,
            pending_out: sum(|p| p.pending_out),
            sealed: partitions.iter().filter(|p| p.sealed).count() as u32,
            sold_out: remaining == 0 && in_flight == 0,
            waiting: sum(|p| p.waiting),
            partitions,
        }
    }

    /// The sale's identity, when the partitions were read at one instant: each partition
    /// balances; no partition absorbed a unit that another did not lend; every unit lent and
    /// not absorbed belongs to a transfer still pending; so every unit that came in is left,
    /// held, sold or in flight, none twice.
    pub fn balanced(&self) -> bool {
        self.partitions.iter().all(PartitionInfo::balanced)
            && self.absorbed <= self.lent
            && self.lent - self.absorbed <= self.pending_out
            && self.remaining + self.held + self.sold + self.in_flight
                == self.stock + self.restocked
    }
}

/// One buyer of a partitioned sale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buyer {
    pub user: Vec<u8>,
    pub qty: u64,
    /// Some units await confirmation (a sale with HOLD).
    pub held: bool,
    pub partition: u32,
}

impl Buyer {
    pub(crate) fn from_row(partition: u32, row: &[Value]) -> Result<Buyer> {
        let [user, qty, state] = row else {
            return Err(Error::Redis(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "SECKILL.BUYERS row is not user, qty, state",
            ))));
        };
        let state: String = redis::from_redis_value(state.clone())?;
        Ok(Buyer {
            user: redis::from_redis_value(user.clone())?,
            qty: redis::from_redis_value(qty.clone())?,
            held: state == "held",
            partition,
        })
    }
}

/// One entry of a partition's event stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaleEvent {
    pub partition: u32,
    pub stream: String,
    pub id: String,
    pub fields: HashMap<String, String>,
}

impl SaleEvent {
    pub(crate) fn from_entry(
        partition: u32,
        stream: &str,
        entry: redis::streams::StreamId,
    ) -> Result<SaleEvent> {
        let fields = entry
            .map
            .into_iter()
            .map(|(k, v)| Ok((k, redis::from_redis_value::<String>(v)?)))
            .collect::<Result<_>>()?;
        Ok(SaleEvent {
            partition,
            stream: stream.to_string(),
            id: entry.id,
            fields,
        })
    }

    /// A field (`event`, `user`, `qty`, `order`, `remaining`, `transfer`, `peer`), `""` if
    /// absent.
    pub fn get(&self, field: &str) -> &str {
        self.fields.get(field).map_or("", String::as_str)
    }
}

/// Where a user stands in a waiting room, as `SECKILL.POSITION ... WITHETA` tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// As `SECKILL.JOIN` replies: >= 1 waiting, 0 its turn, -1 sold out. Before START (when
    /// `drawn` is false) how many wait, the cohort, not a place.
    pub position: i64,
    /// About how long until its turn (ms): 0 its turn; -1 sold out or nothing known yet.
    pub eta_ms: i64,
    /// Whether the places are drawn (no START, or START passed).
    pub drawn: bool,
}
