//! How a write the buyer is told of is sent and kept (a [`Keeping`]): with its wait when its
//! master's replica is known, else looked at and waited for after it; sent again under its
//! attempt id when the answer is lost; [`Error::NotReplicated`] when no replica acknowledged
//! it in time. The commands of [`crate::key`] send their writes through here.

use crate::durability::{ACK_GRACE, Change, Keep, Keeping, Wait};
use crate::error::{Error, Result};
use crate::link::{Link, after_answer};
use crate::reply::TryReply;
use crate::retry::{Retrier, is_retryable};
use redis::{Value, cmd};
use std::sync::Arc;
use std::time::Duration;

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
                // A wait refused by a master turned replica since the write is retried.
                return Err(if keep.aof && !is_retryable(&e) {
                    aof_refused(&e)
                } else {
                    after_answer(e).into()
                });
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

/// A server that cannot keep [`crate::Durability::Aof`]: no WAITAOF (Redis 7.0), or no AOF.
fn aof_refused(e: &redis::RedisError) -> Error {
    Error::InvalidArgument(format!(
        "Durability::Aof needs WAITAOF (Redis 7.2+, Valkey 8+) and appendonly yes on the \
         master: {e}"
    ))
}

/// `write` (a command with an attempt id) under `retrier`, kept as `keeping` says. A failure
/// sends it again under its attempt id (the same answer; the module marks a repeat so that
/// the next wait covers it) and waits again.
pub(crate) async fn retried_and_kept<L: Link>(
    link: &mut L,
    retrier: &mut Retrier<'_>,
    write: redis::Cmd,
    (key, change): (&str, Change),
    keeping: Keeping<'_>,
) -> Result<i64> {
    keeping.check(link, key).await?;
    loop {
        let sent = keeping
            .send(link, (key, change), &write, retrier.send_budget())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::{Durability, Keep, Replicas};
    use crate::key::try_buy;
    use crate::link::block_on;
    use crate::retry::RetryPolicy;
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

        crate::link::scripted_link_rest!();
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
    fn a_wait_refused_by_a_master_turned_replica_sends_the_purchase_again() {
        let turned = || -> redis::RedisResult<Value> {
            let reply = b"-ERR WAIT cannot be used with replica instances.\r\n";
            match redis::parse_redis_value(reply) {
                Ok(Value::ServerError(e)) => Err(e.into()),
                other => panic!("{other:?}"),
            }
        };
        let replicas = Replicas::default();
        let sent_again = |link: &Scripted| {
            let tries: Vec<_> = link
                .sent
                .iter()
                .filter(|c| c[0] == b"SECKILL.TRY")
                .collect();
            assert_eq!(tries[0], tries[1], "sent again under the same attempt id");
        };
        // The master looked at first, its wait refused: the same attempt again, looked again.
        let mut link = Scripted::new(vec![
            ("SECKILL.TRY", Ok(Value::Int(8))),
            ("INFO", info(WITH_REPLICA)),
            ("WAIT", turned()),
            ("SECKILL.TRY", Ok(Value::Int(8))),
            ("INFO", info(WITH_REPLICA)),
            ("WAIT", Ok(Value::Int(1))),
        ]);
        assert_eq!(buy(&mut link, Durability::Replica, &replicas).unwrap(), 8);
        sent_again(&link);
        // A purchase sent again has its master looked at anew by the next one.
        let mut link = Scripted::new(vec![
            ("SECKILL.TRY", Ok(Value::Int(7))),
            ("INFO", info(WITH_REPLICA)),
            ("WAIT", Ok(Value::Int(1))),
        ]);
        assert_eq!(buy(&mut link, Durability::Replica, &replicas).unwrap(), 7);
        // Its replica known, the write goes with its wait (`query_kept`): refused the same way.
        let mut link = Scripted::new(vec![
            ("SECKILL.TRY", Ok(Value::Int(6))),
            ("WAIT", turned()),
            ("SECKILL.TRY", Ok(Value::Int(6))),
            ("INFO", info(WITH_REPLICA)),
            ("WAIT", Ok(Value::Int(1))),
        ]);
        assert_eq!(buy(&mut link, Durability::Replica, &replicas).unwrap(), 6);
        sent_again(&link);
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
}
