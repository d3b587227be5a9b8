//! The commands on one sale key, written once over a [`Link`] for both kinds of sale (a
//! one-key [`crate::Sale`] and each partition of a [`crate::PartitionedSale`]), sync and async.

use crate::durability::{ACK_GRACE, Change, Keep, Keeping, Wait};
use crate::error::{Error, Result};
use crate::info::{Buyer, PartitionInfo, Place, SaleEvent, parse_fields};
use crate::link::{Link, after_answer};
use crate::protocol::MIN_MODULE_VERSION;
use crate::reply::TryReply;
use crate::retry::{Retrier, RetryPolicy, is_retryable};
use redis::{Value, cmd};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

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

impl Keeping<'_> {
    /// Before the first write on `key` under [`crate::Durability::Aof`]: `InvalidArgument`
    /// unless its master has WAITAOF and an AOF, nothing written. (A read of the key first,
    /// so that the check goes where the write will: the cluster sessions send it there.)
    pub async fn check<L: Link>(&self, link: &mut L, key: &str) -> Result<()> {
        if !self.keep.is_some_and(|keep| keep.aof) || self.replicas.has_aof(key) {
            return Ok(());
        }
        // Boxed (rare): its calls' futures are not carried in every write's.
        Box::pin(self.check_aof(link, key)).await
    }

    async fn check_aof<L: Link>(&self, link: &mut L, key: &str) -> Result<()> {
        let _: Value = link.query(cmd("EXISTS").arg(key)).await?;
        match link
            .query::<Value>(cmd("WAITAOF").arg(1).arg(0).arg(1))
            .await
        {
            Ok(_) => {
                self.replicas.learn_aof(key);
                Ok(())
            }
            Err(e) if !is_retryable(&e) => Err(aof_refused(&e)),
            Err(e) => Err(e.into()),
        }
    }

    /// The wait a write on `key` is sent with, when its master is known to have a replica
    /// and nothing calls for a look first (then `keep` looks after the write).
    pub fn ready_wait(&self, key: &str) -> Option<(Keep, Arc<Wait>)> {
        let keep = self.keep?;
        if !self.replicas.ready(key) {
            return None;
        }
        Some((keep, self.waits.of(keep)?))
    }

    /// Whether a write on `key` sent with its wait (`ready_wait`) is kept: `answer`, the
    /// wait's (`Nil` when `reply` changed nothing), says so.
    pub fn judge(
        &self,
        key: &str,
        (change, keep): (Change, Keep),
        reply: &Value,
        answer: &Value,
    ) -> bool {
        !change.in_reply(reply) || self.acknowledged(key, keep, answer, true)
    }

    /// Whether `answer`, a wait's on `key`'s master (which has a replica to wait for when
    /// `replica`), says the write is kept; a master that did not keep it is looked at again at
    /// the next write.
    fn acknowledged(&self, key: &str, keep: Keep, answer: &Value, replica: bool) -> bool {
        let kept = keep.kept(answer, replica);
        if !kept {
            self.replicas.forget(key);
        }
        kept
    }

    /// `write` on `key`, kept: its reply, and whether it is kept (sent with its wait when
    /// the master's replica is known, else looked at and waited for after it). A failure
    /// after the write answered may have run it, whatever it says (`after_answer`).
    async fn send<L: Link>(
        &self,
        link: &mut L,
        (key, change): (&str, Change),
        write: &redis::Cmd,
        write_budget: Duration,
    ) -> Result<(Value, bool)> {
        if let Some((keep, wait)) = self.ready_wait(key) {
            let budgets = (write_budget, keep.timeout + ACK_GRACE);
            let (reply, answer) = link
                .query_kept(write, &wait, change.test(), budgets)
                .await?;
            if let Value::ServerError(e) = &answer {
                self.replicas.forget(key);
                let e = redis::RedisError::from(e.clone());
                return Err(if keep.aof { aof_refused(&e) } else { e.into() });
            }
            let kept = self.judge(key, (change, keep), &reply, &answer);
            return Ok((reply, kept));
        }
        let reply: Value = link.query_within(write, write_budget).await?;
        // Boxed: the look and the wait after a write are rare (a master not looked at yet),
        // and their futures would be carried in every write's.
        let kept = match Box::pin(self.keep(link, key, change, &reply)).await {
            Ok(kept) => kept,
            Err(Error::Redis(e)) => return Err(after_answer(e).into()),
            Err(e) => return Err(e),
        };
        Ok((reply, kept))
    }

    /// After a write on `key` answered `reply` on `link`'s connection: `Ok(true)` when it is
    /// kept or there is nothing to wait for (it changed nothing, or its master has no replica
    /// to wait for), `Ok(false)` when no replica acknowledged it in time (then the next write
    /// looks at the master again: its replica may be gone for good, or the key on another
    /// master since; the same history keeps waiting for the replica). A failure of the
    /// look or of the wait is the caller's (the write sent again under its attempt id, whose
    /// repeat the module marks so that the next wait covers it, or reported).
    pub async fn keep<L: Link>(
        &self,
        link: &mut L,
        key: &str,
        change: Change,
        reply: &Value,
    ) -> Result<bool> {
        let Some(keep) = self.keep else {
            return Ok(true);
        };
        if !change.in_reply(reply) {
            return Ok(true);
        }
        let forget = |e| {
            self.replicas.forget(key);
            e
        };
        if self.replicas.needs_look(key) {
            let info: Value = link
                .query(cmd("INFO").arg("replication"))
                .await
                .map_err(forget)?;
            self.replicas.learn(key, &info);
        }
        let replica = self.replicas.known(key);
        let Some(wait) = keep.command(replica) else {
            return Ok(true);
        };
        let answer: Value = match link.query_within(&wait, keep.timeout + ACK_GRACE).await {
            Ok(answer) => answer,
            Err(e) if keep.aof && !is_retryable(&e) => return Err(aof_refused(&e)),
            Err(e) => return Err(forget(e).into()),
        };
        Ok(self.acknowledged(key, keep, &answer, replica))
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

/// A server that cannot keep [`crate::Durability::Aof`]: no WAITAOF (Redis 7.0), or no AOF.
fn aof_refused(e: &redis::RedisError) -> Error {
    Error::InvalidArgument(format!(
        "Durability::Aof needs WAITAOF (Redis 7.2+, Valkey 8+) and appendonly yes on the \
         master: {e}"
    ))
}

/// `SECKILL.TRY key user qty ID attempt` under `retrier`, kept as `keeping` says: the
/// command's code, or [`Error::NotReplicated`]. A wait that failed sends the purchase again
/// under its attempt id (the same answer) and waits again.
pub(crate) async fn try_buy<L: Link>(
    link: &mut L,
    retrier: &mut Retrier<'_>,
    (key, user, qty): (&str, &[u8], u64),
    attempt: &str,
    keeping: Keeping<'_>,
) -> Result<i64> {
    let mut try_cmd = cmd("SECKILL.TRY");
    try_cmd.arg(key).arg(user).arg(qty).arg("ID").arg(attempt);
    retried_and_kept(link, retrier, &try_cmd, (key, Change::Wrote), keeping).await
}

/// `write` (a command with an attempt id) under `retrier`, kept as `keeping` says. A failure
/// sends it again under its attempt id (the same answer; the module marks a repeat so that
/// the next wait covers it) and waits again.
pub(crate) async fn retried_and_kept<L: Link>(
    link: &mut L,
    retrier: &mut Retrier<'_>,
    write: &redis::Cmd,
    (key, change): (&str, Change),
    keeping: Keeping<'_>,
) -> Result<i64> {
    keeping.check(link, key).await?;
    loop {
        let sent = keeping
            .send(link, (key, change), write, retrier.send_budget())
            .await;
        if sent.is_err() || retrier.retried() {
            // A lost answer may have been a failover: the next master's replicas are looked
            // at anew (its history is another).
            keeping.replicas.forget(key);
        }
        match sent {
            Ok((reply, kept)) => {
                let reply: i64 = redis::from_redis_value(reply)?;
                if kept {
                    return Ok(reply);
                }
                return Err(Error::NotReplicated {
                    reply,
                    attempt_id: Some(retrier.attempt_id().to_string()),
                });
            }
            Err(Error::Redis(e)) if is_retryable(&e) => {
                let wait = retrier.backoff(e)?;
                link.sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `write`, sent once (it has no attempt id), kept as `keeping` says: its reply, or
/// [`Error::NotReplicated`].
pub(crate) async fn kept_write<L: Link, T: redis::FromRedisValue>(
    link: &mut L,
    write: &redis::Cmd,
    (key, change): (&str, Change),
    keeping: Keeping<'_>,
) -> Result<T> {
    keeping.check(link, key).await?;
    let budget = link.bound();
    let (reply, kept) = keeping
        .send(link, (key, change), write, budget)
        .await
        .inspect_err(|_| keeping.replicas.forget(key))?;
    if !kept {
        let reply = match reply {
            Value::Int(n) => n,
            _ => 0,
        };
        return Err(Error::NotReplicated {
            reply,
            attempt_id: None,
        });
    }
    Ok(redis::from_redis_value(reply)?)
}

/// `WAIT replicas timeout_ms` after a purchase: how many replicas acknowledged it. A purchase
/// that was retried may have been made on a connection lost since (or on a master since gone),
/// and after a lost connection nobody can say: such a purchase counts as acknowledged by none.
pub(crate) async fn acknowledged<L: Link>(
    link: &mut L,
    retried: bool,
    replicas: u64,
    timeout_ms: u64,
) -> Result<u64> {
    if retried {
        return Ok(0);
    }
    match link.query(cmd("WAIT").arg(replicas).arg(timeout_ms)).await {
        Err(e) if is_retryable(&e) => Ok(0),
        other => Ok(other?),
    }
}

/// A purchase's reply (and whether it had to be sent again) with how many replicas
/// acknowledged it within `(replicas, timeout_ms)`: see [`acknowledged`].
pub(crate) async fn with_acknowledgement<L: Link>(
    link: &mut L,
    (reply, retried): (TryReply, bool),
    (replicas, timeout_ms): (u64, u64),
) -> Result<(TryReply, u64)> {
    Ok((
        reply,
        acknowledged(link, retried, replicas, timeout_ms).await?,
    ))
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
    let returned = retried_and_kept(link, retrier, &cancel, (key, Change::Units), keeping).await?;
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
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// 16 random hex digits, from the standard library's randomly keyed hasher (keys drawn from
/// the OS once per thread, a new pair per `RandomState`) over a count: no system call per id
/// (`std::process::id()` was one: 3 % of the async purchase path's CPU in a profile).
pub(crate) fn random_id() -> String {
    format!("{:016x}", random_u64())
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
    use crate::durability::{Durability, Keep, Replicas};
    use crate::link::block_on;
    use std::collections::VecDeque;
    use std::time::Duration;

    /// A link that answers each command from a script (the command's name, then its answer)
    /// and records what was sent.
    struct Scripted {
        script: VecDeque<(&'static str, redis::RedisResult<Value>)>,
        sent: Vec<Vec<Vec<u8>>>,
    }

    impl Scripted {
        fn new(script: Vec<(&'static str, redis::RedisResult<Value>)>) -> Scripted {
            Scripted {
                script: script.into(),
                sent: Vec::new(),
            }
        }

        fn names(&self) -> Vec<String> {
            let name = |args: &Vec<Vec<u8>>| String::from_utf8_lossy(&args[0]).into_owned();
            self.sent.iter().map(name).collect()
        }
    }

    impl Link for Scripted {
        fn query<T: redis::FromRedisValue + Send>(
            &mut self,
            cmd: &redis::Cmd,
        ) -> impl std::future::Future<Output = redis::RedisResult<T>> + Send {
            let args: Vec<Vec<u8>> = crate::routing::command_args(cmd)
                .into_iter()
                .map(<[u8]>::to_vec)
                .collect();
            let (name, answer) = self.script.pop_front().expect("a scripted answer");
            assert!(
                args[0].eq_ignore_ascii_case(name.as_bytes()),
                "sent {args:?}, expected {name}"
            );
            self.sent.push(args);
            std::future::ready(answer.and_then(|value| Ok(T::from_redis_value(value)?)))
        }

        fn sleep(&mut self, _: Duration) -> impl std::future::Future<Output = ()> + Send {
            std::future::ready(())
        }

        fn query_pipe<T: redis::FromRedisValue + Send>(
            &mut self,
            _: &redis::Pipeline,
        ) -> impl std::future::Future<Output = redis::RedisResult<T>> + Send {
            let none = (
                redis::ErrorKind::UnexpectedReturnType,
                "no pipeline in these scripts",
            );
            std::future::ready(Err(none.into()))
        }

        fn nap<'w>(
            &mut self,
            _: &'w crate::waiting::Wake,
            _: u64,
            _: Duration,
        ) -> impl std::future::Future<Output = ()> + Send + 'w {
            std::future::ready(())
        }

        fn query_kept(
            &mut self,
            write: &redis::Cmd,
            wait: &Wait,
            changed: fn(&Value) -> bool,
            budgets: (Duration, Duration),
        ) -> impl std::future::Future<Output = redis::RedisResult<(Value, Value)>> + Send {
            crate::link::one_then_the_other(self, write, wait, changed, budgets)
        }
    }

    const WITH_REPLICA: &str =
        "role:master\r\nslave0:ip=127.0.0.1,port=1,state=online\r\nmaster_replid:aaa\r\n";
    const WITHOUT: &str = "role:master\r\nconnected_slaves:0\r\nmaster_replid:aaa\r\n";

    fn info(text: &str) -> redis::RedisResult<Value> {
        Ok(Value::BulkString(text.as_bytes().to_vec()))
    }

    fn buy(link: &mut Scripted, durability: Durability, replicas: &Replicas) -> Result<i64> {
        let policy = RetryPolicy {
            deadline: Duration::from_secs(5),
            ..RetryPolicy::default()
        };
        let mut retrier = Retrier::new("test", &policy, "a1");
        let keep = Keep::of(durability, Duration::from_millis(100));
        let waits = crate::durability::Waits::default();
        let keeping = Keeping {
            keep,
            replicas,
            waits: &waits,
        };
        block_on(try_buy(link, &mut retrier, ("s", b"u", 1), "a1", keeping))
    }

    #[test]
    fn a_purchase_waits_for_a_replica_only_when_it_bought_and_one_is_known() {
        let replicas = Replicas::default();
        // Master: nothing waited for.
        let mut link = Scripted::new(vec![("SECKILL.TRY", Ok(Value::Int(9)))]);
        assert_eq!(buy(&mut link, Durability::Master, &replicas).unwrap(), 9);
        // A refusal changed nothing: no look, no wait.
        let mut link = Scripted::new(vec![("SECKILL.TRY", Ok(Value::Int(-1)))]);
        assert_eq!(buy(&mut link, Durability::Replica, &replicas).unwrap(), -1);
        // Bought: the master is looked at once, then waited for.
        let mut link = Scripted::new(vec![
            ("SECKILL.TRY", Ok(Value::Int(8))),
            ("INFO", info(WITH_REPLICA)),
            ("WAIT", Ok(Value::Int(1))),
        ]);
        assert_eq!(buy(&mut link, Durability::Replica, &replicas).unwrap(), 8);
        let mut link = Scripted::new(vec![
            ("SECKILL.TRY", Ok(Value::Int(7))),
            ("WAIT", Ok(Value::Int(1))),
        ]);
        assert_eq!(buy(&mut link, Durability::Replica, &replicas).unwrap(), 7);
        assert_eq!(link.names(), ["SECKILL.TRY", "WAIT"], "no second look");
    }

    #[test]
    fn no_acknowledgement_is_not_replicated_and_a_lost_wait_sends_the_purchase_again() {
        let replicas = Replicas::default();
        let mut link = Scripted::new(vec![
            ("SECKILL.TRY", Ok(Value::Int(8))),
            ("INFO", info(WITH_REPLICA)),
            ("WAIT", Ok(Value::Int(0))),
        ]);
        match buy(&mut link, Durability::Replica, &replicas) {
            Err(Error::NotReplicated {
                reply: 8,
                attempt_id,
            }) => {
                assert_eq!(attempt_id.as_deref(), Some("a1"));
            }
            other => panic!("{other:?}"),
        }
        // The replica's link is down now (INFO lists none): the same history still waits.
        let lost: redis::RedisError =
            std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset").into();
        let mut link = Scripted::new(vec![
            ("SECKILL.TRY", Ok(Value::Int(8))),
            ("INFO", info(WITHOUT)),
            ("WAIT", Err(lost)),
            ("SECKILL.TRY", Ok(Value::Int(8))),
            ("INFO", info(WITHOUT)),
            ("WAIT", Ok(Value::Int(1))),
        ]);
        assert_eq!(buy(&mut link, Durability::Replica, &replicas).unwrap(), 8);
        assert_eq!(
            link.sent[0], link.sent[3],
            "sent again under the same attempt id"
        );
    }

    #[test]
    fn a_master_without_replica_is_not_waited_for_and_looked_at_once_a_second_at_most() {
        let replicas = Replicas::default();
        let mut link = Scripted::new(vec![
            ("SECKILL.TRY", Ok(Value::Int(9))),
            ("INFO", info(WITHOUT)),
        ]);
        assert_eq!(buy(&mut link, Durability::Replica, &replicas).unwrap(), 9);
        let mut link = Scripted::new(vec![("SECKILL.TRY", Ok(Value::Int(8)))]);
        assert_eq!(buy(&mut link, Durability::Replica, &replicas).unwrap(), 8);
        assert_eq!(
            link.names(),
            ["SECKILL.TRY"],
            "looked at once a second at most"
        );
    }

    #[test]
    fn ids_are_random() {
        let ids: std::collections::HashSet<String> = (0..100).map(|_| random_id()).collect();
        assert_eq!(ids.len(), 100);
        assert_eq!(new_attempt_id().len(), 32);
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
