//! The commands on one sale key, written once over a [`Link`] for both kinds of sale (a
//! one-key [`crate::Sale`] and each partition of a [`crate::PartitionedSale`]), sync and async.

use crate::durability::{Change, Keeping};
use crate::error::{Error, Result};
use crate::info::{Buyer, PartitionInfo, Place, SaleEvent, parse_fields};
use crate::keeping::{kept_write, retried_and_kept};
use crate::link::Link;
use crate::protocol::MIN_MODULE_VERSION;
use crate::retry::{Retrier, RetryPolicy};
use redis::{Value, cmd};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// The longest user id, in bytes: the module's `seckill.max-user-bytes` default.
pub const MAX_USER_BYTES: usize = 512;

/// A call's user id and quantity by the crates's argument policy (docs/clients.md,
/// "Arguments"), before anything is sent: a user id of 1 to MAX_USER_BYTES bytes, a quantity
/// (`None`: all, for `cancel`) of 1 to 2^63 - 1.
pub(crate) fn check_call(user: &[u8], qty: Option<u64>) -> Result<()> {
    if user.is_empty() || user.len() > MAX_USER_BYTES {
        return Err(Error::InvalidArgument(format!(
            "a user id must be 1 to {MAX_USER_BYTES} bytes, got {}",
            user.len()
        )));
    }
    match qty {
        Some(qty) if qty == 0 || qty > i64::MAX as u64 => Err(Error::InvalidArgument(format!(
            "qty must be an integer between 1 and {}, got {qty}",
            i64::MAX
        ))),
        _ => Ok(()),
    }
}

/// The longest attempt id, in bytes: the module's limit.
pub(crate) const MAX_ATTEMPT_ID_BYTES: usize = 64;

/// An attempt id given to send a call again (`None`: a new call).
pub(crate) fn check_attempt_id(attempt: Option<&str>) -> Result<()> {
    match attempt {
        Some(id) if id.is_empty() || id.len() > MAX_ATTEMPT_ID_BYTES => {
            Err(Error::InvalidArgument(format!(
                "an attempt id must be 1 to {MAX_ATTEMPT_ID_BYTES} bytes, got {}",
                id.len()
            )))
        }
        _ => Ok(()),
    }
}

/// `SECKILL.TRY key user qty ID attempt` under `retrier`, kept as `keeping` says: the
/// command's code, or [`Error::NotReplicated`]. A wait that failed sends the purchase again
/// under its attempt id (the same answer) and waits again.
/// (A function that returns the purchase's future, not an `async fn`: its arguments, in the
/// command now, are not kept in the future a second time.)
pub(crate) fn try_buy<L: Link>(
    link: &mut L,
    retrier: &mut Retrier<'_>,
    (key, user, qty): (&str, &[u8], u64),
    attempt: &str,
    keeping: Keeping<'_>,
) -> impl Future<Output = Result<i64>> {
    // Sized once: a command grown an argument at a time reallocates on the way (most of a
    // purchase's allocations, `make bench`, "Durability").
    const NAME: &str = "SECKILL.TRY";
    let room = NAME.len() + key.len() + user.len() + 20 + "ID".len() + attempt.len();
    let mut try_cmd = redis::Cmd::with_capacity(6, room);
    try_cmd
        .arg(NAME)
        .arg(key)
        .arg(user)
        .arg(qty)
        .arg("ID")
        .arg(attempt);
    retried_and_kept(link, retrier, try_cmd, (key, Change::Wrote), keeping)
}

/// `SECKILL.CANCEL key user [qty] ID attempt`, retried under `policy`, kept as `keeping`
/// says when units went back: the units returned.
pub(crate) async fn cancel<L: Link>(
    link: &mut L,
    policy: &RetryPolicy,
    (key, user, qty): (&str, &[u8], Option<u64>),
    keeping: Keeping<'_>,
) -> Result<u64> {
    let attempt = new_attempt_id();
    let mut cancel = cmd("SECKILL.CANCEL");
    cancel.arg(key).arg(user);
    if let Some(qty) = qty {
        cancel.arg(qty);
    }
    cancel.arg("ID").arg(&attempt);
    let retrier = &mut Retrier::new("cancel", policy, &attempt);
    let returned = retried_and_kept(link, retrier, cancel, (key, Change::Units), keeping).await?;
    Ok(returned.max(0) as u64)
}

pub(crate) async fn bought<L: Link>(link: &mut L, key: &str, user: &[u8]) -> Result<u64> {
    Ok(link.query(cmd("SECKILL.BOUGHT").arg(key).arg(user)).await?)
}

/// `SECKILL.JOIN`: where the user stands (see [`crate::FlashSale::join`]).
pub(crate) async fn join<L: Link>(link: &mut L, key: &str, user: &[u8]) -> Result<i64> {
    Ok(link.query(cmd("SECKILL.JOIN").arg(key).arg(user)).await?)
}

pub(crate) async fn position<L: Link>(
    link: &mut L,
    key: &str,
    user: &[u8],
    replica: bool,
) -> Result<Option<i64>> {
    let position = cmd("SECKILL.POSITION").arg(key).arg(user).clone();
    if !replica {
        return Ok(link.query(&position).await?);
    }
    let mut replies = replica_reads(link, &[&position]).await?;
    Ok(redis::from_redis_value(replies.swap_remove(0))?)
}

/// Reads that a replica of their key's master may answer (a handle's `read_from_replicas`):
/// `reads` after `READONLY`, in one pipeline. The crate's async cluster session sends such a
/// pipeline to a replica of the slot's master, and to the master when it knows none or the
/// replica cannot answer; any other connection sends it to its own server, where `READONLY`
/// changes nothing (a cluster's master) or is refused, which is skipped (one server).
async fn replica_reads<L: Link>(link: &mut L, reads: &[&redis::Cmd]) -> Result<Vec<Value>> {
    let mut pipe = redis::pipe();
    pipe.cmd("READONLY");
    for read in reads {
        pipe.add_command((*read).clone());
    }
    pipe.ignore_errors();
    let replies: Vec<redis::RedisResult<Value>> = link.query_pipe(&pipe).await?;
    replies
        .into_iter()
        .skip(1)
        .map(|reply| reply.map_err(Error::from))
        .collect()
}

/// `SECKILL.LEAVE`: sent again as it is (leaving again changes nothing); whether the user was
/// in the room.
pub(crate) async fn leave<L: Link>(link: &mut L, key: &str, user: &[u8]) -> Result<bool> {
    let left: i64 = link.query(cmd("SECKILL.LEAVE").arg(key).arg(user)).await?;
    Ok(left == 1)
}

/// `SECKILL.POSITION ... WITHETA`, and for a waiting user whether the places are drawn (START
/// passed, by the server's clock): `None` when the user is not in the room.
/// On a replica of the key's master with `replica`, the three reads in one pipeline (see
/// [`replica_reads`]): the replica's clock then.
pub(crate) async fn place<L: Link>(
    link: &mut L,
    key: &str,
    user: &[u8],
    replica: bool,
) -> Result<Option<Place>> {
    let position = cmd("SECKILL.POSITION")
        .arg(key)
        .arg(user)
        .arg("WITHETA")
        .clone();
    let info = cmd("SECKILL.INFO").arg(key).clone();
    let (told, drawn_if_waiting) = if replica {
        let time = cmd("TIME");
        let [told, info, time]: [Value; 3] = replica_reads(link, &[&position, &info, &time])
            .await?
            .try_into()
            .map_err(|_| Error::Redis((redis::ErrorKind::Parse, "a reply short").into()))?;
        let (seconds, micros): (i64, i64) = redis::from_redis_value(time)?;
        let drawn = drawn_at(parse_fields(info)?.remove("start"), seconds, micros);
        (
            redis::from_redis_value::<Option<(i64, i64)>>(told)?,
            Some(drawn),
        )
    } else {
        (link.query(&position).await?, None)
    };
    let Some((position, eta_ms)) = told else {
        return Ok(None);
    };
    let drawn = match (position > 0, drawn_if_waiting) {
        (false, _) => true,
        (true, Some(drawn)) => drawn,
        (true, None) => {
            let reply: Value = link.query(&info).await?;
            started(link, parse_fields(reply)?.remove("start")).await?
        }
    };
    Ok(Some(Place {
        position,
        eta_ms,
        drawn,
    }))
}

/// Whether a room's places are drawn, from INFO's `start`: no START, or the server's clock
/// past it (the master's timer draws them then, or within its ms).
pub(crate) async fn started<L: Link>(link: &mut L, start: Option<Value>) -> Result<bool> {
    if !matches!(start, Some(Value::Int(_))) {
        return Ok(true); // no START: no clock to ask
    }
    let (seconds, micros): (i64, i64) = link.query(&cmd("TIME")).await?;
    Ok(drawn_at(start, seconds, micros))
}

/// Whether a room's places are drawn at the server's `TIME`, from INFO's `start`.
fn drawn_at(start: Option<Value>, seconds: i64, micros: i64) -> bool {
    let Some(Value::Int(start)) = start else {
        return true;
    };
    seconds * 1000 + micros / 1000 >= start
}

pub(crate) async fn admit<L: Link>(link: &mut L, key: &str, n: u64) -> Result<u64> {
    Ok(link.query(cmd("SECKILL.ADMIT").arg(key).arg(n)).await?)
}

/// `SECKILL.CONFIRM`, kept as `keeping` says when a hold became final. Sent once: sent again
/// after a lost answer it would answer 0 for the hold the first made final.
pub(crate) async fn confirm<L: Link>(
    link: &mut L,
    key: &str,
    user: &[u8],
    keeping: Keeping<'_>,
) -> Result<bool> {
    let confirm = cmd("SECKILL.CONFIRM").arg(key).arg(user).clone();
    let confirmed: i64 = kept_write(link, &confirm, (key, Change::Confirmed), keeping).await?;
    Ok(confirmed == 1)
}

pub(crate) async fn restock<L: Link>(
    link: &mut L,
    key: &str,
    units: u64,
    keeping: Keeping<'_>,
) -> Result<()> {
    let restock = cmd("SECKILL.RESTOCK").arg(key).arg(units).clone();
    let _: i64 = kept_write(link, &restock, (key, Change::Wrote), keeping).await?;
    Ok(())
}

pub(crate) async fn info<L: Link>(link: &mut L, key: &str) -> Result<PartitionInfo> {
    let reply: Value = link.query(cmd("SECKILL.INFO").arg(key)).await?;
    PartitionInfo::from_fields(&parse_fields(reply)?)
}

/// The sale's event stream, as `SECKILL.INFO` names it (`None`: made without EVENTS).
pub(crate) async fn event_stream<L: Link>(link: &mut L, key: &str) -> Result<Option<String>> {
    let reply: Value = link.query(cmd("SECKILL.INFO").arg(key)).await?;
    match parse_fields(reply)?.remove("events") {
        None | Some(Value::Nil) => Ok(None),
        Some(stream) => Ok(Some(redis::from_redis_value(stream)?)),
    }
}

/// Every buyer of `key` (a `SECKILL.BUYERS` scan), appended to `all`.
pub(crate) async fn buyers<L: Link>(
    link: &mut L,
    key: &str,
    partition: u32,
    all: &mut Vec<Buyer>,
) -> Result<()> {
    let mut cursor = "0".to_string();
    loop {
        let (next, rows): (String, Vec<Value>) = link
            .query(
                cmd("SECKILL.BUYERS")
                    .arg(key)
                    .arg(&cursor)
                    .arg("COUNT")
                    .arg(1_000),
            )
            .await?;
        for row in rows.chunks(3) {
            all.push(Buyer::from_row(partition, row)?);
        }
        if next == "0" {
            return Ok(());
        }
        cursor = next;
    }
}

/// Creates the consumer group `group` on `stream` (reading from the start); a group that
/// exists already is kept.
pub(crate) async fn create_group<L: Link>(link: &mut L, stream: &str, group: &str) -> Result<()> {
    let created: redis::RedisResult<()> = link
        .query(
            cmd("XGROUP")
                .arg("CREATE")
                .arg(stream)
                .arg(group)
                .arg("0")
                .arg("MKSTREAM"),
        )
        .await;
    match created {
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        other => Ok(other?),
    }
}

/// Up to `count` new events of `stream` for `consumer` of `group`, appended to `events`.
pub(crate) async fn read_group<L: Link>(
    link: &mut L,
    partition: u32,
    stream: &str,
    (group, consumer, count): (&str, &str, usize),
    events: &mut Vec<SaleEvent>,
) -> Result<()> {
    let reply: Option<redis::streams::StreamReadReply> = link
        .query(
            cmd("XREADGROUP")
                .arg("GROUP")
                .arg(group)
                .arg(consumer)
                .arg("COUNT")
                .arg(count)
                .arg("STREAMS")
                .arg(stream)
                .arg(">"),
        )
        .await?;
    for key in reply.map(|r| r.keys).unwrap_or_default() {
        for entry in key.ids {
            events.push(SaleEvent::from_entry(partition, stream, entry)?);
        }
    }
    Ok(())
}

pub(crate) async fn ack<L: Link>(link: &mut L, group: &str, event: &SaleEvent) -> Result<bool> {
    let acked: i64 = link
        .query(cmd("XACK").arg(&event.stream).arg(group).arg(&event.id))
        .await?;
    Ok(acked == 1)
}

/// [`Error::ModuleMissing`] unless the server has the seckill module loaded, and
/// [`Error::ModuleTooOld`] unless it is at least [`MIN_MODULE_VERSION`] (`INFO seckill`'s
/// `seckill_version`); nothing written. A cluster connection asks every node, and the oldest
/// answer counts.
pub(crate) async fn require_module<L: Link>(link: &mut L) -> Result<()> {
    let reply: Value = link.query(cmd("INFO").arg("seckill")).await?;
    let texts: Vec<String> = match reply {
        Value::Map(per_node) => per_node
            .into_iter()
            .map(|(_, info)| redis::from_redis_value(info))
            .collect::<std::result::Result<_, _>>()?,
        one => vec![redis::from_redis_value(one)?],
    };
    let versions: Option<Vec<i64>> = texts.iter().map(|text| module_version(text)).collect();
    match versions.and_then(|v| v.into_iter().min()) {
        None => Err(Error::ModuleMissing),
        Some(found) if found < MIN_MODULE_VERSION => Err(Error::ModuleTooOld { found }),
        Some(_) => Ok(()),
    }
}

/// `seckill_version` from one node's `INFO seckill`.
fn module_version(info: &str) -> Option<i64> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("seckill_version:"))
        .and_then(|version| version.trim().parse().ok())
}

/// A purchase's or a cancel's attempt id: 32 random hex digits.
pub(crate) fn new_attempt_id() -> String {
    let mut id = String::with_capacity(32);
    push_hex(&mut id, random_u64());
    push_hex(&mut id, random_u64());
    id
}

/// `n`'s 16 hex digits (`format!` would grow its string as it writes them).
fn push_hex(to: &mut String, n: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..16).rev() {
        to.push(char::from(DIGITS[(n >> (shift * 4)) as usize & 0xf]));
    }
}

/// 16 random hex digits, from the standard library's randomly keyed hasher (keys drawn from
/// the OS once per thread, a new pair per `RandomState`) over a count: no system call per id
/// (`std::process::id()` was one: 3 % of the async purchase path's CPU in a profile).
pub(crate) fn random_id() -> String {
    let mut id = String::with_capacity(16);
    push_hex(&mut id, random_u64());
    id
}

fn random_u64() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.finish()
}

/// The stream `create` gives a one-key sale made with events: in the key's hash slot (the
/// module writes it in the same command), so it keeps the key's hash tag or makes the key one.
/// `None` for a key with braces but no hash tag, whose slot no other name shares for sure.
pub(crate) fn events_stream_of(key: &str) -> Option<String> {
    let tag = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .map(|len| len > 0);
    match tag {
        Some(true) => Some(format!("{key}:events")),
        None if !key.contains(['{', '}']) => Some(format!("{{{key}}}:events")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random() {
        let ids: std::collections::HashSet<String> = (0..100).map(|_| random_id()).collect();
        assert_eq!(ids.len(), 100);
        assert_eq!(new_attempt_id().len(), 32);
        for n in [0, 1, 0xabc, u64::MAX, 0x0123_4567_89ab_cdef] {
            let mut hex = String::new();
            push_hex(&mut hex, n);
            assert_eq!(hex, format!("{n:016x}"));
        }
    }

    #[test]
    fn the_module_version_is_read_from_info() {
        let info = "# seckill\r\nseckill_version:700\r\nseckill_git_revision:abc\r\n";
        assert_eq!(module_version(info), Some(700));
        assert_eq!(module_version("# Server\r\nredis_version:7.0.15\r\n"), None);
        assert_eq!(module_version(""), None);
    }

    #[test]
    fn an_events_stream_shares_its_keys_slot() {
        let stream = |key| events_stream_of(key);
        assert_eq!(stream("sale:wine").unwrap(), "{sale:wine}:events");
        assert_eq!(stream("{shop}:wine").unwrap(), "{shop}:wine:events");
        // `{}` is no hash tag (Redis hashes the whole key), nor is a lone brace.
        assert_eq!(stream("a{}b"), None);
        assert_eq!(stream("a}b"), None);
    }
}
