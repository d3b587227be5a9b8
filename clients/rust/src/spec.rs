//! How a sale is set up: what `create` checks and the manifest records.

use crate::error::{Error, Result};
use crate::protocol::MAX_PARTITIONS;
use crate::routing::partition_key;

/// The manifest layout this client writes and reads.
pub(crate) const MANIFEST_VERSION: &str = "1";

/// Largest stock, limit or time: Redis integers are signed 64-bit.
const MAX_UNITS: u64 = i64::MAX as u64;

/// How a sale is set up: a one-key [`crate::Sale`] (one partition) or a
/// [`crate::PartitionedSale`], whose manifest records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaleSpec {
    /// Units of the whole sale, split evenly over the partitions.
    pub stock: u64,
    pub partitions: u32,
    /// Most units one user may own (default 1).
    pub limit: u64,
    pub hold_ms: Option<u64>,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    /// Each partition writes its changes to its own stream, `{name/i}:events`.
    pub events: bool,
    pub events_maxlen: Option<u64>,
    /// A waiting room in front of the stock (a partitioned sale: one per partition, the rate
    /// split by stock share): see docs/waiting-room.md.
    pub queue: Option<QueueSpec>,
}

/// A sale's waiting room (`QUEUE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueSpec {
    /// `(users, per_ms)`: `users` admitted every `per_ms`; `None`: by `admit` only.
    pub admit_rate: Option<(u64, u64)>,
    /// How long an admitted user may buy (`None`: the module's 60 000 ms).
    pub window_ms: Option<u64>,
    /// A waiting user keeps its place by joining again within this long (`wait_for_turn`
    /// does, at a third of it); absent longer, it is dropped in its turn. `None`: kept until
    /// its turn.
    pub presence_ms: Option<u64>,
}

impl SaleSpec {
    pub fn new(stock: u64, partitions: u32) -> SaleSpec {
        SaleSpec {
            stock,
            partitions,
            limit: 1,
            hold_ms: None,
            start_ms: None,
            end_ms: None,
            events: false,
            events_maxlen: None,
            queue: None,
        }
    }

    /// A waiting room in front of the stock (a partitioned sale: one per partition).
    pub fn queue(mut self, queue: QueueSpec) -> SaleSpec {
        self.queue = Some(queue);
        self
    }

    pub fn limit(mut self, limit: u64) -> SaleSpec {
        self.limit = limit;
        self
    }

    /// Every purchase is held for `ms` until confirmed.
    pub fn hold_ms(mut self, ms: u64) -> SaleSpec {
        self.hold_ms = Some(ms);
        self
    }

    /// The sale window in unix ms: START inclusive, END exclusive.
    pub fn window(mut self, start_ms: Option<u64>, end_ms: Option<u64>) -> SaleSpec {
        self.start_ms = start_ms;
        self.end_ms = end_ms;
        self
    }

    /// An event stream per partition, trimmed near `maxlen` entries if given.
    pub fn events(mut self, maxlen: Option<u64>) -> SaleSpec {
        self.events = true;
        self.events_maxlen = maxlen;
        self
    }

    /// Every setting the module would refuse, refused before anything is written.
    pub(crate) fn check(&self) -> Result<()> {
        let range = |what: &str, value: u64, min: u64| {
            if value < min || value > MAX_UNITS {
                Err(Error::InvalidArgument(format!(
                    "{what} must be an integer between {min} and {MAX_UNITS}"
                )))
            } else {
                Ok(())
            }
        };
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS {
            return Err(Error::InvalidArgument(format!(
                "partitions must be an integer between 1 and {MAX_PARTITIONS}"
            )));
        }
        range("stock", self.stock, 0)?;
        range("limit", self.limit, 1)?;
        for (what, value) in [
            ("hold_ms", self.hold_ms),
            ("start_ms", self.start_ms),
            ("end_ms", self.end_ms),
            ("events_maxlen", self.events_maxlen),
        ] {
            if let Some(value) = value {
                range(what, value, 1)?;
            }
        }
        if let (Some(start), Some(end)) = (self.start_ms, self.end_ms)
            && start >= end
        {
            return Err(Error::InvalidArgument(
                "end_ms must be after start_ms".into(),
            ));
        }
        if self.events_maxlen.is_some() && !self.events {
            return Err(Error::InvalidArgument(
                "events_maxlen trims the event streams: set events too".into(),
            ));
        }
        if let Some(queue) = &self.queue {
            if let Some(window) = queue.window_ms {
                range("window_ms", window, 1)?;
            }
            if let Some(presence) = queue.presence_ms {
                range("presence_ms", presence, 1)?;
            }
            if let Some((users, per_ms)) = queue.admit_rate {
                range("admit_rate users", users, 1)?;
                range("admit_rate per_ms", per_ms, 1)?;
            }
        }
        Ok(())
    }

    /// `SECKILL.INIT key stock LIMIT .. [HOLD ..] [START ..] [END ..]`: what every sale key
    /// is made with; the caller adds EVENTS and the partition's options.
    pub(crate) fn init_command(&self, key: &str, stock: u64) -> redis::Cmd {
        let mut init = redis::cmd("SECKILL.INIT");
        init.arg(key).arg(stock).arg("LIMIT").arg(self.limit);
        for (option, value) in [
            ("HOLD", self.hold_ms),
            ("START", self.start_ms),
            ("END", self.end_ms),
        ] {
            if let Some(value) = value {
                init.arg(option).arg(value);
            }
        }
        if let Some(queue) = &self.queue {
            init.arg("QUEUE");
            if let Some((users, per_ms)) = queue.admit_rate {
                init.arg("ADMIT").arg(users).arg("PER").arg(per_ms);
            }
            if let Some(window) = queue.window_ms {
                init.arg("WINDOW").arg(window);
            }
            if let Some(presence) = queue.presence_ms {
                init.arg("PRESENCE").arg(presence);
            }
        }
        init
    }

    /// Partition `index`'s share of the waiting room's rate, by its share of the stock (a
    /// partition with no unit counts as one): exact, as a reduced fraction of users per ms, so
    /// the partitions together admit the whole rate (the Python package computes the same).
    pub(crate) fn room_rate(&self, index: u32) -> Option<(u64, u64)> {
        let (users, per_ms) = self.queue?.admit_rate?;
        let weight = u128::from(self.share(self.stock, index).max(1));
        let total = u128::from(self.stock.max(u64::from(self.partitions)));
        let (mut users, mut per_ms) = (u128::from(users) * weight, u128::from(per_ms) * total);
        let common = gcd(users, per_ms);
        (users, per_ms) = (users / common, per_ms / common);
        // Halved alike while out of range: the ratio kept closely.
        while users > u128::from(MAX_UNITS) || per_ms > u128::from(MAX_UNITS) {
            (users, per_ms) = ((users >> 1).max(1), (per_ms >> 1).max(1));
        }
        Some((users as u64, per_ms as u64))
    }

    /// `SECKILL.INIT` for partition `index` of a partitioned sale: its share of the stock and of
    /// the rate; the caller adds EVENTS and the partition's options.
    pub(crate) fn partition_init_command(&self, key: &str, index: u32) -> redis::Cmd {
        let mut spec = self.clone();
        if let Some(queue) = spec.queue.as_mut() {
            queue.admit_rate = self.room_rate(index);
        }
        spec.init_command(key, self.share(self.stock, index))
    }

    /// Partition `index`'s share of `units`: an even split, the first ones one more.
    pub(crate) fn share(&self, units: u64, index: u32) -> u64 {
        let partitions = u64::from(self.partitions);
        units / partitions + u64::from(u64::from(index) < units % partitions)
    }

    pub(crate) fn manifest_fields(&self, name: &str) -> Vec<(&'static str, String)> {
        let optional = |value: Option<u64>| value.unwrap_or(0).to_string();
        let rate = self.queue.and_then(|q| q.admit_rate);
        vec![
            ("version", MANIFEST_VERSION.to_string()),
            ("stock", self.stock.to_string()),
            ("limit", self.limit.to_string()),
            ("hold", optional(self.hold_ms)),
            ("start", optional(self.start_ms)),
            ("end", optional(self.end_ms)),
            ("events", u8::from(self.events).to_string()),
            ("maxlen", optional(self.events_maxlen)),
            ("naming", partition_key(name, "<i>")),
            // The waiting room (absent from manifests written before it: no room).
            ("queue", u8::from(self.queue.is_some()).to_string()),
            ("admit", rate.map_or(0, |(users, _)| users).to_string()),
            ("per", rate.map_or(0, |(_, per_ms)| per_ms).to_string()),
            ("window", optional(self.queue.and_then(|q| q.window_ms))),
            ("presence", optional(self.queue.and_then(|q| q.presence_ms))),
        ]
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_split_by_stock_share_and_adds_up() {
        let queue = |users, per_ms| QueueSpec {
            admit_rate: Some((users, per_ms)),
            window_ms: None,
            presence_ms: None,
        };
        let spec = SaleSpec::new(8, 4).queue(queue(4, 100));
        assert_eq!(spec.room_rate(0), Some((1, 100)));
        // 1 001 units over 16: 63 or 62 each; together 100 users per 100 ms, exactly.
        let spec = SaleSpec::new(1_001, 16).queue(queue(100, 100));
        let total: f64 = (0..16)
            .map(|i| {
                let (users, per_ms) = spec.room_rate(i).unwrap();
                users as f64 / per_ms as f64
            })
            .sum();
        assert!((total - 1.0).abs() < 1e-12, "{total}");
        assert_eq!(spec.room_rate(0), Some((9, 143)));
        // Fewer units than partitions: every partition counts as one.
        let spec = SaleSpec::new(2, 4).queue(queue(4, 100));
        assert_eq!(spec.room_rate(3), Some((1, 100)));
        // Huge values stay in range.
        let spec = SaleSpec::new(MAX_UNITS, 3).queue(queue(MAX_UNITS, MAX_UNITS - 2));
        let (users, per_ms) = spec.room_rate(1).unwrap();
        assert!(users <= MAX_UNITS && per_ms <= MAX_UNITS && users >= 1 && per_ms >= 1);
        assert_eq!(SaleSpec::new(8, 4).room_rate(0), None);
    }

    #[test]
    fn stock_splits_evenly_and_wholly() {
        for (stock, partitions) in [
            (10_000, 16),
            (7, 3),
            (2, 5),
            (0, 4),
            (u64::MAX >> 1, 16_384),
        ] {
            let spec = SaleSpec::new(stock, partitions);
            let shares: Vec<u64> = (0..partitions).map(|i| spec.share(stock, i)).collect();
            assert_eq!(shares.iter().sum::<u64>(), stock);
            let (min, max) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(max - min <= 1, "{stock}/{partitions}: {min}..{max}");
        }
    }
}
