//! SECKILL.* commands: the sale core plus its event stream, the hold-expiry timer, and
//! replication.
//!
//! A change whose outcome depends on the sale alone replicates as the command itself. One
//! that also depends on the clock (HOLD, a window, a stream) replicates as
//! `SECKILL._REPLAY key now_ms [STREAM ids length] COMMAND args...` when it is the first of
//! its ms, and the sale keeps that clock: the others of the same ms replicate as the command
//! itself, which a replica or the AOF replays at the kept clock. Either way the deterministic
//! core turns it into exactly the master's state (window checks, hold expiries, order numbers
//! and stream entry IDs included). INIT replicates its effect (the new sale with its random
//! order seed) as `SECKILL._RESTORE`.

use super::Args;
use super::internal::{internal_only, restored_value};
use crate::args::{self, ArgError};
use crate::context::clock::now_ms;
use crate::context::keyspace::{
    in_db, notify, readable_value, selected_db, signal_modified, writable_value,
};
use crate::context::replication::{replicate_restore, replicate_strings};
use crate::context::reply::{fields_reply, integer, is_resp3, start_array};
use crate::context::stream::{self, Stream};
use crate::context::strings::{StaticStrings, TempStrings};
use crate::context::timer::Fired;
use crate::logic::sale::{
    BuyerRow, EventKind, Partition, Sale, SaleConfig, SaleError, SaleEvent, TryOutcome,
    next_entry_id,
};
use crate::persist::encoding;
use crate::types::sale::{SALE_TYPE, SaleValue, set_sale};
use crate::{slot, stats};
use redis_module::{
    Context, ContextFlags, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue, raw,
};
use std::ffi::CStr;

const SOLD_OUT: i64 = -1;
const OVER_LIMIT: i64 = -2;
const NOT_STARTED: i64 = -3;
const ENDED: i64 = -4;
const DRAINED: i64 = -5;

/// How often a replica looks at its sales' holds again: it never expires them itself, but it
/// must keep a timer so that it does once promoted.
const REPLICA_RECHECK_MS: u64 = 1_000;

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
            SaleError::Invalid(why) => format!("ERR invalid sale: {why}"),
            SaleError::NotPartition => {
                "ERR the sale is not a partition (INIT ... PARTITION i PARTITIONS n MANIFEST key)"
                    .to_string()
            }
            SaleError::BuyersFull => {
                "ERR the sale's buyer table is full (4 GiB of user ids): start another sale"
                    .to_string()
            }
        })
    }
}

/// A change to a sale, parsed once for the client's command and for its replay.
enum Op<'a> {
    Try {
        user: &'a [u8],
        qty: u64,
    },
    Confirm {
        user: &'a [u8],
    },
    Cancel {
        user: &'a [u8],
        qty: Option<u64>,
    },
    Restock {
        units: u64,
    },
    Lend(args::TransferArgs<'a>),
    Absorb(args::TransferArgs<'a>),
    Settle {
        id: &'a [u8],
    },
    Seal {
        ms: u64,
    },
    /// Expire due holds (the timer's change).
    Expire,
}

impl Op<'_> {
    /// The transfer id and the other sale key, for a move of stock.
    fn transfer(&self) -> Option<(&[u8], &[u8])> {
        match self {
            Op::Lend(t) | Op::Absorb(t) => Some((t.id, t.peer)),
            _ => None,
        }
    }
}

/// `replayed`: the command comes from `SECKILL._REPLAY`, where older forms are still read.
fn parse_op<'a>(
    key: &[u8],
    command: &[u8],
    rest: &[&'a [u8]],
    replayed: bool,
) -> Result<Op<'a>, ArgError> {
    let is = |name: &str| command.eq_ignore_ascii_case(name.as_bytes());
    Ok(if is("TRY") {
        let (user, qty) = args::try_buy(rest)?;
        Op::Try { user, qty }
    } else if is("CONFIRM") {
        Op::Confirm {
            user: args::user_only(rest)?,
        }
    } else if is("CANCEL") {
        let (user, qty) = args::cancel(rest)?;
        Op::Cancel { user, qty }
    } else if is("RESTOCK") {
        Op::Restock {
            units: args::restock(rest)?,
        }
    } else if is("LEND") {
        Op::Lend(args::transfer(rest, key, "TO")?)
    } else if is("ABSORB") {
        Op::Absorb(args::transfer(rest, key, "FROM")?)
    } else if is("EXPIRE") || (replayed && is("SETTLE") && rest.is_empty()) {
        // Module 0.2 wrote the timer's change as `SETTLE` with no argument: its AOF files
        // still replay. From a client, `SETTLE` without an id is a wrong arity.
        Op::Expire
    } else if is("SETTLE") {
        Op::Settle {
            id: args::settle(rest)?,
        }
    } else if is("SEAL") {
        Op::Seal {
            ms: args::seal(rest)?,
        }
    } else {
        return Err(ArgError::Invalid(format!(
            "ERR unknown sale command '{}'",
            args::printable(command)
        )));
    })
}

fn apply(sale: &mut Sale, op: &Op, now_ms: u64) -> RedisResult {
    Ok(match *op {
        Op::Try { user, qty } => {
            let outcome = sale.try_buy(user, qty, now_ms)?;
            stats::TRIES.incr();
            match outcome {
                TryOutcome::Bought { remaining } => integer(remaining),
                TryOutcome::SoldOut => {
                    stats::SOLD_OUT_REJECTIONS.incr();
                    RedisValue::Integer(SOLD_OUT)
                }
                TryOutcome::Drained => {
                    stats::DRAINED_REJECTIONS.incr();
                    RedisValue::Integer(DRAINED)
                }
                TryOutcome::LimitExceeded => {
                    stats::LIMIT_REJECTIONS.incr();
                    RedisValue::Integer(OVER_LIMIT)
                }
                TryOutcome::NotStarted => {
                    stats::WINDOW_REJECTIONS.incr();
                    RedisValue::Integer(NOT_STARTED)
                }
                TryOutcome::Ended => {
                    stats::WINDOW_REJECTIONS.incr();
                    RedisValue::Integer(ENDED)
                }
            }
        }
        Op::Confirm { user } => integer(u64::from(sale.confirm(user, now_ms)?)),
        Op::Cancel { user, qty } => integer(sale.cancel(user, qty, now_ms)?),
        Op::Restock { units } => integer(sale.restock(units, now_ms)?),
        Op::Lend(t) => integer(sale.lend(t.id, t.units, t.peer, now_ms)?),
        Op::Absorb(t) => integer(u64::from(sale.absorb(t.id, t.units, t.peer, now_ms)?)),
        Op::Settle { id } => integer(u64::from(sale.settle_transfer(id)?)),
        Op::Seal { ms } => {
            let sealed = sale.seal(ms, now_ms)?;
            if sealed {
                stats::SEALS.incr();
            }
            integer(u64::from(sealed))
        }
        Op::Expire => {
            sale.settle(now_ms);
            RedisValue::Null
        }
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin<'a> {
    /// A client's command on this server.
    Client,
    /// The expiry timer on a master.
    Timer,
    /// `SECKILL._REPLAY` from a master's replication stream or the AOF, with the stream
    /// entries to write (absent in the form of module 0.3 and older, whose XADDs follow it).
    Replay(Option<args::ReplayedEntries<'a>>),
}

fn notification(kind: EventKind) -> &'static CStr {
    match kind {
        EventKind::Purchase => c"seckill.try",
        EventKind::Confirm => c"seckill.confirm",
        EventKind::Cancel => c"seckill.cancel",
        EventKind::Expire => c"seckill.expire",
        EventKind::Restock => c"seckill.restock",
        EventKind::Lend => c"seckill.lend",
        EventKind::Absorb => c"seckill.absorb",
    }
}

fn count(event: &SaleEvent, holds: bool) {
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
    }
}

/// Writes the entry for `event` (with the stream's next ID, or with `id`) and returns its ID.
/// A move of stock also names its `transfer` id and the other sale key (`peer`).
fn append_entry(
    stream: &Stream,
    sale: &Sale,
    event: &SaleEvent,
    transfer: Option<(&[u8], &[u8])>,
    id: Option<(u64, u64)>,
) -> Result<(u64, u64), &'static str> {
    use stream::{Field, Value};
    let user = event
        .slot
        .map_or(&b""[..], |slot| sale.buyers().entry(slot).0);
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
fn entry_written(ctx: &Context, written: Result<(u64, u64), &str>) -> Option<(u64, u64)> {
    written
        .map_err(|e| {
            stats::EVENTS_FAILED.incr();
            ctx.log_warning(&format!("seckill: could not append a sale event: {e}"));
        })
        .ok()
}

/// The words of `_REPLAY`'s commands.
static COMMAND_WORDS: StaticStrings<9> = StaticStrings::new([
    "TRY", "CONFIRM", "CANCEL", "RESTOCK", "LEND", "ABSORB", "SETTLE", "EXPIRE", "SEAL",
]);

/// Appends the `index`th entry's ID to `ms-seq,ms-seq,...`, an empty one for an entry that
/// could not be written.
fn push_stream_id(ids: &mut Vec<u8>, index: usize, id: Option<(u64, u64)>) {
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

fn arm_for_holds(ctx: &Context, key_name: &RedisString, value: &mut SaleValue) {
    let due = value.sale.next_expiry();
    value.arm_expiry_timer(ctx, selected_db(ctx), key_name.as_slice(), due);
}

/// RENAME, MOVE and COPY put a sale under a name its timer does not know: arm one there, so
/// its holds keep expiring even if nobody writes to it again.
pub fn on_key_moved(ctx: &Context, _: NotifyEvent, event: &str, key: &[u8]) {
    if !matches!(event, "rename_to" | "move_to" | "copy_to") {
        return;
    }
    let key_name = ctx.create_string(key);
    let key = ctx.open_key_writable(&key_name);
    if let Ok(Some(value)) = writable_value::<SaleValue>(&key, &SALE_TYPE) {
        arm_for_holds(ctx, &key_name, value);
    }
}

/// What a sale's expiry timer runs (registered with `types::sale::on_holds_due` at load).
pub fn on_expiry_timer(ctx: &Context, fired: Fired) {
    let home = &fired.home;
    in_db(ctx, home.db(), || {
        let key_name = ctx.create_string(home.key.as_slice());
        {
            let key = ctx.open_key_writable(&key_name);
            let Ok(Some(value)) = writable_value::<SaleValue>(&key, &SALE_TYPE) else {
                return;
            };
            value.expiry_timer_fired(&fired);
            // A replica never expires holds on its own: its master's _REPLAY does.
            if !ctx.get_flags().contains(ContextFlags::MASTER) {
                if value.sale.next_expiry().is_some() {
                    let recheck = now_ms() + REPLICA_RECHECK_MS;
                    value.arm_expiry_timer(ctx, home.db(), &home.key, Some(recheck));
                }
                return;
            }
        }
        let none = Args::bytes(&[]);
        if let Err(e) = mutate(ctx, &key_name, b"EXPIRE", &none, now_ms(), Origin::Timer) {
            ctx.log_warning(&format!("seckill: expiring holds failed: {e}"));
        }
    });
}

/// Whether a change to this sale depends on the clock (hold deadlines and expiries, the
/// window, stream entry IDs), so that a replica must replay it at its master's clock.
fn is_clocked(config: &SaleConfig) -> bool {
    config.hold_ms.is_some()
        || config.start_ms.is_some()
        || config.end_ms.is_some()
        || config.events.is_some()
}

/// Parses and applies one change at `now_ms`, then publishes what changed (counters,
/// notifications, stream entries), replicates it and arms the expiry timer.
fn mutate(
    ctx: &Context,
    key_name: &RedisString,
    command: &[u8],
    rest: &Args,
    now_ms: u64,
    origin: Origin,
) -> RedisResult {
    let replayed = match origin {
        Origin::Replay(entries) => Some(entries),
        _ => None,
    };
    let op = parse_op(key_name.as_slice(), command, rest, replayed.is_some())?;
    let key = ctx.open_key_writable(key_name);
    let value = writable_value::<SaleValue>(&key, &SALE_TYPE)?.ok_or_else(no_sale)?;
    let config = value.sale.config();
    let clocked = is_clocked(config);
    // The bare command from a master or the AOF: it ran there at the clock this sale
    // replicated last (see below), which the copy here holds too.
    let now_ms = if clocked
        && origin == Origin::Client
        && ctx
            .get_flags()
            .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
    {
        value.sale.totals().replay_clock_ms
    } else {
        now_ms
    };
    // A replay of the old form writes no entries: its master's XADDs follow it. Nor does a
    // TRY refused before anything changes (a sold-out storm), which then skips opening the
    // stream key, a sixth of a sold-out TRY's time.
    let writes_entries = config.events.is_some()
        && !matches!(replayed, Some(None))
        && !matches!(op, Op::Try { qty, .. }
            if value.sale.unchanged_refusal(qty, now_ms).is_some());
    let stream = match &config.events {
        Some(name) if writes_entries => Some(Stream::open(ctx, name)?),
        _ => None,
    };
    let mut replayed_ids = replayed.flatten().map(|entries| entries.ids());
    let reply = apply(&mut value.sale, &op, now_ms)?;
    if replayed.is_some() {
        value.sale.set_replay_clock(now_ms);
    }
    let sale = &value.sale;
    if sale.changed() {
        let holds = sale.config().hold_ms.is_some();
        let mut ids = Vec::new();
        let mut last_entry_id = sale.totals().last_entry_id;
        // Whether every entry took the ID that follows the sale's last one at this clock, as
        // a replica replaying the bare command derives it from its equal copy.
        let mut ids_derived = true;
        for (index, event) in sale.events().iter().enumerate() {
            count(event, holds);
            if let Some(stream) = &stream {
                let transfer = op.transfer();
                let written = match replayed_ids.as_mut().map(Iterator::next) {
                    // The ID after the sale's last entry; the stream's own next ID if another
                    // writer has gone past it. The _REPLAY below carries the IDs if needed.
                    None => next_entry_id(last_entry_id, now_ms)
                        .and_then(|id| append_entry(stream, sale, event, transfer, Some(id)).ok())
                        .or_else(|| {
                            ids_derived = false;
                            entry_written(ctx, append_entry(stream, sale, event, transfer, None))
                        }),
                    Some(Some(Ok(Some(id)))) => {
                        entry_written(ctx, append_entry(stream, sale, event, transfer, Some(id)))
                    }
                    // The master could not write this one either.
                    Some(Some(Ok(None))) => None,
                    Some(_) => {
                        stats::EVENTS_FAILED.incr();
                        ctx.log_warning("seckill: a replayed change names no valid stream ID");
                        None
                    }
                };
                if replayed.is_none() {
                    push_stream_id(&mut ids, index, written);
                }
                last_entry_id = written.unwrap_or(last_entry_id);
            }
            // SAFETY: the key is the command's own argument, valid for the whole call.
            unsafe {
                notify(
                    ctx,
                    NotifyEvent::MODULE,
                    notification(event.kind),
                    key_name.inner,
                )
            };
        }
        if let Some(stream) = &stream {
            match replayed.flatten() {
                Some(entries) => stream.trim_exact(entries.length),
                None => {
                    if let Some(maxlen) = sale.config().events_maxlen {
                        stream.trim_approx(maxlen);
                    }
                }
            }
        }
        // Without HOLD, a window or a stream the outcome depends on the sale alone: the
        // command itself then replays exactly, and replicating it verbatim takes a third less
        // of TRY's time than building the _REPLAY form. With HOLD, a window or a stream the
        // outcome also depends on the clock; the first change of each ms replicates with it,
        // as _REPLAY, and the sale keeps that clock: the others of that ms replay verbatim at
        // it (a busy sale makes hundreds of changes a ms). Their stream entries took the IDs
        // that follow the sale's last one, which a replica derives alike; when another writer
        // went past those, or a MAXLEN trim left a length only the master knows (approximate
        // trimming depends on the server's node size), _REPLAY carries IDs and length.
        // LEND and SEAL record the clock (the transfer's start, the seal's end), so they
        // always replay with it. A partition's seal only changes TRY's refusal (-1 or -5),
        // never the state, so its TRY stays self-contained.
        let replays_verbatim = !matches!(op, Op::Lend(_) | Op::Seal { .. })
            && (!clocked || now_ms == sale.totals().replay_clock_ms)
            && (stream.is_none() || (ids_derived && sale.config().events_maxlen.is_none()));
        if stream.is_some() {
            value.sale.set_last_entry_id(last_entry_id);
        }
        if replayed.is_some() || (replays_verbatim && origin == Origin::Client) {
            ctx.replicate_verbatim();
        } else {
            // One command carries the change and its entries: no XADD beside it, so neither
            // a second replication call nor a MULTI/EXEC around the two.
            let mut argv = TempStrings::new(ctx);
            // SAFETY: the key is the command's own argument, valid for the whole call.
            unsafe { argv.retain(key_name.inner) };
            argv.integer(now_ms);
            if let Some(stream) = &stream {
                argv.bytes(b"STREAM");
                argv.bytes(&ids);
                argv.integer(stream.length());
            }
            match COMMAND_WORDS.find(command) {
                // SAFETY: a word's string lives as long as the module.
                Some(word) => unsafe { argv.retain(word) },
                None => argv.bytes(command),
            };
            for (index, arg) in rest.iter().enumerate() {
                match rest.string(index) {
                    // SAFETY: argv's strings live for the whole command.
                    Some(string) => unsafe { argv.retain(string) },
                    None => argv.bytes(arg),
                };
            }
            replicate_strings(ctx, c"SECKILL._REPLAY", argv.all());
            value.sale.set_replay_clock(now_ms);
        }
        value.sale.clear_events();
        // SAFETY: the key is the command's (or the timer's) own string, valid for the call.
        unsafe { signal_modified(ctx, key_name.inner) };
    }
    arm_for_holds(ctx, key_name, value);
    Ok(reply)
}

fn random_seed() -> [u8; 16] {
    let mut seed = [0u8; 16];
    unsafe { raw::RedisModule_GetRandomBytes.expect("GetRandomBytes")(seed.as_mut_ptr(), 16) };
    seed
}

/// SECKILL.INIT key stock [LIMIT n] [HOLD ms] [START unix_ms] [END unix_ms] [EVENTS stream]
/// [REPLACE]
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

/// SECKILL.TRY key user [qty]
pub fn try_buy(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"TRY", rest, now_ms(), Origin::Client)
}

/// SECKILL.CONFIRM key user
pub fn confirm(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"CONFIRM", rest, now_ms(), Origin::Client)
}

/// SECKILL.CANCEL key user [qty]
pub fn cancel(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"CANCEL", rest, now_ms(), Origin::Client)
}

/// SECKILL.RESTOCK key units
pub fn restock(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"RESTOCK", rest, now_ms(), Origin::Client)
}

/// SECKILL.LEND key id n TO dst
pub fn lend(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"LEND", rest, now_ms(), Origin::Client)
}

/// SECKILL.ABSORB key id n FROM src
pub fn absorb(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"ABSORB", rest, now_ms(), Origin::Client)
}

/// SECKILL.SETTLE key id
pub fn settle(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"SETTLE", rest, now_ms(), Origin::Client)
}

/// SECKILL.SEAL key ms
pub fn seal(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    mutate(ctx, key_name, b"SEAL", rest, now_ms(), Origin::Client)
}

/// SECKILL.TRANSFERS key: the pending outgoing transfers as `[id, n, dst, age_ms, ...]`, so
/// any client can finish what a crashed mover started.
pub fn transfers(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    args::key_only(rest)?;
    read_sale(ctx, key_name, |sale, now| {
        let items = sale
            .pending_transfers()
            .flat_map(|t| {
                [
                    RedisValue::StringBuffer(t.id.to_vec()),
                    integer(t.units),
                    RedisValue::StringBuffer(t.to.to_vec()),
                    integer(now.saturating_sub(t.started_ms)),
                ]
            })
            .collect();
        RedisValue::Array(items)
    })
}

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
        fields_reply(
            ctx,
            vec![
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
            ],
        )
    })
}

/// SECKILL.BOUGHT key user
pub fn bought(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let user = args::user_only(rest)?;
    read_sale(ctx, key_name, |sale, now| integer(sale.bought(user, now)))
}

/// SECKILL.BUYERS key cursor [COUNT n]: under RESP2 the rows are one flat
/// `[user, qty, state, ...]` array, under RESP3 one map per row.
pub fn buyers(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let (cursor, count) = args::buyers(rest)?;
    let resp3 = is_resp3(ctx);
    read_sale(ctx, key_name, |sale, now| {
        let (next, page) = sale.scan(cursor, count, now)?;
        let row = |(user, qty, state): BuyerRow| {
            [
                ("user", RedisValue::StringBuffer(user.to_vec())),
                ("qty", integer(qty)),
                ("state", RedisValue::BulkString(state.name().to_string())),
            ]
        };
        let next = RedisValue::BulkString(next.to_string());
        if !resp3 {
            let items = page
                .into_iter()
                .flat_map(|r| row(r).map(|(_, value)| value))
                .collect();
            return Ok(RedisValue::Array(vec![next, RedisValue::Array(items)]));
        }
        start_array(ctx, 2);
        ctx.reply(Ok(next));
        start_array(ctx, page.len());
        for r in page {
            fields_reply(ctx, row(r).into());
        }
        Ok(RedisValue::NoReply)
    })?
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_replies_and_the_partition_limit_are_the_client_libraries_table() {
        let table = include_str!("../../clients/protocol.txt");
        let ours = [
            ("SOLD_OUT", SOLD_OUT),
            ("OVER_LIMIT", OVER_LIMIT),
            ("NOT_STARTED", NOT_STARTED),
            ("ENDED", ENDED),
            ("DRAINED", DRAINED),
            ("MAX_PARTITIONS", crate::logic::sale::MAX_PARTITIONS as i64),
        ];
        let rows: Vec<(&str, i64)> = table
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                (cells[1], cells[2].parse().unwrap())
            })
            .collect();
        assert_eq!(rows, ours);
    }

    #[test]
    fn stream_ids_are_written_as_the_replay_reads_them() {
        let mut ids = Vec::new();
        push_stream_id(&mut ids, 0, Some((1_796_301_964_785, 0)));
        push_stream_id(&mut ids, 1, None);
        push_stream_id(&mut ids, 2, Some((u64::MAX, 10)));
        assert_eq!(ids, b"1796301964785-0,,18446744073709551615-10");
        let entries = args::ReplayedEntries {
            ids: &ids,
            length: 0,
        };
        let parsed: Vec<_> = entries.ids().map(Result::unwrap).collect();
        assert_eq!(
            parsed,
            [Some((1_796_301_964_785, 0)), None, Some((u64::MAX, 10))]
        );
    }

    #[test]
    fn settle_without_an_id_is_a_hold_expiry_only_when_replayed() {
        assert!(matches!(
            parse_op(b"k", b"SETTLE", &[], true),
            Ok(Op::Expire)
        ));
        assert_eq!(
            parse_op(b"k", b"SETTLE", &[], false).err(),
            Some(ArgError::Arity)
        );
        assert!(matches!(
            parse_op(b"k", b"settle", &[b"t1"], false),
            Ok(Op::Settle { id: b"t1" })
        ));
        assert!(matches!(
            parse_op(b"k", b"EXPIRE", &[], false),
            Ok(Op::Expire)
        ));
    }
}
