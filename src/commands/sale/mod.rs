//! SECKILL.* commands: each one's name, flags and docs beside its handler. The handlers that
//! change a sale go through [`change::mutate`]; the reads are in [`read`], the hold-expiry
//! timer in [`expiry`], the stream entries in [`events`].

mod change;
mod events;
mod expiry;
mod read;

pub use expiry::{on_expiry_timer, on_key_moved};
pub use read::{BOUGHT, BUYERS, INFO, POSITION, TRANSFERS};

use super::internal::{internal_only, restored_value};
use super::{Args, Command};
use crate::args;
use crate::context::clock::now_ms;
use crate::context::command_info::{
    Access, Arg, Doc, KEY, Kind, arg, flag, option, optional, tokened,
};
use crate::context::keyspace::{notify, signal_modified, writable_value};
use crate::context::replication::replicate_restore;
use crate::context::stream::Stream;
use crate::logic::sale::{Partition, Sale, SaleConfig, SaleError};
use crate::persist::encoding;
use crate::slot;
use crate::types::sale::{SALE_TYPE, SaleValue, set_sale};
use change::{Origin, mutate};
use expiry::arm_for_holds;
use redis_module::{
    Context, ContextFlags, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue, raw,
};

const USER: Arg = arg(c"user", Kind::Text);
const QTY: Arg = optional(arg(c"qty", Kind::Integer));
/// A client's id for this call, so that a retry of it changes nothing.
const ATTEMPT: Arg = option(c"ID", c"attempt", Kind::Text);
const TRANSFER_ID: Arg = arg(c"id", Kind::Text);
const UNITS: Arg = arg(c"n", Kind::Integer);
/// JOIN's and POSITION's reply adds the user's ETA.
const WITHETA: Arg = flag(c"WITHETA");

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
            SaleError::TooMuchStock => format!(
                "ERR units would take the sale past {} units",
                crate::logic::sale::MAX_UNITS
            ),
            SaleError::NoHolds => {
                "ERR the sale has no holds to confirm (it was made without HOLD)".to_string()
            }
            SaleError::InvalidCursor => "ERR invalid cursor".to_string(),
            SaleError::Ended => "ERR the sale has ended: its stock no longer moves".to_string(),
            SaleError::TransferConflict(why) => format!("ERR transfer id {why}"),
            SaleError::AttemptConflict(why) => format!("ERR {why}"),
            SaleError::Invalid(why) => format!("ERR invalid sale: {why}"),
            SaleError::NotPartition => {
                "ERR the sale is not a partition (INIT ... PARTITION i PARTITIONS n MANIFEST key)"
                    .to_string()
            }
            SaleError::BuyersFull => {
                "ERR the sale's buyer table is full (4 GiB of user ids): start another sale"
                    .to_string()
            }
            SaleError::NoQueue => {
                "ERR the sale has no waiting room (it was made without QUEUE)".to_string()
            }
            SaleError::RoomFull => {
                "ERR the sale's waiting room is full (4 GiB of user ids)".to_string()
            }
        })
    }
}

fn random_seed() -> [u8; 16] {
    let mut seed = [0u8; 16];
    unsafe { raw::RedisModule_GetRandomBytes.expect("GetRandomBytes")(seed.as_mut_ptr(), 16) };
    seed
}

pub const INIT: Command = Command {
    name: c"seckill.init",
    flags: c"write deny-oom",
    handler: init,
    doc: Some(Doc {
        summary: c"Creates (or with REPLACE resets) a flash sale of `stock` units with a per-user LIMIT, optional holds awaiting confirmation, a sale window and an event stream.",
        complexity: c"O(1), O(N) with REPLACE where N is the old sale's buyers",
        since: c"0.1.0",
        access: Access::Write,
        inserts_after: Some(c"EVENTS"),
        args: &[
            KEY,
            arg(c"stock", Kind::Integer),
            option(c"LIMIT", c"limit", Kind::Integer),
            option(c"HOLD", c"hold_ms", Kind::Integer),
            option(c"START", c"start_unix_ms", Kind::UnixTime),
            option(c"END", c"end_unix_ms", Kind::UnixTime),
            Arg {
                name: c"events",
                kind: Kind::Block,
                token: None,
                optional: true,
                subargs: &[
                    // Key spec 1: the stream, found after the EVENTS keyword.
                    tokened(c"EVENTS", c"stream", Kind::Key),
                    option(c"MAXLEN", c"maxlen", Kind::Integer),
                ],
            },
            Arg {
                name: c"partition",
                kind: Kind::Block,
                token: None,
                optional: true,
                subargs: &[
                    tokened(c"PARTITION", c"index", Kind::Integer),
                    tokened(c"PARTITIONS", c"count", Kind::Integer),
                    tokened(c"MANIFEST", c"manifest", Kind::Text),
                ],
            },
            Arg {
                name: c"queue",
                kind: Kind::Block,
                token: None,
                optional: true,
                subargs: &[
                    flag(c"QUEUE"),
                    option(c"ADMIT", c"users", Kind::Integer),
                    option(c"PER", c"per_ms", Kind::Integer),
                    option(c"WINDOW", c"window_ms", Kind::Integer),
                    option(c"PRESENCE", c"presence_ms", Kind::Integer),
                ],
            },
            flag(c"REPLACE"),
        ],
    }),
};

/// SECKILL.INIT key stock [LIMIT n] [HOLD ms] [START unix_ms] [END unix_ms] [EVENTS stream]
/// [QUEUE [ADMIT n PER ms] [WINDOW ms] [PRESENCE ms]] [REPLACE]
pub fn init(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let parsed = args::init(rest)?;
    if let Some(stream) = parsed.events {
        if stream == key_name.as_slice() {
            return Err(RedisError::Str(
                "ERR the EVENTS stream must be another key than the sale",
            ));
        }
        if ctx.get_flags().contains(ContextFlags::CLUSTER)
            && slot::key_slot(stream) != slot::key_slot(key_name.as_slice())
        {
            return Err(RedisError::Str(
                "ERR the EVENTS stream must hash to the sale's slot: give both keys the same hash tag, e.g. {sale:1} and {sale:1}:events",
            ));
        }
        Stream::open(ctx, stream)?;
    }
    let key = ctx.open_key_writable(key_name);
    if writable_value::<SaleValue>(&key, &SALE_TYPE)?.is_some() && !parsed.replace {
        return Err(RedisError::Str(
            "ERR a sale already exists at this key (use REPLACE to reset it)",
        ));
    }
    let config = SaleConfig {
        stock: parsed.stock,
        limit: parsed.limit,
        hold_ms: parsed.hold_ms,
        start_ms: parsed.start_ms,
        end_ms: parsed.end_ms,
        events: parsed.events.map(<[u8]>::to_vec),
        events_maxlen: parsed
            .events_maxlen
            .or_else(|| parsed.events.and_then(|_| crate::config::events_maxlen())),
        partition: parsed.partition.map(|p| Partition {
            manifest: p.manifest.to_vec(),
            index: p.index,
            count: p.count,
        }),
        queue: parsed.queue,
    };
    let sale = Sale::new(config, random_seed())?;
    let payload = encoding::encode_sale(&sale);
    set_sale(&key, SaleValue::new(sale))?;
    // The seed is random: replicas get the sale itself, not the command.
    replicate_restore(
        ctx,
        c"SECKILL._RESTORE",
        key_name,
        encoding::SALE_VERSION,
        &payload,
    );
    // SAFETY: the key is the command's own argument, valid for the whole call.
    unsafe {
        signal_modified(ctx, key_name.inner);
        notify(ctx, NotifyEvent::MODULE, c"seckill.init", key_name.inner);
    }
    Ok(RedisValue::SimpleStringStatic("OK"))
}

pub const TRY: Command = Command {
    name: c"seckill.try",
    flags: c"write deny-oom fast",
    handler: try_buy,
    doc: Some(Doc {
        summary: c"Buys `qty` units (default 1) for `user` in one atomic step: checks sold out, window and LIMIT, takes the stock, records the buyer. Replies the units left, or -1 sold out, -2 over limit, -3 not started, -4 ended, -5 (a partition only) drained but not sealed, -6 (a sale with QUEUE) not admitted. Repeated with the same ID while the buyer owns what it bought, it changes nothing and replies the units left.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, USER, QTY, ATTEMPT],
    }),
};

/// SECKILL.TRY key user [qty] [ID attempt]
pub fn try_buy(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"TRY", rest, now_ms(), Origin::Client)
}

pub const CONFIRM: Command = Command {
    name: c"seckill.confirm",
    flags: c"write fast",
    handler: confirm,
    doc: Some(Doc {
        summary: c"Makes a user's held units final. Replies 1, or 0 if nothing was held.",
        complexity: c"O(1)",
        since: c"0.2.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, USER],
    }),
};

/// SECKILL.CONFIRM key user
pub fn confirm(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"CONFIRM", rest, now_ms(), Origin::Client)
}

pub const CANCEL: Command = Command {
    name: c"seckill.cancel",
    flags: c"write fast",
    handler: cancel,
    doc: Some(Doc {
        summary: c"Returns `qty` of a user's units (all without qty) to stock. Replies the units returned; repeated with the same ID, what the first call returned.",
        complexity: c"O(1)",
        since: c"0.2.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, USER, QTY, ATTEMPT],
    }),
};

/// SECKILL.CANCEL key user [qty] [ID attempt]
pub fn cancel(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"CANCEL", rest, now_ms(), Origin::Client)
}

pub const JOIN: Command = Command {
    name: c"seckill.join",
    flags: c"write deny-oom",
    handler: join,
    doc: Some(Doc {
        summary: c"Puts `user` in the waiting room of a sale made with QUEUE. Replies its position (>= 1) while it waits, 0 once admitted, -1 when the sale is sold out; before START, the number of users waiting (the cohort, ordered at random when the sale opens). Joining again replies the same, and with PRESENCE keeps the place. WITHETA: [position, eta_ms] (eta 0 admitted, -1 sold out or unknown).",
        complexity: c"O(log N), N the users waiting; O(N) for the join that first comes after START",
        since: c"0.10.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, USER, WITHETA],
    }),
};

/// SECKILL.JOIN key user [WITHETA]
pub fn join(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"JOIN", rest, now_ms(), Origin::Client)
}

pub const LEAVE: Command = Command {
    name: c"seckill.leave",
    flags: c"write",
    handler: leave,
    doc: Some(Doc {
        summary: c"Takes `user` out of a sale's waiting room: a waiting user's place, or the unit promised to an admitted user who has not bought, goes to the next in line. Replies 1 if it was in the room, 0 otherwise.",
        complexity: c"O(log N), N the users waiting",
        since: c"0.12.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, USER],
    }),
};

/// SECKILL.LEAVE key user
pub fn leave(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"LEAVE", rest, now_ms(), Origin::Client)
}

pub const ADMIT: Command = Command {
    name: c"seckill.admit",
    flags: c"write",
    handler: admit,
    doc: Some(Doc {
        summary: c"Admits up to `n` users from the head of a sale's waiting room (never more than the units left can serve). Replies how many were admitted.",
        complexity: c"O(N), N the users admitted",
        since: c"0.10.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, UNITS],
    }),
};

/// SECKILL.ADMIT key n
pub fn admit(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"ADMIT", rest, now_ms(), Origin::Client)
}

pub const RESTOCK: Command = Command {
    name: c"seckill.restock",
    flags: c"write deny-oom fast",
    handler: restock,
    doc: Some(Doc {
        summary: c"Adds units to a sale's stock. Replies the units left.",
        complexity: c"O(1)",
        since: c"0.2.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, UNITS],
    }),
};

/// SECKILL.RESTOCK key units
pub fn restock(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"RESTOCK", rest, now_ms(), Origin::Client)
}

pub const LEND: Command = Command {
    name: c"seckill.lend",
    flags: c"write deny-oom fast",
    handler: lend,
    doc: Some(Doc {
        summary: c"Moves up to `n` units of remaining stock out of this sale as transfer `id` to sale `dst`. The same id, n and dst again changes nothing; another n or dst is refused. Replies the units lent.",
        complexity: c"O(log T) where T is the pending transfers",
        since: c"0.3.0",
        access: Access::Write,
        inserts_after: None,
        args: &[
            KEY,
            TRANSFER_ID,
            UNITS,
            tokened(c"TO", c"dst", Kind::Text),
        ],
    }),
};

/// SECKILL.LEND key id n TO dst
pub fn lend(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"LEND", rest, now_ms(), Origin::Client)
}

pub const ABSORB: Command = Command {
    name: c"seckill.absorb",
    flags: c"write deny-oom fast",
    handler: absorb,
    doc: Some(Doc {
        summary: c"Adds the `n` units of transfer `id` from sale `src` to this sale's remaining stock, once. Replies 1, or 0 if already absorbed.",
        complexity: c"O(log T) where T is the transfers",
        since: c"0.3.0",
        access: Access::Write,
        inserts_after: None,
        args: &[
            KEY,
            TRANSFER_ID,
            UNITS,
            tokened(c"FROM", c"src", Kind::Text),
        ],
    }),
};

/// SECKILL.ABSORB key id n FROM src
pub fn absorb(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"ABSORB", rest, now_ms(), Origin::Client)
}

pub const SETTLE: Command = Command {
    name: c"seckill.settle",
    flags: c"write fast",
    handler: settle,
    doc: Some(Doc {
        summary: c"Marks a lent transfer as delivered. Replies 1, or 0 if it already was.",
        complexity: c"O(log T) where T is the transfers",
        since: c"0.3.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, TRANSFER_ID],
    }),
};

/// SECKILL.SETTLE key id
pub fn settle(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"SETTLE", rest, now_ms(), Origin::Client)
}

pub const SEAL: Command = Command {
    name: c"seckill.seal",
    flags: c"write fast",
    handler: seal,
    doc: Some(Doc {
        summary: c"Marks a drained partition sold out for `ms`, or until stock comes back. Replies 1, or 0 if it has stock.",
        complexity: c"O(1)",
        since: c"0.5.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, arg(c"ms", Kind::Integer)],
    }),
};

/// SECKILL.SEAL key ms
pub fn seal(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"SEAL", rest, now_ms(), Origin::Client)
}

pub const REPLAY: Command = Command {
    name: c"seckill._replay",
    flags: c"write",
    handler: replay,
    doc: None,
};

/// SECKILL._REPLAY key now_ms COMMAND args...: a change as its master made it.
pub fn replay(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    internal_only(ctx, "SECKILL._REPLAY")?;
    let replayed = args::replay(rest)?;
    mutate(
        ctx,
        key_name,
        replayed.command,
        &Args::bytes(replayed.args),
        replayed.now_ms,
        Origin::Replay(replayed.entries),
    )
}

pub const RESTORE: Command = Command {
    name: c"seckill._restore",
    flags: c"write deny-oom",
    handler: restore,
    doc: None,
};

/// SECKILL._RESTORE key version payload: INIT's replicated form, and AOF rewrite's (in
/// chunks for a big sale).
pub fn restore(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let restored = restored_value(
        ctx,
        key_name,
        "SECKILL._RESTORE",
        "sale",
        rest,
        encoding::decode_sale,
    )?;
    if let Some(sale) = restored {
        let key = ctx.open_key_writable(key_name);
        writable_value::<SaleValue>(&key, &SALE_TYPE)?;
        set_sale(&key, SaleValue::new(sale))?;
        // SAFETY: the key is the command's own argument, valid for the whole call.
        unsafe { signal_modified(ctx, key_name.inner) };
        let value = writable_value::<SaleValue>(&key, &SALE_TYPE)?.expect("sale just stored");
        arm_for_holds(ctx, key_name, value);
    }
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
