//! SECKILL.* commands.

use super::{field_array, int, readable_value, writable_value};
use crate::args;
use crate::core::sale::{Sale, SaleError, TryOutcome};
use crate::persist::{SALE_TYPE, encoding, set_sale};
use crate::stats;
use redis_module::{Context, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue};

const SOLD_OUT: i64 = -1;
const OVER_LIMIT: i64 = -2;

fn no_sale() -> RedisError {
    RedisError::Str("NOSALE no sale at this key")
}

impl From<SaleError> for RedisError {
    fn from(err: SaleError) -> RedisError {
        RedisError::String(match err {
            SaleError::EmptyUser => "ERR user must not be empty".to_string(),
            SaleError::QtyOutOfRange { limit } => {
                format!("ERR qty must be an integer between 1 and {limit} (the sale's LIMIT)")
            }
            SaleError::Invalid(why) => format!("ERR invalid sale: {why}"),
        })
    }
}

/// SECKILL.INIT key stock [LIMIT n] [REPLACE]
pub fn init(ctx: &Context, key_name: &RedisString, rest: &[&[u8]]) -> RedisResult {
    let parsed = args::init(rest)?;
    let key = ctx.open_key_writable(key_name);
    if writable_value::<Sale>(&key, &SALE_TYPE)?.is_some() && !parsed.replace {
        return Err(RedisError::Str(
            "ERR a sale already exists at this key (use REPLACE to reset it)",
        ));
    }
    set_sale(&key, Sale::new(parsed.stock, parsed.limit)?)?;
    ctx.replicate_verbatim();
    ctx.notify_keyspace_event(NotifyEvent::MODULE, "seckill.init", key_name);
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// SECKILL.TRY key user [qty]
pub fn try_buy(ctx: &Context, key_name: &RedisString, rest: &[&[u8]]) -> RedisResult {
    let (user, qty) = args::try_buy(rest)?;
    let key = ctx.open_key_writable(key_name);
    let sale = writable_value::<Sale>(&key, &SALE_TYPE)?.ok_or_else(no_sale)?;
    stats::TRIES.incr();
    match sale.try_buy(user, qty)? {
        TryOutcome::SoldOut => {
            stats::SOLD_OUT_REJECTIONS.incr();
            Ok(RedisValue::Integer(SOLD_OUT))
        }
        TryOutcome::LimitExceeded => {
            stats::LIMIT_REJECTIONS.incr();
            Ok(RedisValue::Integer(OVER_LIMIT))
        }
        TryOutcome::Bought { remaining } => {
            stats::PURCHASES.incr();
            // The outcome depends only on the sale's state, so replicas replay it exactly.
            ctx.replicate_verbatim();
            ctx.notify_keyspace_event(NotifyEvent::MODULE, "seckill.try", key_name);
            Ok(int(remaining))
        }
    }
}

/// SECKILL.INFO key
pub fn info(ctx: &Context, key_name: &RedisString, rest: &[&[u8]]) -> RedisResult {
    args::key_only(rest)?;
    let key = ctx.open_key(key_name);
    let s = readable_value::<Sale>(&key, &SALE_TYPE)?
        .ok_or_else(no_sale)?
        .summary();
    Ok(field_array(vec![
        ("stock", int(s.stock)),
        ("remaining", int(s.remaining)),
        ("sold", int(s.sold)),
        ("buyers", int(s.buyers)),
        ("limit", int(s.limit)),
        ("sold_out", int(u64::from(s.sold_out))),
    ]))
}

/// SECKILL.BOUGHT key user
pub fn bought(ctx: &Context, key_name: &RedisString, rest: &[&[u8]]) -> RedisResult {
    let user = args::user_only(rest)?;
    let key = ctx.open_key(key_name);
    let sale = readable_value::<Sale>(&key, &SALE_TYPE)?.ok_or_else(no_sale)?;
    Ok(int(sale.bought(user)))
}

/// SECKILL._RESTORE key version payload: written by AOF rewrite; replaces the key's sale.
pub fn restore(ctx: &Context, key_name: &RedisString, rest: &[&[u8]]) -> RedisResult {
    let (version, payload) = args::restore(rest)?;
    let sale = encoding::decode_sale(payload, version)
        .map_err(|e| RedisError::String(format!("ERR bad sale payload: {}", e.0)))?;
    let key = ctx.open_key_writable(key_name);
    writable_value::<Sale>(&key, &SALE_TYPE)?;
    set_sale(&key, sale)?;
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
