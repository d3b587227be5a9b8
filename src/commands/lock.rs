//! LOCK.* commands: the lock core plus blocking waiters, the handoff timer and replication of
//! effects (absolute expiry and fence, never the clock-dependent command).

use super::timer::{Fired, KeyTimer};
use super::{
    Args, Home, fields_reply, in_db, int, notify, now_ms, readable_value, replicate_restore,
    restored_value, selected_db, signal_modified, writable_value,
};
use crate::args;
use crate::blocking::{self, Gone, WaiterId};
use crate::core::lock::{AcquireOutcome, Lock, LockEvent, Waiter};
use crate::persist::{LOCK_TYPE, encoding, set_lock};
use crate::stats;
use redis_module::{
    Context, ContextFlags, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue,
};
use std::collections::HashMap;
use std::sync::Mutex;

/// What a lock key holds: the core state plus its handoff timer.
pub struct LockEntry {
    pub lock: Lock,
    timer: KeyTimer,
}

impl LockEntry {
    pub fn new(lock: Lock) -> LockEntry {
        LockEntry {
            lock,
            timer: KeyTimer::default(),
        }
    }

    /// The persistent part only (COPY): waiters stay with the key they wait on.
    pub fn copy_state(&self) -> LockEntry {
        let lock = Lock::restore(self.lock.last_fence(), self.lock.stored_holder().cloned())
            .expect("a live lock is always restorable");
        LockEntry::new(lock)
    }

    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<LockEntry>()
            + self.lock.stored_holder().map_or(0, |h| h.token.capacity())
            + self.lock.waiter_count() * (std::mem::size_of::<Waiter>() + 32)
    }
}

static HOMES: Mutex<Option<HashMap<WaiterId, Home>>> = Mutex::new(None);

fn with_homes<R>(f: impl FnOnce(&mut HashMap<WaiterId, Home>) -> R) -> R {
    let mut guard = HOMES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// Wakes granted waiters, counts, re-arms the handoff timer, and replicates the new state if
/// it changed, as `LOCK._RESTORE` with absolute times so replicas need no clock. `before` is
/// the lock's encoding and waiter count before the change.
fn finish(
    ctx: &Context,
    key_name: &RedisString,
    entry: &mut LockEntry,
    (before, waiters_before): (&[u8], usize),
) {
    for event in entry.lock.drain_events() {
        match event {
            LockEvent::Expired => stats::LOCK_EXPIRED.incr(),
            LockEvent::Granted { waiter_id, fence } => {
                stats::LOCK_ACQUIRED.incr();
                with_homes(|homes| homes.remove(&waiter_id));
                blocking::wake(waiter_id, Some(fence as i64));
            }
        }
    }
    entry.timer.set(
        ctx,
        selected_db(ctx),
        key_name.as_slice(),
        entry.lock.handoff_due_at(),
        on_handoff_timer,
    );
    let after = encoding::encode_lock(&entry.lock);
    if after != before {
        replicate_restore(
            ctx,
            c"LOCK._RESTORE",
            key_name,
            encoding::LOCK_VERSION,
            &after,
        );
        // SAFETY: the key is the command's (or the timer's) own string, valid for the call.
        unsafe { notify(ctx, NotifyEvent::MODULE, c"lock.change", key_name.inner) };
    }
    // Waiters are not replicated (a replica has no blocked clients) but LOCK.INFO shows them.
    if after != before || entry.lock.waiter_count() != waiters_before {
        // SAFETY: as above.
        unsafe { signal_modified(ctx, key_name.inner) };
    }
}

/// Runs `op` on the lock stored at `key` (in the context's db), then [`finish`]es.
fn with_lock<R>(
    ctx: &Context,
    key_name: &RedisString,
    create: bool,
    op: impl FnOnce(&Context, &mut LockEntry) -> R,
) -> Result<Option<R>, RedisError> {
    let key = ctx.open_key_writable(key_name);
    if writable_value::<LockEntry>(&key, &LOCK_TYPE)?.is_none() {
        if !create {
            return Ok(None);
        }
        set_lock(&key, LockEntry::new(Lock::default()))?;
    }
    let entry = writable_value::<LockEntry>(&key, &LOCK_TYPE)?.expect("lock just stored");
    entry.lock.set_fence_mode(crate::config::fence_mode());
    let before = encoding::encode_lock(&entry.lock);
    let waiters_before = entry.lock.waiter_count();
    let out = op(ctx, entry);
    finish(ctx, key_name, entry, (&before, waiters_before));
    Ok(Some(out))
}

fn on_handoff_timer(ctx: &Context, fired: Fired) {
    // A replica never expires or hands off on its own: its master's LOCK._RESTORE does.
    if !ctx.get_flags().contains(ContextFlags::MASTER) {
        return;
    }
    in_db(ctx, fired.home.db(), || {
        let key_name = ctx.create_string(fired.home.key.as_slice());
        let _ = with_lock(ctx, &key_name, false, |_, entry| {
            entry.timer.fired(&fired);
            entry.lock.settle(now_ms());
        });
    });
}

fn on_waiter_gone(ctx: &Context, id: WaiterId, why: Gone) {
    let Some(home) = with_homes(|homes| homes.remove(&id)) else {
        return;
    };
    if why == Gone::TimedOut {
        stats::LOCK_TIMED_OUT.incr();
    }
    in_db(ctx, home.db(), || {
        let key_name = ctx.create_string(home.key);
        let _ = with_lock(ctx, &key_name, false, |_, entry| {
            entry.lock.remove_waiter(id)
        });
    });
}

/// Answers every waiter of a lock that is leaving the keyspace with nil.
pub fn abandon_waiters(entry: &mut LockEntry) {
    for waiter in entry.lock.take_waiters() {
        if with_homes(|homes| homes.remove(&waiter.id)).is_some() {
            blocking::wake(waiter.id, None);
        }
    }
}

/// Clients blocked in `LOCK.ACQUIRE ... WAIT` right now.
pub fn waiting_clients() -> usize {
    with_homes(|homes| homes.len())
}

/// After FLUSHDB/FLUSHALL (which drop keys without the unlink hook), answers nil to every
/// waiter whose lock is gone, instead of leaving it blocked on nothing.
pub fn release_orphaned_waiters(ctx: &Context) {
    let homes: Vec<(WaiterId, i32, Vec<u8>)> = with_homes(|homes| {
        homes
            .iter()
            .map(|(id, h)| (*id, h.db(), h.key.clone()))
            .collect()
    });
    for (id, db, key) in homes {
        let still_queued = in_db(ctx, db, || {
            let key_name = ctx.create_string(key);
            let key = ctx.open_key(&key_name);
            readable_value::<LockEntry>(&key, &LOCK_TYPE)
                .ok()
                .flatten()
                .is_some_and(|entry| entry.lock.has_waiter(id))
        });
        if !still_queued && with_homes(|homes| homes.remove(&id)).is_some() {
            blocking::wake(id, None);
        }
    }
}

/// LOCK.ACQUIRE key token ttl_ms [WAIT timeout_ms]
pub fn acquire(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let parsed = args::acquire(rest)?;
    // MULTI, Lua and replicated streams cannot block: WAIT then acts as no WAIT.
    let may_block = !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING);
    let reply = with_lock(ctx, key_name, true, |ctx, entry| {
        match entry.lock.acquire(parsed.token, parsed.ttl_ms, now_ms()) {
            AcquireOutcome::Acquired { fence } => {
                stats::LOCK_ACQUIRED.incr();
                int(fence)
            }
            AcquireOutcome::Renewed { fence } => int(fence),
            AcquireOutcome::Busy => {
                stats::LOCK_CONTENDED.incr();
                match parsed.wait_ms {
                    Some(wait_ms) if may_block => {
                        let id = blocking::block(ctx, wait_ms, on_waiter_gone);
                        let home = Home::of(ctx, key_name);
                        with_homes(|homes| homes.insert(id, home));
                        entry.lock.enqueue(Waiter {
                            id,
                            token: parsed.token.to_vec(),
                            ttl_ms: parsed.ttl_ms,
                        });
                        stats::LOCK_WAITED.incr();
                        RedisValue::NoReply
                    }
                    _ => RedisValue::Null,
                }
            }
        }
    })?;
    Ok(reply.expect("acquire creates the lock"))
}

/// LOCK.RELEASE key token
pub fn release(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let token = args::token_only(rest)?;
    let released = with_lock(ctx, key_name, false, |_, entry| {
        entry.lock.release(token, now_ms())
    })?;
    Ok(int(u64::from(released.unwrap_or(false))))
}

/// LOCK.EXTEND key token ttl_ms
pub fn extend(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let (token, ttl_ms) = args::extend(rest)?;
    let extended = with_lock(ctx, key_name, false, |_, entry| {
        entry.lock.extend(token, ttl_ms, now_ms())
    })?;
    Ok(int(u64::from(extended.unwrap_or(false))))
}

/// LOCK.INFO key: read-only, so a replica shows its master's state as of now.
pub fn info(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    args::key_only(rest)?;
    let key = ctx.open_key(key_name);
    let now = now_ms();
    let entry = readable_value::<LockEntry>(&key, &LOCK_TYPE)?;
    let lock = entry.map(|e| &e.lock);
    let holder = lock.and_then(|l| l.holder(now));
    Ok(fields_reply(
        ctx,
        vec![
            (
                "owner",
                holder.map_or(RedisValue::Null, |h| {
                    RedisValue::StringBuffer(h.token.clone())
                }),
            ),
            (
                "ttl",
                holder.map_or(RedisValue::Integer(-1), |h| int(h.expires_at_ms - now)),
            ),
            ("fence", int(lock.map_or(0, Lock::last_fence))),
            ("waiters", int(lock.map_or(0, |l| l.waiter_count() as u64))),
        ],
    ))
}

/// LOCK._RESTORE key version payload: the replicated and AOF form of every lock change.
pub fn restore(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let restored = restored_value(
        ctx,
        key_name,
        "LOCK._RESTORE",
        "lock",
        rest,
        encoding::decode_lock,
    )?;
    if let Some(lock) = restored {
        let key = ctx.open_key_writable(key_name);
        if let Some(old) = writable_value::<LockEntry>(&key, &LOCK_TYPE)? {
            abandon_waiters(old);
        }
        set_lock(&key, LockEntry::new(lock))?;
        // SAFETY: the key is the command's own argument, valid for the whole call.
        unsafe { signal_modified(ctx, key_name.inner) };
    }
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
