//! A change to a sale: parsed, applied to the core at one clock, published (counters,
//! notifications, stream entries), replicated, and its expiry timer armed.
//!
//! Which form a change replicates as is `crate::logic::replication::plan`'s decision. Either
//! way the deterministic core turns it into exactly the master's state (window checks, hold
//! expiries, order numbers and stream entry IDs included). INIT replicates its effect (the new
//! sale with its random order seed) as `SECKILL._RESTORE`.

use super::events::{append_entry, count, entry_written, notification, push_stream_id};
use super::expiry::arm_for_holds;
use super::no_sale;
use crate::args::{self, ArgError};
use crate::commands::Args;
use crate::config;
use crate::context::keyspace::{notify, signal_modified, writable_value};
use crate::context::replication::replicate_strings;
use crate::context::reply::integer;
use crate::context::stream::Stream;
use crate::context::strings::{StaticStrings, TempStrings};
use crate::logic::replication::{self, Change, Form};
use crate::logic::room::Place;
use crate::logic::sale::{Sale, TryOutcome, next_entry_id};
use crate::stats;
use crate::types::sale::{SALE_TYPE, SaleValue};
use redis_module::{Context, ContextFlags, NotifyEvent, RedisResult, RedisString, RedisValue};

const SOLD_OUT: i64 = -1;
const OVER_LIMIT: i64 = -2;
const NOT_STARTED: i64 = -3;
const ENDED: i64 = -4;
const DRAINED: i64 = -5;
const NOT_ADMITTED: i64 = -6;

/// A change to a sale, parsed once for the client's command and for its replay.
pub(super) enum Op<'a> {
    Try {
        user: &'a [u8],
        qty: u64,
        attempt: Option<&'a [u8]>,
    },
    Confirm {
        user: &'a [u8],
    },
    Cancel {
        user: &'a [u8],
        qty: Option<u64>,
        attempt: Option<&'a [u8]>,
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
    /// Expire due holds and step the waiting room (the timer's change).
    Expire,
    Join {
        user: &'a [u8],
        with_eta: bool,
    },
    Leave {
        user: &'a [u8],
    },
    Admit {
        n: u64,
    },
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
pub(super) fn parse_op<'a>(
    key: &[u8],
    command: &[u8],
    rest: &[&'a [u8]],
    replayed: bool,
) -> Result<Op<'a>, ArgError> {
    let is = |name: &str| command.eq_ignore_ascii_case(name.as_bytes());
    Ok(if is("TRY") {
        let call = args::try_buy(rest)?;
        Op::Try {
            user: call.user,
            qty: call.qty.unwrap_or(1),
            attempt: call.attempt,
        }
    } else if is("CONFIRM") {
        Op::Confirm {
            user: args::user_only(rest)?,
        }
    } else if is("CANCEL") {
        let call = args::cancel(rest)?;
        Op::Cancel {
            user: call.user,
            qty: call.qty,
            attempt: call.attempt,
        }
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
    } else if is("JOIN") {
        let (user, with_eta) = args::place_call(rest)?;
        Op::Join { user, with_eta }
    } else if is("LEAVE") {
        Op::Leave {
            user: args::user_only(rest)?,
        }
    } else if is("ADMIT") {
        Op::Admit {
            n: args::admit(rest)?,
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
        Op::Try { user, qty, attempt } => {
            let outcome = sale.try_buy_attempt(user, qty, attempt, now_ms)?;
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
                TryOutcome::NotAdmitted => {
                    stats::QUEUE_REJECTIONS.incr();
                    RedisValue::Integer(NOT_ADMITTED)
                }
            }
        }
        Op::Confirm { user } => integer(u64::from(sale.confirm(user, now_ms)?)),
        Op::Cancel { user, qty, attempt } => {
            integer(sale.cancel_attempt(user, qty, attempt, now_ms)?)
        }
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
            sale.expire_due(now_ms);
            RedisValue::Null
        }
        Op::Join { user, with_eta } => {
            let place = sale.join(user, now_ms)?;
            place_reply(sale, Some(place), with_eta, now_ms)?
        }
        Op::Leave { user } => integer(u64::from(sale.leave(user, now_ms)?)),
        Op::Admit { n } => integer(sale.admit(n, now_ms)?),
    })
}

/// JOIN's and POSITION's reply: the place (nil: not in the room), and with `WITHETA`
/// `[place, eta_ms]`.
pub(super) fn place_reply(
    sale: &Sale,
    place: Option<Place>,
    with_eta: bool,
    now_ms: u64,
) -> RedisResult {
    let Some(place) = place else {
        return Ok(RedisValue::Null);
    };
    let position = RedisValue::Integer(place.reply());
    Ok(if with_eta {
        RedisValue::Array(vec![
            position,
            RedisValue::Integer(sale.eta_ms(place, now_ms)?),
        ])
    } else {
        position
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin<'a> {
    /// A client's command on this server.
    Client,
    /// The expiry timer on a master.
    Timer,
    /// `SECKILL._REPLAY` from a master's replication stream or the AOF, with the stream
    /// entries to write (absent in the form of module 0.3 and older, whose XADDs follow it).
    Replay(Option<args::ReplayedEntries<'a>>),
}

/// The words of `_REPLAY`'s commands.
static COMMAND_WORDS: StaticStrings<12> = StaticStrings::new([
    "TRY", "CONFIRM", "CANCEL", "RESTOCK", "LEND", "ABSORB", "SETTLE", "EXPIRE", "SEAL", "JOIN",
    "ADMIT", "LEAVE",
]);

/// Parses and applies one change at `now_ms`, then publishes what changed (counters,
/// notifications, stream entries), replicates it and arms the expiry timer.
pub(super) fn mutate(
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
    // The bare command from a master or the AOF: it ran where it was sent first.
    let bare_copy = origin == Origin::Client
        && ctx
            .get_flags()
            .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING);
    let from_client = origin == Origin::Client && !bare_copy;
    if let (Op::Try { user, .. } | Op::Join { user, .. }, true) = (&op, from_client) {
        args::user_within(user, config::max_user_bytes())?;
    }
    let key = ctx.open_key_writable(key_name);
    let value = writable_value::<SaleValue>(&key, &SALE_TYPE)?.ok_or_else(no_sale)?;
    let config = value.sale.config();
    let clocked = replication::is_clocked(config);
    // A bare copy ran at the clock this sale replicated last (see below), which the copy here
    // holds too.
    let now_ms = if clocked && bare_copy {
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
        let form = replication::plan(&Change {
            replayed: replayed.is_some(),
            from_client: origin == Origin::Client,
            records_clock: matches!(op, Op::Lend(_) | Op::Seal { .. }),
            clocked,
            at_replay_clock: now_ms == sale.totals().replay_clock_ms,
            wrote_entries: stream.is_some(),
            ids_derived,
            trims_stream: sale.config().events_maxlen.is_some(),
        });
        if stream.is_some() {
            value.sale.set_last_entry_id(last_entry_id);
        }
        if form == Form::Verbatim {
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
    // A repeat answered from its attempt record changed nothing, so it propagates nothing of
    // its own, and a WAIT on its connection would count no write: a client that resends a
    // purchase on a new connection and waits for a replica would be told at once that every
    // replica has it. A PING in the stream (as masters send anyway) moves this connection's
    // replication offset past the write it repeats, and changes nothing anywhere.
    if value.sale.take_repeat() && from_client {
        replicate_strings(ctx, c"PING", &[]);
    }
    arm_for_holds(ctx, key_name, value);
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clients' numbers are checked against `clients/protocol.txt` by their own tests;
    /// the module's must be the same.
    #[test]
    fn try_replies_and_the_partition_limit_are_the_client_libraries() {
        use seckill_client::protocol;
        assert_eq!(
            [SOLD_OUT, OVER_LIMIT, NOT_STARTED, ENDED, DRAINED],
            [
                protocol::SOLD_OUT,
                protocol::OVER_LIMIT,
                protocol::NOT_STARTED,
                protocol::ENDED,
                protocol::DRAINED
            ]
        );
        assert_eq!(
            crate::logic::sale::MAX_PARTITIONS,
            u64::from(protocol::MAX_PARTITIONS)
        );
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
