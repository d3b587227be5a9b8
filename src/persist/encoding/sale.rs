//! The sale's encoding: the current layout written, and v2 to v9 read (each version one more
//! field than the last, so one reader takes them all).

use super::sale_v1::decode_sale_v1;
use super::{DecodeError, Decoded, Reader, put_bytes};
use crate::logic::buyers::BuyerRecord;
use crate::logic::buyers::put_varint;
use crate::logic::escrow::{Ledger, Leg, Transfer};
use crate::logic::room::{Rate, RoomConfig, RoomState, Status};
use crate::logic::sale::{Attempt, AttemptKind, Partition, Sale, SaleConfig, SaleTotals};
use std::num::NonZeroU64;

/// v7 to v9: `stock limit hold_ms start_ms end_ms events events_maxlen manifest partition partitions
/// sealed_until replay_clock last_entry_ms last_entry_seq seed restocked refunded orders lent absorbed
/// transfer_count (id kind units [asked] peer [started_ms])* count (user final held expires_at
/// order)*`; integers are varints, `events`, `seed`, ids and peers are length-prefixed bytes,
/// and 0 or empty means "not set". A transfer's kind is 0 (lent, pending: asked, peer and
/// start follow), 1 (lent and settled: asked and peer follow) or 2 (absorbed: the peer
/// follows), in id order; `asked` is LEND's `n`, and a lent record loaded from v3 to v6 keeps
/// 0 (asked) and, settled, the empty peer (those versions did not keep them). Records are
/// in creation order, the gone ones included, so a replica loading this lays its table out
/// as the master's. v8 appends `attempt_count (user kind digest_high digest_low asked
/// units)*`, each buyer's last attempt id (kind 0 TRY, 1 CANCEL), in record order; v9
/// appends the waiting room (see [`put_room`]), which v10 extends.
pub fn encode_sale(sale: &Sale) -> Vec<u8> {
    let config = sale.config();
    let totals = sale.totals();
    let buyers = sale.buyers();
    let ledger = sale.ledger();
    let mut out = Vec::with_capacity(64 + buyers.records() as usize * 16);
    for value in [
        config.stock,
        config.limit,
        config.hold_ms.unwrap_or(0),
        config.start_ms.unwrap_or(0),
        config.end_ms.unwrap_or(0),
    ] {
        put_varint(&mut out, value);
    }
    put_bytes(&mut out, config.events.as_deref().unwrap_or_default());
    put_varint(&mut out, config.events_maxlen.unwrap_or(0));
    let partition = config.partition.as_ref();
    put_bytes(&mut out, partition.map_or(&[], |p| &p.manifest[..]));
    put_varint(&mut out, partition.map_or(0, |p| p.index));
    put_varint(&mut out, partition.map_or(0, |p| p.count));
    put_varint(&mut out, totals.sealed_until_ms);
    put_varint(&mut out, totals.replay_clock_ms);
    put_varint(&mut out, totals.last_entry_id.0);
    put_varint(&mut out, totals.last_entry_id.1);
    put_bytes(&mut out, &totals.seed);
    for value in [
        totals.restocked,
        totals.refunded,
        totals.orders,
        ledger.lent(),
        ledger.absorbed(),
        ledger.len() as u64,
    ] {
        put_varint(&mut out, value);
    }
    for (id, transfer) in ledger.iter() {
        put_bytes(&mut out, id);
        let kind = match transfer.leg {
            Leg::Out { .. } => 0,
            Leg::Settled { .. } => 1,
            Leg::In { .. } => 2,
        };
        put_varint(&mut out, kind);
        put_varint(&mut out, transfer.units);
        let asked = |asked: Option<NonZeroU64>| asked.map_or(0, NonZeroU64::get);
        match &transfer.leg {
            Leg::Out {
                to,
                asked: n,
                started_ms,
            } => {
                put_varint(&mut out, asked(*n));
                put_bytes(&mut out, to);
                put_varint(&mut out, *started_ms);
            }
            Leg::Settled { to, asked: n } => {
                put_varint(&mut out, asked(*n));
                put_bytes(&mut out, to.as_deref().unwrap_or_default());
            }
            Leg::In { from } => put_bytes(&mut out, from),
        }
    }
    put_varint(&mut out, buyers.records());
    for (_, user, record) in buyers.iter() {
        put_bytes(&mut out, user);
        for value in [
            record.final_qty,
            record.held_qty,
            record.expires_at_ms,
            record.order,
        ] {
            put_varint(&mut out, value);
        }
    }
    let attempts: Vec<(&[u8], Attempt)> = sale.attempts().collect();
    put_varint(&mut out, attempts.len() as u64);
    for (user, attempt) in attempts {
        put_bytes(&mut out, user);
        put_varint(&mut out, attempt_kind_code(attempt.kind));
        for value in attempt
            .digest
            .into_iter()
            .chain([attempt.asked, attempt.units])
        {
            put_varint(&mut out, value);
        }
    }
    put_room(&mut out, sale);
    out
}

/// v9's waiting room, after the attempts: `0`, or `1 admit per window closed drawn cohort head
/// next_tick users (user status place)* queue (index)* admitted (index deadline)*`; `admit`
/// and `per` 0 for a room admitted by hand, `next_tick` 0 for none (else the ms plus one),
/// users in join order, the queue and the open windows by a user's index in that order.
/// v10 adds the statuses left (4) and dropped (5), and appends `presence epoch seen_count
/// (seen)*`: PRESENCE (0 for none), what `seen` counts from, and each queue place's last JOIN
/// in ms after it (none without PRESENCE).
fn put_room(out: &mut Vec<u8>, sale: &Sale) {
    let Some(room) = sale.room() else {
        out.push(0);
        return;
    };
    out.push(1);
    let config = room.config();
    let (users, per) = config.rate.map_or((0, 0), |rate| (rate.users, rate.per_ms));
    let state = room.state();
    for value in [
        users,
        per,
        config.window_ms,
        u64::from(state.closed),
        u64::from(state.drawn),
        state.cohort,
        state.head,
        state.next_tick_ms.map_or(0, |ms| ms + 1),
        state.users.len() as u64,
    ] {
        put_varint(out, value);
    }
    for (user, status, place) in &state.users {
        put_bytes(out, user);
        out.push(status.code());
        put_varint(out, u64::from(*place));
    }
    put_varint(out, state.queue.len() as u64);
    for index in &state.queue {
        put_varint(out, u64::from(*index));
    }
    put_varint(out, state.admitted.len() as u64);
    for (index, deadline) in &state.admitted {
        put_varint(out, u64::from(*index));
        put_varint(out, *deadline);
    }
    put_varint(out, config.presence_ms.unwrap_or(0));
    // Only presence counts from the epoch: without it every copy writes the same bytes.
    put_varint(out, config.presence_ms.map_or(0, |_| state.epoch_ms));
    put_varint(out, state.seen.len() as u64);
    for seen in &state.seen {
        put_varint(out, u64::from(*seen));
    }
}

/// v9's and v10's waiting room (see [`put_room`]).
fn read_room(reader: &mut Reader, sale: &mut Sale, version: u32) -> Decoded<()> {
    let present = reader.bytes.get(reader.pos).copied();
    reader.pos += 1;
    match present {
        Some(0) => return Ok(()),
        Some(1) => {}
        _ => return Err(DecodeError("bad waiting room marker")),
    }
    let (users, per, window_ms) = (reader.varint()?, reader.varint()?, reader.varint()?);
    let rate = match (users, per) {
        (0, 0) => None,
        (0, _) | (_, 0) => return Err(DecodeError("bad waiting room rate")),
        (users, per_ms) => Some(Rate { users, per_ms }),
    };
    let flag = |value: u64| match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError("bad waiting room flag")),
    };
    let closed = flag(reader.varint()?)?;
    let drawn = flag(reader.varint()?)?;
    let (cohort, head) = (reader.varint()?, reader.varint()?);
    let next_tick_ms = reader.varint()?.checked_sub(1);
    let index =
        |value: u64| u32::try_from(value).map_err(|_| DecodeError("bad waiting room index"));
    let count = reader.varint()?;
    let count = check_count(reader, count, 3)?;
    let mut state = RoomState {
        closed,
        drawn,
        cohort,
        head,
        next_tick_ms,
        users: Vec::with_capacity(count),
        queue: Vec::new(),
        admitted: Vec::new(),
        epoch_ms: 0,
        seen: Vec::new(),
    };
    for _ in 0..count {
        let user = reader.bytes()?;
        let status = reader
            .bytes
            .get(reader.pos)
            .copied()
            .filter(|&code| version >= 10 || code <= Status::Lapsed.code())
            .and_then(Status::from_code);
        reader.pos += 1;
        let status = status.ok_or(DecodeError("bad waiting room status"))?;
        state.users.push((user, status, index(reader.varint()?)?));
    }
    let count = reader.varint()?;
    let count = check_count(reader, count, 1)?;
    for _ in 0..count {
        state.queue.push(index(reader.varint()?)?);
    }
    let count = reader.varint()?;
    let count = check_count(reader, count, 2)?;
    for _ in 0..count {
        state
            .admitted
            .push((index(reader.varint()?)?, reader.varint()?));
    }
    let mut presence_ms = None;
    if version >= 10 {
        presence_ms = reader.varint().map(|ms| (ms > 0).then_some(ms))?;
        state.epoch_ms = reader.varint()?;
        let count = reader.varint()?;
        let count = check_count(reader, count, 1)?;
        for _ in 0..count {
            let seen = u32::try_from(reader.varint()?)
                .map_err(|_| DecodeError("bad waiting room presence"))?;
            state.seen.push(seen);
        }
    }
    let config = RoomConfig {
        rate,
        window_ms,
        presence_ms,
    };
    sale.set_decoded_room(config, state)
        .map_err(|_| DecodeError("waiting room breaks an invariant"))
}

fn attempt_kind_code(kind: AttemptKind) -> u64 {
    match kind {
        AttemptKind::Try => 0,
        AttemptKind::Cancel => 1,
    }
}

/// v8's attempts: `count (user kind digest_high digest_low asked units)*`, after the buyers.
fn read_attempts(reader: &mut Reader, sale: &mut Sale) -> Decoded<()> {
    let count = reader.varint()?;
    let count = check_count(reader, count, 7)?;
    for _ in 0..count {
        let user = reader.bytes()?;
        let kind = match reader.varint()? {
            0 => AttemptKind::Try,
            1 => AttemptKind::Cancel,
            _ => return Err(DecodeError("bad attempt kind")),
        };
        let attempt = Attempt {
            kind,
            digest: [reader.varint()?, reader.varint()?],
            asked: reader.varint()?,
            units: reader.varint()?,
        };
        sale.set_decoded_attempt(user, attempt)
            .map_err(|_| DecodeError("attempt of no buyer, or twice"))?;
    }
    Ok(())
}

pub fn decode_sale(bytes: &[u8], version: u32) -> Decoded<Sale> {
    let mut reader = Reader { bytes, pos: 0 };
    match version {
        1 => decode_sale_v1(&mut reader),
        2..=10 => decode_sale_v2_to_v10(&mut reader, version),
        _ => Err(DecodeError("unknown sale encoding version")),
    }
}

/// Refuses a record count that could not fit in the payload, so a corrupt count cannot drive
/// a huge reservation.
pub(super) fn check_count(reader: &Reader, count: u64, min_record_bytes: usize) -> Decoded<usize> {
    if count > (reader.bytes.len() / min_record_bytes) as u64 {
        return Err(DecodeError("buyer count larger than the payload"));
    }
    Ok(count as usize)
}

/// Reads one buyer record of some encoding version.
type ReadRecord<'a> = fn(&mut Reader<'a>) -> Decoded<(&'a [u8], BuyerRecord)>;

/// The buyer records of a payload, read one at a time while the sale is rebuilt, so loading
/// never holds a second copy of them; a malformed record stops the reading and is kept.
struct Records<'r, 'a> {
    reader: &'r mut Reader<'a>,
    left: usize,
    read: ReadRecord<'a>,
    error: Option<DecodeError>,
}

impl<'a> Iterator for Records<'_, 'a> {
    type Item = (&'a [u8], BuyerRecord);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 || self.error.is_some() {
            return None;
        }
        match (self.read)(self.reader) {
            Ok(record) => {
                self.left -= 1;
                Some(record)
            }
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }
}

/// Rebuilds the sale from its parts and the `count` records that follow in `reader`.
pub(super) fn rebuilt<'a>(
    reader: &mut Reader<'a>,
    count: usize,
    read: ReadRecord<'a>,
    config: SaleConfig,
    totals: SaleTotals,
    ledger: Ledger,
    version: u32,
) -> Decoded<Sale> {
    // The records' user ids take at most what is left of the payload.
    let user_bytes = reader.bytes.len() - reader.pos;
    let mut records = Records {
        reader,
        left: count,
        read,
        error: None,
    };
    let sale = Sale::from_parts(config, totals, ledger, count, user_bytes, &mut records);
    if let Some(e) = records.error {
        return Err(e);
    }
    let mut sale = sale.map_err(|_| DecodeError("sale breaks an invariant"))?;
    if version >= 8 {
        read_attempts(records.reader, &mut sale)?;
    }
    if version >= 9 {
        read_room(records.reader, &mut sale, version)?;
    }
    records.reader.finish()?;
    Ok(sale)
}

fn read_record_v2<'a>(reader: &mut Reader<'a>) -> Decoded<(&'a [u8], BuyerRecord)> {
    let user = reader.bytes()?;
    let record = BuyerRecord {
        final_qty: reader.varint()?,
        held_qty: reader.varint()?,
        expires_at_ms: reader.varint()?,
        order: reader.varint()?,
    };
    Ok((user, record))
}

/// v3 is v2 with the transfer ledger between the totals and the buyers; v4 is v3 with the
/// stream's MAXLEN after its name; v5 is v4 with the partition and its seal after MAXLEN; v6
/// is v5 with the replay clock and the last entry's ID after the seal; v7 is v6 with a lent
/// transfer's `n` and a settled one's peer; v8 is v7 with the buyers' attempts at the end;
/// v9 is v8 with the waiting room after them; v10 is v9 with the room's presence.
fn decode_sale_v2_to_v10(reader: &mut Reader, version: u32) -> Decoded<Sale> {
    let optional = |value: u64| (value != 0).then_some(value);
    let stock = reader.varint()?;
    let limit = reader.varint()?;
    let hold_ms = optional(reader.varint()?);
    let start_ms = optional(reader.varint()?);
    let end_ms = optional(reader.varint()?);
    let events = reader.bytes()?;
    let events_maxlen = if version >= 4 {
        optional(reader.varint()?)
    } else {
        None
    };
    let (partition, sealed_until_ms) = if version >= 5 {
        let manifest = reader.bytes()?;
        let index = reader.varint()?;
        let count = reader.varint()?;
        let partition = (!manifest.is_empty()).then(|| Partition {
            manifest: manifest.to_vec(),
            index,
            count,
        });
        (partition, reader.varint()?)
    } else {
        (None, 0)
    };
    let (replay_clock_ms, last_entry_id) = if version >= 6 {
        (reader.varint()?, (reader.varint()?, reader.varint()?))
    } else {
        (0, (0, 0))
    };
    let seed = reader
        .bytes()?
        .try_into()
        .map_err(|_| DecodeError("bad order seed"))?;
    let totals = SaleTotals {
        seed,
        restocked: reader.varint()?,
        refunded: reader.varint()?,
        orders: reader.varint()?,
        sealed_until_ms,
        replay_clock_ms,
        last_entry_id,
    };
    let ledger = if version >= 3 {
        decode_ledger(reader, version)?
    } else {
        Ledger::default()
    };
    let count = reader.varint()?;
    let count = check_count(reader, count, 5)?;
    let config = SaleConfig {
        stock,
        limit,
        hold_ms,
        start_ms,
        end_ms,
        events: (!events.is_empty()).then(|| events.to_vec()),
        events_maxlen,
        partition,
        queue: None,
    };
    rebuilt(
        reader,
        count,
        read_record_v2,
        config,
        totals,
        ledger,
        version,
    )
}

fn decode_ledger(reader: &mut Reader, version: u32) -> Decoded<Ledger> {
    let lent = reader.varint()?;
    let absorbed = reader.varint()?;
    let count = reader.varint()?;
    let count = check_count(reader, count, 3)?;
    let mut ledger = Ledger::default();
    let mut previous: Option<&[u8]> = None;
    for _ in 0..count {
        let id = reader.bytes()?;
        // Strictly increasing ids: no duplicate, and the encoding stays canonical.
        if previous.is_some_and(|p| p >= id) || id.is_empty() {
            return Err(DecodeError("transfer ids out of order"));
        }
        previous = Some(id);
        let kind = reader.varint()?;
        let units = reader.varint()?;
        // Before v7 a lent record had no `n`, and a settled one no peer: both stay unknown.
        let since_v7 = version >= 7;
        let leg = match kind {
            0 => {
                let asked = read_asked(reader, since_v7)?;
                Leg::Out {
                    asked,
                    to: reader.bytes()?.to_vec(),
                    started_ms: reader.varint()?,
                }
            }
            1 => {
                let asked = read_asked(reader, since_v7)?;
                let to = if since_v7 { reader.bytes()? } else { &[] };
                Leg::Settled {
                    asked,
                    to: (!to.is_empty()).then(|| to.to_vec()),
                }
            }
            2 => Leg::In {
                from: reader.bytes()?.to_vec(),
            },
            _ => return Err(DecodeError("bad transfer kind")),
        };
        ledger.insert(id, Transfer { units, leg });
    }
    ledger
        .set_decoded_totals(lent, absorbed)
        .map_err(DecodeError)?;
    Ok(ledger)
}

/// A lent transfer's `n` (0 when not recorded), present from v7 on.
fn read_asked(reader: &mut Reader, present: bool) -> Decoded<Option<NonZeroU64>> {
    Ok(if present {
        NonZeroU64::new(reader.varint()?)
    } else {
        None
    })
}
