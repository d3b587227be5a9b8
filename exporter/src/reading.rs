//! What one scrape read from one node, parsed from the replies (`INFO seckill`, `SECKILL.INFO`,
//! `LOCK.INFO`), with no connection in sight: every parse is unit-tested on replies as RESP2
//! (flat arrays) and RESP3 (maps, booleans) give them.

use std::collections::HashMap;

use redis::Value;

/// One node as the scrape found it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeReading {
    /// `HOST:PORT`.
    pub instance: String,
    /// Why the node could not be read (None: it was).
    pub failure: Option<String>,
    /// `INFO seckill`'s integer fields, by name.
    pub counters: HashMap<String, i64>,
    pub sales: Vec<SaleReading>,
    pub locks: Vec<LockReading>,
}

impl NodeReading {
    pub fn failed(instance: &str, why: String) -> NodeReading {
        NodeReading {
            instance: instance.to_string(),
            failure: Some(why),
            counters: HashMap::new(),
            sales: Vec::new(),
            locks: Vec::new(),
        }
    }
}

/// One sale key's `SECKILL.INFO`.
#[derive(Debug, Clone, PartialEq)]
pub struct SaleReading {
    pub key: Vec<u8>,
    pub stock: i64,
    pub remaining: i64,
    pub sold: i64,
    pub held: i64,
    pub buyers: i64,
    pub sold_out: bool,
    /// The partitioned sale's name (its manifest) and this key's index in it.
    pub partition: Option<(Vec<u8>, i64)>,
    pub room: Option<RoomReading>,
}

/// A waiting room's users: in the queue, and admitted with their window open.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoomReading {
    pub waiting: i64,
    pub admitted: i64,
}

/// One lock key's `LOCK.INFO`.
#[derive(Debug, Clone, PartialEq)]
pub struct LockReading {
    pub key: Vec<u8>,
    pub held: bool,
    pub waiters: i64,
}

/// `INFO seckill`'s `name:integer` lines (others, such as the git revision, are skipped).
pub fn info_fields(text: &str) -> HashMap<String, i64> {
    text.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .filter_map(|(name, value)| Some((name.to_string(), value.parse().ok()?)))
        .collect()
}

/// A reply's field/value pairs, from a RESP2 flat array or a RESP3 map.
pub fn reply_fields(reply: Value) -> Result<HashMap<String, Value>, String> {
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(name), Some(value)) = (items.next(), items.next()) {
                pairs.push((name, value));
            }
            pairs
        }
        other => return Err(format!("not a field list: {other:?}")),
    };
    pairs
        .into_iter()
        .map(|(name, value)| Ok((text(&name).ok_or("a field name that is no text")?, value)))
        .collect()
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// An integer field: a RESP integer, a boolean (RESP3) or an integer as text.
fn integer(fields: &HashMap<String, Value>, name: &str) -> Result<i64, String> {
    match fields.get(name) {
        Some(Value::Int(n)) => Ok(*n),
        Some(Value::Boolean(b)) => Ok(i64::from(*b)),
        Some(other) => text(other)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("{name}: not an integer: {other:?}")),
        None => Err(format!("{name}: missing")),
    }
}

fn bytes(fields: &HashMap<String, Value>, name: &str) -> Option<Vec<u8>> {
    match fields.get(name) {
        Some(Value::BulkString(bytes)) if !bytes.is_empty() => Some(bytes.clone()),
        Some(Value::SimpleString(text)) if !text.is_empty() => Some(text.clone().into_bytes()),
        _ => None,
    }
}

impl SaleReading {
    pub fn from_reply(key: Vec<u8>, reply: Value) -> Result<SaleReading, String> {
        let fields = reply_fields(reply)?;
        let partition = match bytes(&fields, "manifest") {
            Some(name) => Some((name, integer(&fields, "partition")?)),
            None => None,
        };
        let room = if fields.contains_key("waiting") {
            Some(RoomReading {
                waiting: integer(&fields, "waiting")?,
                admitted: integer(&fields, "admitted")?,
            })
        } else {
            None
        };
        Ok(SaleReading {
            key,
            stock: integer(&fields, "stock")?,
            remaining: integer(&fields, "remaining")?,
            sold: integer(&fields, "sold")?,
            held: integer(&fields, "held")?,
            buyers: integer(&fields, "buyers")?,
            sold_out: integer(&fields, "sold_out")? != 0,
            partition,
            room,
        })
    }
}

impl LockReading {
    /// `LOCK.INFO`'s reply: nil (or an empty list) for a lock nobody holds.
    pub fn from_reply(key: Vec<u8>, reply: Value) -> Result<LockReading, String> {
        if matches!(reply, Value::Nil) {
            return Ok(LockReading {
                key,
                held: false,
                waiters: 0,
            });
        }
        let fields = reply_fields(reply)?;
        Ok(LockReading {
            key,
            held: bytes(&fields, "owner").is_some(),
            waiters: integer(&fields, "waiters").unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn flat(pairs: &[(&str, Value)]) -> Value {
        Value::Array(
            pairs
                .iter()
                .flat_map(|(name, value)| [bulk(name), value.clone()])
                .collect(),
        )
    }

    /// A plain sale's fields, with `extra` replacing or adding fields.
    fn sale_fields(extra: &[(&'static str, Value)]) -> Vec<(&'static str, Value)> {
        let mut fields: Vec<(&'static str, Value)> = vec![
            ("stock", Value::Int(100)),
            ("remaining", Value::Int(60)),
            ("sold", Value::Int(30)),
            ("buyers", Value::Int(25)),
            ("limit", Value::Int(2)),
            ("sold_out", Value::Int(0)),
            ("held", Value::Int(10)),
            ("events", Value::Nil),
            ("manifest", Value::Nil),
            ("partition", Value::Nil),
        ];
        for (name, value) in extra {
            fields.retain(|(n, _)| n != name);
            fields.push((name, value.clone()));
        }
        fields
    }

    #[test]
    fn info_fields_keep_integers_and_skip_the_rest() {
        let text = "# seckill\r\nseckill_version:1200\r\nseckill_git_revision:83fc5ab\r\nseckill_tries:7\r\n\r\n";
        let fields = info_fields(text);
        assert_eq!(fields.get("seckill_version"), Some(&1200));
        assert_eq!(fields.get("seckill_tries"), Some(&7));
        assert!(!fields.contains_key("seckill_git_revision"));
        assert!(info_fields("").is_empty());
    }

    #[test]
    fn a_plain_sale_from_a_resp2_flat_array() {
        let sale = SaleReading::from_reply(b"s".to_vec(), flat(&sale_fields(&[]))).unwrap();
        assert_eq!(
            sale,
            SaleReading {
                key: b"s".to_vec(),
                stock: 100,
                remaining: 60,
                sold: 30,
                held: 10,
                buyers: 25,
                sold_out: false,
                partition: None,
                room: None,
            }
        );
    }

    #[test]
    fn a_partition_with_a_room_from_a_resp3_map() {
        let fields = sale_fields(&[
            ("manifest", bulk("shoes")),
            ("partition", Value::Int(3)),
            ("waiting", Value::Int(40)),
            ("admitted", Value::Int(5)),
            ("sold_out", Value::Boolean(true)),
        ]);
        let map = fields.into_iter().map(|(n, v)| (bulk(n), v)).collect();
        let sale = SaleReading::from_reply(b"p3".to_vec(), Value::Map(map)).unwrap();
        assert_eq!(sale.partition, Some((b"shoes".to_vec(), 3)));
        assert_eq!(
            sale.room,
            Some(RoomReading {
                waiting: 40,
                admitted: 5
            })
        );
        assert!(sale.sold_out);
    }

    #[test]
    fn a_reply_that_is_no_sale_is_an_error_not_a_panic() {
        assert!(SaleReading::from_reply(b"k".to_vec(), Value::Int(3)).is_err());
        assert!(SaleReading::from_reply(b"k".to_vec(), Value::Array(vec![bulk("stock")])).is_err());
        let missing = flat(&[("stock", Value::Int(1))]);
        assert!(
            SaleReading::from_reply(b"k".to_vec(), missing)
                .unwrap_err()
                .contains("remaining")
        );
        let bad = flat(&[("stock", bulk("many"))]);
        assert!(SaleReading::from_reply(b"k".to_vec(), bad).is_err());
        let nameless = Value::Array(vec![Value::Int(1), Value::Int(2)]);
        assert!(reply_fields(nameless).is_err());
    }

    #[test]
    fn a_lock_held_with_waiters_and_a_free_one() {
        let held = flat(&[
            ("owner", bulk("tok")),
            ("ttl", Value::Int(900)),
            ("fence", Value::Int(4)),
            ("waiters", Value::Int(2)),
        ]);
        let lock = LockReading::from_reply(b"l".to_vec(), held).unwrap();
        assert!(lock.held);
        assert_eq!(lock.waiters, 2);
        let free = LockReading::from_reply(b"l".to_vec(), Value::Nil).unwrap();
        assert!(!free.held);
        assert_eq!(free.waiters, 0);
    }
}
