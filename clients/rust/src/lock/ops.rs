//! The grant, the renewal, the release and the watchdog, written once as async code over a
//! [`NodeLink`]: the sync lock drives them on a thread (`block_on`, calls made before their
//! future is polled), the async one on tokio. The same rules as `seckill/_lock.py`.

use super::lease::{Lease, LockSettings};
use crate::error::{Error, Result};
use crate::retry::{Backoff, RetryPolicy, is_retryable};
use redis::{Pipeline, RedisResult, Value};
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The read timeout beyond a call's own wait: a server that answers nothing this long is gone.
const GRACE: Duration = Duration::from_secs(1);

/// One of the lock's own connections, to the master that serves the lock's key (it follows
/// MOVED): the lock's calls time out on their own terms, never on an application client's.
pub(crate) trait NodeLink {
    /// `pipe` on the connection; its replies, or an error after `timeout` (the connection is
    /// then dropped: it may still owe a reply).
    fn call(
        &mut self,
        pipe: &Pipeline,
        timeout: Duration,
    ) -> impl Future<Output = RedisResult<Vec<Value>>> + Send;

    /// Waits `wait`; true when the guard was released meanwhile (the watchdog then ends).
    fn pause(&mut self, wait: Duration) -> impl Future<Output = bool> + Send;
}

/// `pipe` on `link`, sent again (up to 3 times) to the master a MOVED or ASK names: a new
/// link starts at the node the lock was given, which may not serve the key. Another master
/// has its own replicas: `replicas` (when the call waits for them) counts them anew.
async fn call<L: NodeLink>(
    link: &mut L,
    pipe: &Pipeline,
    timeout: Duration,
    replicas: Option<&ReplicaCount>,
) -> RedisResult<Vec<Value>> {
    let mut redirects = 0;
    loop {
        match link.call(pipe, timeout).await {
            Err(e) if redirects < 3 && crate::routing::redirect(&e).is_some() => {
                redirects += 1;
                if let Some(replicas) = replicas {
                    replicas.forget();
                }
            }
            Err(e) => {
                // A lost connection may be a failover: the next master has replicas of its own.
                if let Some(replicas) = replicas
                    && is_retryable(&e)
                {
                    replicas.forget();
                }
                return Err(e);
            }
            other => return other,
        }
    }
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// How often a lock reads its master's replicas again at the most (`ROLE`), with no failure
/// to prompt it: a replica attached since is asked from the next grant or renewal on.
pub(crate) const RECOUNT_EVERY: Duration = Duration::from_secs(2);

/// How many replicas a lock asks to acknowledge: fixed, or (`None`) one when the master has
/// any, read with `ROLE`, and read again after a write went unacknowledged (the replica may be
/// gone for good, or a promotion left the master with none), a MOVED or a lost connection (a
/// failover), and once [`RECOUNT_EVERY`] has passed (a replica attached since).
pub(crate) struct ReplicaCount {
    wanted: Option<u64>,
    detected: Mutex<Option<(u64, Instant)>>,
}

impl ReplicaCount {
    pub fn new(wanted: Option<u64>) -> ReplicaCount {
        ReplicaCount {
            wanted,
            detected: Mutex::new(None),
        }
    }

    async fn count<L: NodeLink>(&self, link: &mut L) -> RedisResult<u64> {
        if let Some(wanted) = self.wanted {
            return Ok(wanted);
        }
        if let Some((detected, read)) = *self.detected.lock().unwrap_or_else(|e| e.into_inner())
            && read.elapsed() < RECOUNT_EVERY
        {
            return Ok(detected);
        }
        let replies = call(link, redis::pipe().cmd("ROLE"), GRACE, None).await?;
        let replicas = match replies.first() {
            Some(Value::Array(role)) if is_master(role) => match role.get(2) {
                Some(Value::Array(list)) => list.len() as u64,
                _ => 0,
            },
            _ => 0,
        };
        let detected = replicas.min(1);
        *self.detected.lock().unwrap_or_else(|e| e.into_inner()) = Some((detected, Instant::now()));
        Ok(detected)
    }

    fn forget(&self) {
        *self.detected.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

fn is_master(role: &[Value]) -> bool {
    matches!(role.first(), Some(Value::BulkString(b)) if b == b"master")
        || matches!(role.first(), Some(Value::SimpleString(s)) if s == "master")
}

fn with_wait(command: redis::Cmd, replicas: u64, timeout_ms: u64) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.add_command(command);
    if replicas > 0 {
        pipe.cmd("WAIT").arg(replicas).arg(timeout_ms);
    }
    pipe
}

fn acknowledged(replies: &[Value], replicas: u64) -> bool {
    replicas == 0
        || replies
            .get(1)
            .and_then(int)
            .is_some_and(|n| n >= replicas as i64)
}

/// The lock for `token`, waiting up to `wait` in the server's FIFO queue: the fence and the
/// send time of the granting call. A lost answer is asked again with the same token (a grant
/// to it answers the same fence) and waits only what is left; a grant no replica acknowledged
/// in time is released and asked for again. `LockTimeout` when not granted in time; then
/// nothing is left held.
async fn grant<L: NodeLink>(
    link: &mut L,
    settings: &LockSettings,
    replicas: &ReplicaCount,
    token: &str,
    wait: Duration,
) -> Result<(u64, Instant)> {
    let deadline = Instant::now() + wait;
    let mut backoff = Backoff::new(&RetryPolicy {
        max_backoff: Duration::from_millis(500),
        ..RetryPolicy::default()
    });
    let mut reason = format!(
        "held by another holder for all of wait_ms={}",
        wait.as_millis()
    );
    loop {
        let attempt: RedisResult<(Vec<Value>, u64, Instant)> = async {
            let wanted = replicas.count(link).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            let left_ms =
                left.as_millis() as u64 + u64::from(!left.subsec_nanos().is_multiple_of(1_000_000));
            let mut acquire = redis::cmd("LOCK.ACQUIRE");
            acquire.arg(&settings.name).arg(token).arg(settings.ttl_ms);
            if left_ms > 0 {
                acquire.arg("WAIT").arg(left_ms);
            }
            let pipe = with_wait(acquire, wanted, settings.replica_timeout_ms);
            let sent = Instant::now();
            let timeout = left + Duration::from_millis(settings.replica_timeout_ms) + GRACE;
            Ok((
                call(link, &pipe, timeout, Some(replicas)).await?,
                wanted,
                sent,
            ))
        }
        .await;
        let (replies, wanted, sent) = match attempt {
            Ok(answer) => answer,
            Err(e) if is_retryable(&e) => {
                reason = format!("no answer from the server ({e})");
                if Instant::now() >= deadline {
                    release_quietly(link, settings, token).await;
                    return Err(lock_timeout(settings, reason));
                }
                let pause = backoff
                    .wait()
                    .min(deadline.saturating_duration_since(Instant::now()));
                link.pause(pause).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match replies.first().and_then(int) {
            Some(fence) if acknowledged(&replies, wanted) => return Ok((fence as u64, sent)),
            Some(_) => {
                // Granted, but a failover now could lose the grant: hand it back, ask again.
                release_quietly(link, settings, token).await;
                replicas.forget();
                reason = format!(
                    "no replica acknowledged the grant within replica_timeout_ms={} (wanted {wanted})",
                    settings.replica_timeout_ms
                );
            }
            None => {}
        }
        if Instant::now() >= deadline {
            return Err(lock_timeout(settings, reason));
        }
    }
}

fn lock_timeout(settings: &LockSettings, reason: String) -> Error {
    Error::LockTimeout {
        name: settings.name.clone(),
        reason,
    }
}

async fn release_quietly<L: NodeLink>(link: &mut L, settings: &LockSettings, token: &str) {
    let _ = release(link, settings, token).await;
}

/// `grant`, then, when the answer came late (the server kept the call waiting in its queue),
/// one renewal at once: the lease is counted from a call's send, and the grant's may be long
/// past.
pub(crate) async fn hold<L: NodeLink>(
    link: &mut L,
    settings: &LockSettings,
    replicas: &ReplicaCount,
    token: &str,
    wait: Duration,
) -> Result<(u64, Instant)> {
    let (fence, sent) = grant(link, settings, replicas, token, wait).await?;
    if sent.elapsed() < Duration::from_millis(settings.renew_ms) {
        return Ok((fence, sent));
    }
    let timeout = Duration::from_millis(settings.ttl_ms);
    match renew(link, settings, replicas, token, settings.ttl_ms, timeout).await {
        Ok(Renewal::Acknowledged(renewed)) => Ok((fence, renewed)),
        Ok(Renewal::Lost) => Err(lock_timeout(
            settings,
            "the grant ran out before its answer arrived".into(),
        )),
        Ok(Renewal::Unacknowledged) => Ok((fence, sent)),
        Err(e) if is_retryable(&e) => Ok((fence, sent)), // the watchdog tries again at once
        Err(e) => Err(e.into()),
    }
}

pub(crate) enum Renewal {
    /// The server and the replicas asked for acknowledged the renewal sent at this time.
    Acknowledged(Instant),
    /// `LOCK.EXTEND` answered 0: the token no longer holds the lock.
    Lost,
    /// No replica had it in time: the lease is not counted longer (a promoted replica would
    /// not have it).
    Unacknowledged,
}

async fn renew<L: NodeLink>(
    link: &mut L,
    settings: &LockSettings,
    replicas: &ReplicaCount,
    token: &str,
    ttl_ms: u64,
    timeout: Duration,
) -> RedisResult<Renewal> {
    let wanted = replicas.count(link).await?;
    let mut extend = redis::cmd("LOCK.EXTEND");
    extend.arg(&settings.name).arg(token).arg(ttl_ms);
    let sent = Instant::now();
    let pipe = with_wait(extend, wanted, settings.replica_timeout_ms);
    let replies = call(link, &pipe, timeout, Some(replicas)).await?;
    if replies.first().and_then(int) != Some(1) {
        return Ok(Renewal::Lost);
    }
    if !acknowledged(&replies, wanted) {
        replicas.forget();
        return Ok(Renewal::Unacknowledged);
    }
    Ok(Renewal::Acknowledged(sent))
}

/// `LOCK.RELEASE`: whether the token held the lock (it now goes to the next waiter).
pub(crate) async fn release<L: NodeLink>(
    link: &mut L,
    settings: &LockSettings,
    token: &str,
) -> RedisResult<bool> {
    let mut release = redis::pipe();
    release.cmd("LOCK.RELEASE").arg(&settings.name).arg(token);
    let replies = call(link, &release, GRACE, None).await?;
    Ok(replies.first().and_then(int) == Some(1))
}

const PAST_DEADLINE: &str = "no renewal was acknowledged before the lease's local deadline (ttl_ms - margin_ms after the last)";

/// A guard's state, shared by the guard and its watchdog: the token and fence, the lease, the
/// loss signal (set once, never cleared; `lost_tx` wakes async waiters).
pub(crate) struct GuardState {
    pub settings: LockSettings,
    pub token: String,
    pub fence: u64,
    lease: Mutex<Lease>,
    lost: AtomicBool,
    reason: Mutex<Option<String>>,
    pub lost_tx: tokio::sync::watch::Sender<bool>,
}

impl GuardState {
    pub fn new(settings: LockSettings, token: String, fence: u64, sent: Instant) -> GuardState {
        let lease = Lease::new(&settings, sent);
        GuardState {
            settings,
            token,
            fence,
            lease: Mutex::new(lease),
            lost: AtomicBool::new(false),
            reason: Mutex::new(None),
            lost_tx: tokio::sync::watch::channel(false).0,
        }
    }

    fn lease(&self) -> std::sync::MutexGuard<'_, Lease> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn lose(&self, reason: &str) {
        let mut slot = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(reason.to_string());
            self.lost.store(true, Ordering::SeqCst);
            self.lost_tx.send_replace(true);
        }
    }

    /// Whether the lease is known lost; reads the clock itself, so a process that was frozen
    /// past its deadline knows at once on waking, before its watchdog has run.
    pub fn is_lost(&self) -> bool {
        if !self.lost.load(Ordering::SeqCst) && self.lease().expired(Instant::now()) {
            self.lose(PAST_DEADLINE);
        }
        self.lost.load(Ordering::SeqCst)
    }

    pub fn lost_error(&self) -> Error {
        Error::LockLost {
            name: self.settings.name.clone(),
            reason: self
                .reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_else(|| "lost".into()),
        }
    }
}

/// The watchdog: renews the lease every `renew_ms` until the guard is released (`pause`
/// answers true, or the task is dropped), and sets the loss signal the moment the server
/// says the lease is gone or the deadline passes with no renewal acknowledged. Each renewal's
/// answer is awaited no later than the deadline.
pub(crate) async fn watch<L: NodeLink>(link: &mut L, guard: &GuardState, replicas: &ReplicaCount) {
    let settings = &guard.settings;
    loop {
        let now = Instant::now();
        let (expired, delay, ttl, deadline) = {
            let lease = guard.lease();
            (
                lease.expired(now),
                lease.delay(settings, now),
                lease.renewal_ttl(settings, now),
                lease.deadline,
            )
        };
        if expired {
            guard.lose(PAST_DEADLINE);
            return;
        }
        if !delay.is_zero() {
            if link.pause(delay).await {
                return;
            }
            continue;
        }
        let Some(ttl) = ttl else { continue };
        let timeout = deadline.saturating_duration_since(now);
        match renew(link, settings, replicas, &guard.token, ttl, timeout).await {
            Ok(Renewal::Acknowledged(sent)) => guard.lease().renewed(settings, sent, ttl),
            Ok(Renewal::Lost) => {
                guard.lose("LOCK.EXTEND answered 0: the lease expired or went to another holder");
                return;
            }
            Ok(Renewal::Unacknowledged) => guard.lease().failed(settings, Instant::now()),
            Err(e) if is_retryable(&e) => {
                guard.lease().failed(settings, Instant::now());
            }
            Err(e) => {
                guard.lose(&format!("LOCK.EXTEND failed: {e}"));
                return;
            }
        }
    }
}
