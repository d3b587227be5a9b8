//! Replies: named fields (a RESP3 map that flattens to the RESP2 array), integers.

use redis_module::{Context, ContextFlags, RedisValue, raw};

fn is_resp3(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::FLAGS_RESP3)
}

/// Named fields, as INFO-like built-ins reply: a map in this order under RESP3, a flat
/// `[name, value, ...]` array under RESP2 (where Redis itself turns a boolean into 0 or 1).
/// Under RESP3 the map is written at once (the crate's maps hash or sort their keys), and the
/// caller replies `NoReply` for it.
pub fn fields_reply(ctx: &Context, fields: Vec<(&str, RedisValue)>) -> RedisValue {
    if !is_resp3(ctx) {
        return RedisValue::Array(
            fields
                .into_iter()
                .flat_map(|(name, value)| [RedisValue::BulkString(name.to_string()), value])
                .collect(),
        );
    }
    raw::reply_with_map(ctx.ctx, fields.len() as std::os::raw::c_long);
    for (name, value) in fields {
        ctx.reply(Ok(RedisValue::BulkString(name.to_string())));
        ctx.reply(Ok(value));
    }
    RedisValue::NoReply
}

/// An integer reply of a count or amount that fits Redis' signed integers.
pub fn integer(value: u64) -> RedisValue {
    RedisValue::Integer(value as i64)
}
