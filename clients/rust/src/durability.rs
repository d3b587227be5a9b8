//! When a write is told as done: durability. A handle's [`Durability`] says what a buyer's
//! "bought" (a purchase, a cancel's units back, a confirm, a restock, a partition's loan)
//! survives. The Python package's `_durability` module has the same rules.
//!
//! A write no replica acknowledged within the acknowledgement timeout is
//! [`crate::Error::NotReplicated`]. A master with no replica to wait for ([`Replicas`]) is
//! answered as [`Durability::Master`] is: nobody can take a write away from it through a
//! failover.

use redis::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a write the buyer is told of survives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// The master applied it and one replica acknowledged it (`WAIT 1 t` on the write's
    /// connection): a failover to that replica keeps it. The default.
    #[default]
    Replica,
    /// The master applied it; nothing is waited for (lost if the master dies before its
    /// replica has it).
    Master,
    /// The master's AOF and one replica's have it on disk (`WAITAOF 1 1 t`; Redis 7.2+ and
    /// Valkey 8+, with `appendonly yes`).
    Aof,
}

/// The acknowledgement timeout without one set: a tenth of the retry deadline, within these
/// bounds (the default 10 s deadline: 1 s).
pub(crate) const MIN_ACK_TIMEOUT: Duration = Duration::from_millis(100);
pub(crate) const MAX_ACK_TIMEOUT: Duration = Duration::from_secs(1);

/// The acknowledgement timeout derived from a retry deadline (see [`MIN_ACK_TIMEOUT`]).
pub(crate) fn default_ack_timeout(deadline: Duration) -> Duration {
    (deadline / 10).clamp(MIN_ACK_TIMEOUT, MAX_ACK_TIMEOUT)
}

/// What [`Durability::Aof`] waits for on top: `appendfsync everysec` fsyncs once a second.
pub(crate) const AOF_FSYNC: Duration = Duration::from_secs(1);

/// How much longer than its own timeout a `WAIT`'s answer is awaited (the round trip, a busy
/// server) before the call counts as lost.
pub(crate) const ACK_GRACE: Duration = Duration::from_secs(1);

/// Which replies of a write changed the sale (so that a failover could take them back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Change {
    /// A purchase's units left (>= 0); OK.
    Wrote,
    /// A cancel's units returned, a loan's units lent (> 0).
    Units,
    /// A confirm's 1.
    Confirmed,
}

impl Change {
    /// [`Change::in_reply`] as a function (what a connection that waits for the replies it
    /// reads is given).
    pub fn test(self) -> fn(&Value) -> bool {
        match self {
            Change::Wrote => |reply| Change::Wrote.in_reply(reply),
            Change::Units => |reply| Change::Units.in_reply(reply),
            Change::Confirmed => |reply| Change::Confirmed.in_reply(reply),
        }
    }

    pub fn in_reply(self, reply: &Value) -> bool {
        match (self, reply) {
            (Change::Wrote, Value::Int(n)) => *n >= 0,
            (Change::Wrote, Value::Okay | Value::SimpleString(_)) => true,
            (Change::Units, Value::Int(n)) => *n > 0,
            (Change::Confirmed, Value::Int(n)) => *n == 1,
            _ => false,
        }
    }
}

/// What a write waits for before its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Keep {
    pub aof: bool,
    pub timeout: Duration,
}

impl Keep {
    /// What a handle of `durability` waits for (`None`: nothing, [`Durability::Master`]).
    pub fn of(durability: Durability, timeout: Duration) -> Option<Keep> {
        match durability {
            Durability::Master => None,
            Durability::Replica => Some(Keep {
                aof: false,
                timeout,
            }),
            Durability::Aof => Some(Keep { aof: true, timeout }),
        }
    }

    fn timeout_ms(&self) -> u64 {
        (self.timeout.as_millis() as u64).max(1)
    }

    /// The command that waits, on the write's connection (`None`: nothing to wait for).
    pub fn command(&self, replica: bool) -> Option<redis::Cmd> {
        let mut cmd;
        if self.aof {
            cmd = redis::cmd("WAITAOF");
            cmd.arg(1).arg(u8::from(replica)).arg(self.timeout_ms());
        } else if replica {
            cmd = redis::cmd("WAIT");
            cmd.arg(1).arg(self.timeout_ms());
        } else {
            return None;
        }
        Some(cmd)
    }

    /// Whether the answer to `command(replica)` says the write is kept. A cluster connection
    /// that sent it to several masters answers each: all must.
    pub fn kept(&self, answer: &Value, replica: bool) -> bool {
        match answer {
            Value::Int(acked) if !self.aof => *acked >= 1,
            Value::Array(items) if self.aof && items.len() == 2 => {
                let count = |v: &Value| matches!(v, Value::Int(n) if *n >= 1);
                count(&items[0]) && (!replica || count(&items[1]))
            }
            Value::Map(per_node) => per_node.iter().all(|(_, v)| self.kept(v, replica)),
            _ => false,
        }
    }
}

/// The command that waits for a write, made once per handle: as a command (a connection that
/// sends it after the write) and packed (one that writes it itself, `aio::ClusterSession`).
pub(crate) struct Wait {
    pub cmd: redis::Cmd,
    pub packed: Arc<[u8]>,
    /// How long it may wait in the server.
    pub timeout: Duration,
}

/// A handle's [`Wait`], kept while its [`Keep`] is the same (it changes with the deadline of a
/// handle whose acknowledgement timeout is derived from it).
#[derive(Default)]
pub(crate) struct Waits(Mutex<Option<(Keep, Arc<Wait>)>>);

impl Waits {
    /// The wait for a master with a replica under `keep`.
    pub fn of(&self, keep: Keep) -> Option<Arc<Wait>> {
        let mut made = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((made_for, wait)) = &*made
            && *made_for == keep
        {
            return Some(wait.clone());
        }
        let cmd = keep.command(true)?;
        let wait = Arc::new(Wait {
            packed: cmd.get_packed_command().into(),
            cmd,
            timeout: keep.timeout,
        });
        *made = Some((keep, wait.clone()));
        Some(wait)
    }
}

/// A handle's durability: its setting, its acknowledgement timeout, and what it knows of the
/// masters' replicas.
#[derive(Default)]
pub(crate) struct Keeper {
    pub durability: Durability,
    /// `None`: [`default_ack_timeout`] of the handle's retry deadline.
    pub ack_timeout: Option<Duration>,
    pub replicas: Replicas,
    pub waits: Waits,
}

impl Keeper {
    /// What the handle's writes wait for, under a retry policy of `deadline`.
    pub fn keep(&self, deadline: Duration) -> Option<Keep> {
        let timeout = self.ack_timeout.unwrap_or_else(|| {
            let fsync = if self.durability == Durability::Aof {
                AOF_FSYNC
            } else {
                Duration::ZERO
            };
            default_ack_timeout(deadline) + fsync
        });
        Keep::of(self.durability, timeout)
    }

    /// What the handle's writes wait for under a retry policy of `deadline`: nothing unless
    /// `kept` (a call that asks for its own acknowledgement).
    pub fn keeping(&self, deadline: Duration, kept: bool) -> Keeping<'_> {
        Keeping {
            keep: self.keep(deadline).filter(|_| kept),
            replicas: &self.replicas,
            waits: &self.waits,
        }
    }
}

/// What a handle's writes wait for, and what it knows of the masters' replicas (its
/// operations, `check` and `keep`, are the commands' side: `crate::key`).
#[derive(Clone, Copy)]
pub(crate) struct Keeping<'a> {
    pub keep: Option<Keep>,
    pub replicas: &'a Replicas,
    pub waits: &'a Waits,
}

/// How often a master with no replica known is asked again whether one attached.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Seen {
    /// The replication history (`master_replid`) in which a replica was seen.
    seen_in: Option<String>,
    checked_at: Option<Instant>,
    /// A connection to it was lost since: look again at the next write.
    stale: bool,
}

/// Which masters have a replica to wait for, as one handle knows them, by the key written
/// (a key lives on one master). A replica seen connected (`INFO replication`) is waited for
/// from then on, even while its link is down (a master cut from its replica is when the
/// answer matters), until the master's replication history changes (a restart, a promotion:
/// `master_replid`, looked at again after a lost connection). A master with none seen is asked
/// again every [`RECHECK`].
#[derive(Default)]
pub(crate) struct Replicas {
    masters: Mutex<HashMap<String, Seen>>,
    /// The keys whose master was shown to have WAITAOF and an AOF ([`Durability::Aof`]).
    with_aof: Mutex<std::collections::HashSet<String>>,
}

impl Replicas {
    fn masters(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.masters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `key`'s master should be looked at now.
    pub fn needs_look(&self, key: &str) -> bool {
        match self.masters().get(key) {
            None => true,
            Some(seen) if seen.stale => true,
            Some(seen) if seen.seen_in.is_some() => false,
            Some(seen) => seen.checked_at.is_none_or(|at| at.elapsed() >= RECHECK),
        }
    }

    /// What `INFO replication` on `key`'s master says (a cluster connection that asked every
    /// node answers a map: a replica seen on any of them counts).
    pub fn learn(&self, key: &str, info: &Value) {
        let (replid, connected) = replication_of(info);
        let mut masters = self.masters();
        let seen = masters.entry(key.to_string()).or_default();
        seen.checked_at = Some(Instant::now());
        seen.stale = false;
        if seen.seen_in.as_deref().is_some_and(|s| s != replid) {
            seen.seen_in = None; // another history: what was seen of the last one is gone
        }
        if connected {
            seen.seen_in = Some(replid);
        }
    }

    /// Whether `key`'s master was shown to have WAITAOF and an AOF.
    pub fn has_aof(&self, key: &str) -> bool {
        self.with_aof
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key)
    }

    pub fn learn_aof(&self, key: &str) {
        self.with_aof
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string());
    }

    /// After a lost connection: look again at the next write.
    pub fn forget(&self, key: &str) {
        if let Some(seen) = self.masters().get_mut(key) {
            seen.stale = true;
        }
    }

    /// Whether a write on `key` waits for a replica that was seen, with no look due first:
    /// [`Replicas::needs_look`] false and [`Replicas::known`] true, in one look at the map.
    pub fn ready(&self, key: &str) -> bool {
        self.masters()
            .get(key)
            .is_some_and(|seen| !seen.stale && seen.seen_in.is_some())
    }

    /// Whether a write on `key` waits for a replica.
    pub fn known(&self, key: &str) -> bool {
        self.masters()
            .get(key)
            .is_some_and(|seen| seen.seen_in.is_some())
    }
}

/// `(master_replid, whether a replica is connected or the node is no master)` from `INFO
/// replication`'s reply.
fn replication_of(info: &Value) -> (String, bool) {
    let text = match info {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::SimpleString(text) => text.clone(),
        Value::Map(per_node) => {
            let all: Vec<_> = per_node.iter().map(|(_, v)| replication_of(v)).collect();
            let replid = all.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>();
            return (replid.join(","), all.iter().any(|(_, c)| *c));
        }
        _ => String::new(),
    };
    let mut replid = String::new();
    let mut master = false;
    let mut replicas = false;
    for line in text.lines() {
        let Some((field, value)) = line.trim().split_once(':') else {
            continue;
        };
        match field {
            "master_replid" => replid = value.to_string(),
            "role" => master = value == "master",
            _ if field.starts_with("slave") && field[5..].bytes().all(|b| b.is_ascii_digit()) => {
                replicas |= field.len() > 5;
            }
            _ => {}
        }
    }
    // A node that is no master (a writable replica answered the write: a master turned
    // replica since, `replica-read-only no`) is waited for: its `WAIT` is refused, and the write
    // is sent again until a master answers it (`retry::turned_replica`), never told kept.
    (replid, !master || replicas)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    const WITH: &str = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
        slave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0\r\nmaster_replid:aaa\r\n";
    const WITHOUT: &str =
        "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_replid:aaa\r\n";

    #[test]
    fn the_ack_timeout_is_a_tenth_of_the_deadline_within_bounds() {
        assert_eq!(
            default_ack_timeout(Duration::from_secs(10)),
            Duration::from_secs(1)
        );
        assert_eq!(
            default_ack_timeout(Duration::from_secs(2)),
            Duration::from_millis(200)
        );
        assert_eq!(default_ack_timeout(Duration::ZERO), MIN_ACK_TIMEOUT);
        assert_eq!(
            default_ack_timeout(Duration::from_secs(60)),
            MAX_ACK_TIMEOUT
        );
    }

    #[test]
    fn aof_waits_one_fsync_period_more_unless_set() {
        let deadline = Duration::from_secs(10);
        let keeper = |durability, ack_timeout| Keeper {
            durability,
            ack_timeout,
            ..Keeper::default()
        };
        let timeout = |k: Keeper| k.keep(deadline).map(|keep| keep.timeout);
        assert_eq!(
            timeout(keeper(Durability::Replica, None)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            timeout(keeper(Durability::Aof, None)),
            Some(Duration::from_secs(2))
        );
        let set = Some(Duration::from_millis(300));
        assert_eq!(timeout(keeper(Durability::Aof, set)), set);
        assert_eq!(timeout(keeper(Durability::Master, None)), None);
    }

    #[test]
    fn which_replies_changed_the_sale() {
        assert!(Change::Wrote.in_reply(&Value::Int(0)));
        assert!(Change::Wrote.in_reply(&Value::Okay));
        assert!(!Change::Wrote.in_reply(&Value::Int(-1)), "a refusal");
        assert!(Change::Units.in_reply(&Value::Int(2)));
        assert!(!Change::Units.in_reply(&Value::Int(0)), "nothing returned");
        assert!(Change::Confirmed.in_reply(&Value::Int(1)));
        assert!(!Change::Confirmed.in_reply(&Value::Int(0)));
    }

    #[test]
    fn the_command_that_waits_and_what_its_answer_says() {
        let replica = Keep::of(Durability::Replica, Duration::from_millis(250)).unwrap();
        assert!(Keep::of(Durability::Master, Duration::from_millis(250)).is_none());
        assert!(
            replica.command(false).is_none(),
            "no replica: nothing to wait for"
        );
        let wait = replica.command(true).unwrap();
        assert_eq!(
            crate::routing::command_args(&wait),
            [&b"WAIT"[..], b"1", b"250"]
        );
        assert!(replica.kept(&Value::Int(1), true));
        assert!(!replica.kept(&Value::Int(0), true));
        let aof = Keep::of(Durability::Aof, Duration::from_millis(250)).unwrap();
        let waitaof = aof.command(false).unwrap();
        assert_eq!(
            crate::routing::command_args(&waitaof),
            [&b"WAITAOF"[..], b"1", b"0", b"250"]
        );
        let answer = |local, replicas| Value::Array(vec![Value::Int(local), Value::Int(replicas)]);
        assert!(aof.kept(&answer(1, 0), false));
        assert!(!aof.kept(&answer(1, 0), true), "the replica's AOF too");
        assert!(!aof.kept(&answer(0, 1), true), "the master's own AOF too");
        let per_node = Value::Map(vec![
            (Value::SimpleString("a".into()), Value::Int(1)),
            (Value::SimpleString("b".into()), Value::Int(0)),
        ]);
        assert!(
            !replica.kept(&per_node, true),
            "every master asked must have it"
        );
    }

    #[test]
    fn a_handles_wait_is_made_once_per_setting() {
        let waits = Waits::default();
        let keep = Keep::of(Durability::Replica, Duration::from_millis(250)).unwrap();
        let wait = waits.of(keep).unwrap();
        assert_eq!(&*wait.packed, &wait.cmd.get_packed_command()[..]);
        assert_eq!(wait.timeout, Duration::from_millis(250));
        assert!(Arc::ptr_eq(&wait, &waits.of(keep).unwrap()), "made once");
        let longer = Keep::of(Durability::Replica, Duration::from_millis(500)).unwrap();
        let remade = waits.of(longer).unwrap();
        assert!(
            !Arc::ptr_eq(&wait, &remade),
            "another setting, another wait"
        );
        assert_eq!(
            crate::routing::command_args(&remade.cmd),
            [&b"WAIT"[..], b"1", b"500"]
        );
    }

    #[test]
    fn a_write_is_sent_with_its_wait_only_once_a_replica_was_seen_and_no_look_is_due() {
        let replicas = Replicas::default();
        assert!(!replicas.ready("k"), "never looked at");
        replicas.learn("k", &info(WITHOUT));
        assert!(!replicas.ready("k"), "no replica");
        replicas.learn("k", &info(WITH));
        assert!(replicas.ready("k"));
        replicas.forget("k");
        assert!(!replicas.ready("k"), "a look is due first");
    }

    #[test]
    fn a_replica_once_seen_is_waited_for_until_the_history_changes() {
        let replicas = Replicas::default();
        assert!(replicas.needs_look("k"));
        replicas.learn("k", &info(WITHOUT));
        assert!(!replicas.known("k"), "never had one");
        assert!(!replicas.needs_look("k"), "asked again only after RECHECK");
        replicas.learn("k", &info(WITH));
        assert!(replicas.known("k"));
        assert!(!replicas.needs_look("k"), "seen: no more looks");
        // Its link cut: the master lists none, and a write still waits.
        replicas.forget("k");
        assert!(replicas.needs_look("k"));
        replicas.learn("k", &info(WITHOUT));
        assert!(replicas.known("k"), "the same history: still waited for");
        // Restarted (or another server since a failover): a new history, none seen in it.
        replicas.learn("k", &info(&WITHOUT.replace("aaa", "bbb")));
        assert!(!replicas.known("k"));
        // Turned replica (a writable one answered the write): waited for, its WAIT refused.
        let turned =
            "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_replid:ccc\r\n";
        replicas.learn("k", &info(turned));
        assert!(
            replicas.known("k"),
            "a node that is no master is waited for"
        );
    }
}
