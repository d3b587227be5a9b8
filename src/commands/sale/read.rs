//! The commands that read a sale and never change it: they see due holds as expired, as the
//! next write will.

use super::change::place_reply;
use super::{KEY, USER, WITHETA, no_sale};
use crate::args;
use crate::commands::{Args, Command};
use crate::context::clock::now_ms;
use crate::context::command_info::{Access, Doc, Kind, arg, flag, option};
use crate::context::keyspace::readable_value;
use crate::context::reply::{fields_reply, integer};
use crate::logic::sale::{BuyerRow, Sale};
use crate::types::sale::{SALE_TYPE, SaleValue};
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

pub const TRANSFERS: Command = Command {
    name: c"seckill.transfers",
    flags: c"readonly",
    handler: transfers,
    doc: Some(Doc {
        summary: c"Lists a sale's lent transfers not yet settled: id, units, peer, age in ms. WITHASKED adds the n each LEND asked (0 if not recorded), which a client repeating that LEND names.",
        complexity: c"O(T) where T is the pending transfers",
        since: c"0.3.0",
        access: Access::Read,
        inserts_after: None,
        args: &[KEY, flag(c"WITHASKED")],
    }),
};

/// SECKILL.TRANSFERS key [WITHASKED]: the pending outgoing transfers as `[id, n, dst, age_ms,
/// ...]` (with WITHASKED `[id, n, dst, age_ms, asked, ...]`), so any client can finish what a
/// crashed mover started.
pub fn transfers(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let with_asked = args::transfers(rest)?;
    read_sale(ctx, key_name, |sale, now| {
        let mut items = Vec::new();
        for t in sale.pending_transfers() {
            items.extend([
                RedisValue::StringBuffer(t.id.to_vec()),
                integer(t.units),
                RedisValue::StringBuffer(t.to.to_vec()),
                integer(now.saturating_sub(t.started_ms)),
            ]);
            if with_asked {
                items.push(integer(t.asked.map_or(0, |n| n.get())));
            }
        }
        RedisValue::Array(items)
    })
}

/// Reads never change a sale: they see due holds as expired, as the next write will.
fn read_sale<R>(
    ctx: &Context,
    key_name: &RedisString,
    read: impl FnOnce(&Sale, u64) -> R,
) -> Result<R, RedisError> {
    let key = ctx.open_key(key_name);
    let value = readable_value::<SaleValue>(&key, &SALE_TYPE)?.ok_or_else(no_sale)?;
    Ok(read(&value.sale, now_ms()))
}

fn optional_ms(ms: Option<u64>) -> RedisValue {
    integer(ms.unwrap_or(0))
}

pub const INFO: Command = Command {
    name: c"seckill.info",
    flags: c"readonly fast",
    handler: info,
    doc: Some(Doc {
        summary: c"Returns a sale's totals and settings.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Read,
        inserts_after: None,
        args: &[KEY],
    }),
};

/// SECKILL.INFO key
pub fn info(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    args::key_only(rest)?;
    read_sale(ctx, key_name, |sale, now| {
        let s = sale.summary(now);
        let events = sale
            .config()
            .events
            .clone()
            .map_or(RedisValue::Null, RedisValue::StringBuffer);
        let partition = sale.config().partition.as_ref();
        let manifest = partition.map_or(RedisValue::Null, |p| {
            RedisValue::StringBuffer(p.manifest.clone())
        });
        let partition_index = partition.map_or(RedisValue::Null, |p| integer(p.index));
        let mut fields = vec![
            ("stock", integer(s.stock)),
            ("remaining", integer(s.remaining)),
            ("sold", integer(s.sold)),
            ("buyers", integer(s.buyers)),
            ("limit", integer(s.limit)),
            ("sold_out", RedisValue::Bool(s.sold_out)),
            ("held", integer(s.held)),
            ("start", optional_ms(s.start_ms)),
            ("end", optional_ms(s.end_ms)),
            ("hold", optional_ms(s.hold_ms)),
            ("restocked", integer(s.restocked)),
            ("refunded", integer(s.refunded)),
            ("events", events),
            ("lent", integer(s.lent)),
            ("absorbed", integer(s.absorbed)),
            ("pending_out", integer(s.pending_out)),
            ("maxlen", optional_ms(sale.config().events_maxlen)),
            ("manifest", manifest),
            ("partition", partition_index),
            ("partitions", integer(partition.map_or(0, |p| p.count))),
            ("sealed", RedisValue::Bool(s.sealed)),
        ];
        // A sale with a waiting room only: the others' replies stay as they were.
        if let Some(room) = sale.room() {
            let config = room.config();
            let (admit, per) = config.rate.map_or((0, 0), |r| (r.users, r.per_ms));
            fields.extend([
                ("queue_admit", integer(admit)),
                ("queue_per", integer(per)),
                ("queue_window", integer(config.window_ms)),
                ("waiting", integer(room.waiting())),
                ("admitted", integer(room.unbought())),
                ("queue_presence", optional_ms(config.presence_ms)),
            ]);
        }
        fields_reply(ctx, fields)
    })
}

pub const BOUGHT: Command = Command {
    name: c"seckill.bought",
    flags: c"readonly fast",
    handler: bought,
    doc: Some(Doc {
        summary: c"Returns the units `user` owns in a sale (held or final).",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Read,
        inserts_after: None,
        args: &[KEY, USER],
    }),
};

/// SECKILL.BOUGHT key user
pub fn bought(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let user = args::user_only(rest)?;
    read_sale(ctx, key_name, |sale, now| integer(sale.bought(user, now)))
}

pub const POSITION: Command = Command {
    name: c"seckill.position",
    flags: c"readonly fast",
    handler: position,
    doc: Some(Doc {
        summary: c"Where `user` stands in a sale's waiting room, without joining: as SECKILL.JOIN replies, or nil if it is not in the room (it never joined, or it lapsed, left or was dropped). WITHETA: [position, eta_ms].",
        complexity: c"O(1)",
        since: c"0.10.0",
        access: Access::Read,
        inserts_after: None,
        args: &[KEY, USER, WITHETA],
    }),
};

/// SECKILL.POSITION key user [WITHETA]
pub fn position(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let (user, with_eta) = args::place_call(rest)?;
    read_sale(ctx, key_name, |sale, now| {
        place_reply(sale, sale.position(user)?, with_eta, now)
    })?
}

pub const BUYERS: Command = Command {
    name: c"seckill.buyers",
    flags: c"readonly",
    handler: buyers,
    doc: Some(Doc {
        summary: c"Iterates over a sale's buyers: a cursor, then user, units and state of each.",
        complexity: c"O(COUNT)",
        since: c"0.2.0",
        access: Access::Read,
        inserts_after: None,
        args: &[
            KEY,
            arg(c"cursor", Kind::Integer),
            option(c"COUNT", c"count", Kind::Integer),
        ],
    }),
};

/// SECKILL.BUYERS key cursor [COUNT n]: the next cursor, then one flat `[user, qty, state,
/// ...]` array, under RESP2 and RESP3 alike (module 0.7 and earlier answered RESP3 with one
/// map per buyer, which clients that flatten maps turned into another shape).
pub fn buyers(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let (cursor, count) = args::buyers(rest)?;
    read_sale(ctx, key_name, |sale, now| {
        let (next, page) = sale.scan(cursor, count, now)?;
        let items = page
            .into_iter()
            .flat_map(|(user, qty, state): BuyerRow| {
                [
                    RedisValue::StringBuffer(user.to_vec()),
                    integer(qty),
                    RedisValue::BulkString(state.name().to_string()),
                ]
            })
            .collect();
        Ok(RedisValue::Array(vec![
            RedisValue::BulkString(next.to_string()),
            RedisValue::Array(items),
        ]))
    })?
}
