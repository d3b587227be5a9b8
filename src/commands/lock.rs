//! LOCK.* commands: the lock core plus blocking waiters, the handoff timer and replication of
//! effects (absolute expiry and fence, never the clock-dependent command).

use super::internal::restored_value;
use super::{Args, Command};
use crate::args;
use crate::context::blocked::{self, Gone, WaiterId};
use crate::context::clock::now_ms;
use crate::context::command_info::{Access, Doc, KEY, Kind, arg, option};
use crate::context::keyspace::{
    KeyLocation, in_db, notify, readable_value, selected_db, signal_modified, writable_value,
};
use crate::context::replication::replicate_restore;
use crate::context::reply::{fields_reply, integer};
use crate::context::timer::Fired;
use crate::logic::lock::{AcquireOutcome, Lock, LockEvent, Waiter};
use crate::persist::encoding;
use crate::stats;
use crate::types::lock::{
    LOCK_TYPE, LockValue, abandon_waiters, forget_waiter, register_waiter, set_lock,
};
use redis_module::{
    Context, ContextFlags, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue,
};

/// Wakes granted waiters, counts, re-arms the handoff timer, and replicates the new state if
/// it changed, as `LOCK._RESTORE` with absolute times so replicas need no clock. `before` is
/// the lock's encoding and waiter count before the change.
fn finish(
    ctx: &Context,
    key_name: &RedisString,
    value: &mut LockValue,
    (before, waiters_before): (&[u8], usize),
) {
    for event in value.lock.drain_events() {
        match event {
            LockEvent::Expired => stats::LOCK_EXPIRED.incr(),
            LockEvent::Granted { waiter_id, fence } => {
                stats::LOCK_ACQUIRED.incr();
                forget_waiter(waiter_id);
                blocked::wake(waiter_id, Some(fence as i64));
            }
        }
    }
    value.timer.set(
        ctx,
        selected_db(ctx),
        key_name.as_slice(),
        value.lock.handoff_due_at(),
        on_handoff_timer,
    );
    let after = encoding::encode_lock(&value.lock);
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
    if after != before || value.lock.waiter_count() != waiters_before {
        // SAFETY: as above.
        unsafe { signal_modified(ctx, key_name.inner) };
    }
}

/// Runs `op` on the lock stored at `key` (in the context's db), then [`finish`]es.
fn with_lock<R>(
    ctx: &Context,
    key_name: &RedisString,
    create: bool,
    op: impl FnOnce(&Context, &mut LockValue) -> R,
) -> Result<Option<R>, RedisError> {
    let key = ctx.open_key_writable(key_name);
    if writable_value::<LockValue>(&key, &LOCK_TYPE)?.is_none() {
        if !create {
            return Ok(None);
        }
        set_lock(&key, LockValue::new(Lock::default()))?;
    }
    let value = writable_value::<LockValue>(&key, &LOCK_TYPE)?.expect("lock just stored");
    value.lock.set_fence_mode(crate::config::fence_mode());
    value
        .lock
        .set_fences_from_ms(crate::context::clock::fences_from_ms());
    let before = encoding::encode_lock(&value.lock);
    let waiters_before = value.lock.waiter_count();
    let out = op(ctx, value);
    finish(ctx, key_name, value, (&before, waiters_before));
    Ok(Some(out))
}

fn on_handoff_timer(ctx: &Context, fired: Fired) {
    // A replica never expires or hands off on its own: its master's LOCK._RESTORE does.
    if !ctx.get_flags().contains(ContextFlags::MASTER) {
        return;
    }
    in_db(ctx, fired.home.db(), || {
        let key_name = ctx.create_string(fired.home.key.as_slice());
        let _ = with_lock(ctx, &key_name, false, |_, value| {
            value.timer.fired(&fired);
            value.lock.expire_due(now_ms());
        });
    });
}

fn on_waiter_gone(ctx: &Context, id: WaiterId, why: Gone) {
    let Some(location) = forget_waiter(id) else {
        return;
    };
    if why == Gone::TimedOut {
        stats::LOCK_TIMED_OUT.incr();
    }
    in_db(ctx, location.db(), || {
        let key_name = ctx.create_string(location.key);
        let _ = with_lock(ctx, &key_name, false, |_, value| {
            value.lock.remove_waiter(id)
        });
    });
}

pub const ACQUIRE: Command = Command {
    name: c"lock.acquire",
    flags: c"write deny-oom blocking",
    handler: acquire,
    doc: Some(Doc {
        summary: c"Takes the lock for `token` for `ttl_ms` (or renews it for its holder), waiting up to WAIT ms in the server. Replies the fencing token, or nil.",
        complexity: c"O(1), O(W) in waiters to queue",
        since: c"0.1.0",
        access: Access::Write,
        inserts_after: None,
        args: &[
            KEY,
            arg(c"token", Kind::Text),
            arg(c"ttl_ms", Kind::Integer),
            option(c"WAIT", c"timeout_ms", Kind::Integer),
        ],
    }),
};

/// LOCK.ACQUIRE key token ttl_ms [WAIT timeout_ms]
pub fn acquire(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let parsed = args::acquire(rest)?;
    // MULTI, Lua and replicated streams cannot block: WAIT then acts as no WAIT.
    let may_block = !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING);
    let reply = with_lock(ctx, key_name, true, |ctx, value| {
        match value.lock.acquire(parsed.token, parsed.ttl_ms, now_ms()) {
            AcquireOutcome::Acquired { fence } => {
                stats::LOCK_ACQUIRED.incr();
                integer(fence)
            }
            AcquireOutcome::Renewed { fence } => integer(fence),
            AcquireOutcome::Busy => {
                stats::LOCK_CONTENDED.incr();
                match parsed.wait_ms {
                    Some(wait_ms) if may_block => {
                        let id = blocked::block(ctx, wait_ms, on_waiter_gone);
                        register_waiter(id, KeyLocation::of(ctx, key_name));
                        value.lock.enqueue(Waiter {
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

pub const RELEASE: Command = Command {
    name: c"lock.release",
    flags: c"write fast",
    handler: release,
    doc: Some(Doc {
        summary: c"Releases the lock if `token` holds it, handing it to the first waiter. Replies 1, or 0 if another holds it.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Write,
        inserts_after: None,
        args: &[KEY, arg(c"token", Kind::Text)],
    }),
};

/// LOCK.RELEASE key token
pub fn release(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let token = args::token_only(rest)?;
    let released = with_lock(ctx, key_name, false, |_, value| {
        value.lock.release(token, now_ms())
    })?;
    Ok(integer(u64::from(released.unwrap_or(false))))
}

pub const EXTEND: Command = Command {
    name: c"lock.extend",
    flags: c"write fast",
    handler: extend,
    doc: Some(Doc {
        summary: c"Sets a new TTL if `token` holds the lock. Replies 1, or 0.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Write,
        inserts_after: None,
        args: &[
            KEY,
            arg(c"token", Kind::Text),
            arg(c"ttl_ms", Kind::Integer),
        ],
    }),
};

/// LOCK.EXTEND key token ttl_ms
pub fn extend(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    let (token, ttl_ms) = args::extend(rest)?;
    let extended = with_lock(ctx, key_name, false, |_, value| {
        value.lock.extend(token, ttl_ms, now_ms())
    })?;
    Ok(integer(u64::from(extended.unwrap_or(false))))
}

pub const INFO: Command = Command {
    name: c"lock.info",
    flags: c"readonly fast",
    handler: info,
    doc: Some(Doc {
        summary: c"Returns a lock's owner, TTL, last fence and waiters.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Read,
        inserts_after: None,
        args: &[KEY],
    }),
};

/// LOCK.INFO key: read-only, so a replica shows its master's state as of now.
pub fn info(ctx: &Context, key_name: &RedisString, rest: &Args) -> RedisResult {
    args::key_only(rest)?;
    let key = ctx.open_key(key_name);
    let now = now_ms();
    let value = readable_value::<LockValue>(&key, &LOCK_TYPE)?;
    let lock = value.map(|e| &e.lock);
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
                holder.map_or(RedisValue::Integer(-1), |h| integer(h.expires_at_ms - now)),
            ),
            ("fence", integer(lock.map_or(0, Lock::last_fence))),
            (
                "waiters",
                integer(lock.map_or(0, |l| l.waiter_count() as u64)),
            ),
        ],
    ))
}

pub const RESTORE: Command = Command {
    name: c"lock._restore",
    flags: c"write deny-oom",
    handler: restore,
    doc: None,
};

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
        if let Some(old) = writable_value::<LockValue>(&key, &LOCK_TYPE)? {
            abandon_waiters(old);
        }
        set_lock(&key, LockValue::new(lock))?;
        // SAFETY: the key is the command's own argument, valid for the whole call.
        unsafe { signal_modified(ctx, key_name.inner) };
    }
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
