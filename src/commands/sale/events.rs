//! A sale's changes as they are told: keyspace notifications, INFO counters, and entries in
//! the sale's event stream with the IDs `_REPLAY` carries.

use crate::context::stream::{self, Stream};
use crate::logic::sale::{EventKind, Sale, SaleEvent};
use crate::stats;
use redis_module::Context;
use std::ffi::CStr;

pub(super) fn notification(kind: EventKind) -> &'static CStr {
    match kind {
        EventKind::Purchase => c"seckill.try",
        EventKind::Confirm => c"seckill.confirm",
        EventKind::Cancel => c"seckill.cancel",
        EventKind::Expire => c"seckill.expire",
        EventKind::Restock => c"seckill.restock",
        EventKind::Lend => c"seckill.lend",
        EventKind::Absorb => c"seckill.absorb",
        EventKind::Admit => c"seckill.admit",
        EventKind::Draw => c"seckill.draw",
        EventKind::Lapse => c"seckill.lapse",
        EventKind::Leave => c"seckill.leave",
        EventKind::Drop => c"seckill.drop",
    }
}

pub(super) fn count(event: &SaleEvent, holds: bool) {
    match event.kind {
        EventKind::Purchase => {
            stats::PURCHASES.incr();
            if holds {
                stats::HOLDS.incr();
            }
        }
        EventKind::Confirm => stats::CONFIRMS.incr(),
        EventKind::Cancel => stats::CANCELS.incr(),
        EventKind::Expire => stats::EXPIRIES.incr(),
        EventKind::Restock => stats::RESTOCKS.incr(),
        EventKind::Lend => stats::LENDS.incr(),
        EventKind::Absorb => stats::ABSORBS.incr(),
        EventKind::Admit => stats::ADMISSIONS.incr(),
        EventKind::Draw => stats::DRAWS.incr(),
        EventKind::Lapse => stats::LAPSES.incr(),
        EventKind::Leave => stats::LEAVES.incr(),
        EventKind::Drop => stats::DROPS.incr(),
    }
}

/// Writes the entry for `event` (with the stream's next ID, or with `id`) and returns its ID.
/// A move of stock also names its `transfer` id and the other sale key (`peer`).
pub(super) fn append_entry(
    stream: &Stream,
    sale: &Sale,
    event: &SaleEvent,
    transfer: Option<(&[u8], &[u8])>,
    id: Option<(u64, u64)>,
) -> Result<(u64, u64), &'static str> {
    use stream::{Field, Value};
    let user = match (event.record_id, event.room_user, sale.room()) {
        (Some(record_id), _, _) => sale.buyers().record(record_id).0,
        (None, Some(at), Some(room)) => room.user(at),
        _ => &b""[..],
    };
    let order = (event.order > 0).then(|| sale.order_uuid(event.order));
    let mut fields = [
        (Field::Event, Value::Kind(event.kind)),
        (Field::User, Value::Bytes(user)),
        (Field::Qty, Value::Int(event.qty)),
        (
            Field::Order,
            Value::Bytes(order.as_ref().map_or(&[], |o| &o[..])),
        ),
        (Field::Remaining, Value::Int(event.remaining)),
        (Field::Transfer, Value::Bytes(&[])),
        (Field::Peer, Value::Bytes(&[])),
    ];
    let used = match transfer {
        Some((id, peer)) => {
            fields[5].1 = Value::Bytes(id);
            fields[6].1 = Value::Bytes(peer);
            fields.len()
        }
        None => 5,
    };
    stream.add(&fields[..used], id)
}

/// The entry's ID, or `None` (counted and logged) when the stream refused it.
pub(super) fn entry_written(
    ctx: &Context,
    written: Result<(u64, u64), &str>,
) -> Option<(u64, u64)> {
    written
        .map_err(|e| {
            stats::EVENTS_FAILED.incr();
            ctx.log_warning(&format!("seckill: could not append a sale event: {e}"));
        })
        .ok()
}

/// Appends the `index`th entry's ID to `ms-seq,ms-seq,...`, an empty one for an entry that
/// could not be written.
pub(super) fn push_stream_id(ids: &mut Vec<u8>, index: usize, id: Option<(u64, u64)>) {
    if index > 0 {
        ids.push(b',');
    }
    if let Some((ms, seq)) = id {
        push_decimal(ids, ms);
        ids.push(b'-');
        push_decimal(ids, seq);
    }
}

/// `n` in decimal digits, without the formatting machinery (this runs for every purchase).
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}
