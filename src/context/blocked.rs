//! The one place that blocks a client: `RedisModule_BlockClient` with a timeout, which the
//! crate's safe API lacks. A blocked client is woken exactly once, by [`wake`] or by its
//! timeout or disconnect, after which Redis frees its handle.

use redis_module::{Context, raw};
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;

/// Identifies a blocked client while it is blocked (the handle's address).
pub type WaiterId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    TimedOut,
    Disconnected,
}

/// Told when a blocked client leaves without being woken, so its owner can forget it.
pub type OnGone = fn(&Context, WaiterId, Gone);

struct Blocked {
    handle: *mut raw::RedisModuleBlockedClient,
    on_gone: OnGone,
}

// Handles are created and used on Redis' main thread only; the Mutex is for the type system.
unsafe impl Send for Blocked {}

static BLOCKED: Mutex<Option<HashMap<WaiterId, Blocked>>> = Mutex::new(None);

fn with_blocked<R>(f: impl FnOnce(&mut HashMap<WaiterId, Blocked>) -> R) -> R {
    let mut guard = BLOCKED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// Longer waits than this (about 31 years) are waits without limit: Redis adds the timeout to
/// the clock, and a huge one would overflow there.
const LONGEST_TIMEOUT_MS: u64 = 1_000_000_000_000;

/// Blocks the calling client until [`wake`], or `timeout_ms` (0: no limit), or disconnect.
/// The command must then reply `RedisValue::NoReply`.
pub fn block(ctx: &Context, timeout_ms: u64, on_gone: OnGone) -> WaiterId {
    let timeout_ms = if timeout_ms > LONGEST_TIMEOUT_MS {
        0
    } else {
        timeout_ms
    };
    let handle = unsafe {
        raw::RedisModule_BlockClient.expect("RedisModule_BlockClient")(
            ctx.ctx,
            Some(reply_woken),
            Some(reply_timed_out),
            Some(free_reply),
            timeout_ms as i64,
        )
    };
    unsafe {
        raw::RedisModule_SetDisconnectCallback.expect("RedisModule_SetDisconnectCallback")(
            handle,
            Some(on_disconnect),
        );
    }
    let id = handle as usize as WaiterId;
    with_blocked(|blocked| blocked.insert(id, Blocked { handle, on_gone }));
    id
}

/// Wakes a blocked client with an integer reply, or nil for `None`. False if it is gone.
pub fn wake(id: WaiterId, reply: Option<i64>) -> bool {
    let Some(entry) = with_blocked(|blocked| blocked.remove(&id)) else {
        return false;
    };
    let privdata = reply.map_or(std::ptr::null_mut(), |value| {
        Box::into_raw(Box::new(value)).cast::<c_void>()
    });
    unsafe {
        raw::RedisModule_UnblockClient.expect("RedisModule_UnblockClient")(entry.handle, privdata)
    };
    true
}

fn forget(ctx: &Context, handle: *mut raw::RedisModuleBlockedClient, why: Gone) {
    let id = handle as usize as WaiterId;
    // Absent when `wake` already ran: the handle then belongs to Redis and must not be freed.
    if let Some(entry) = with_blocked(|blocked| blocked.remove(&id)) {
        (entry.on_gone)(ctx, id, why);
        // Redis frees a module-blocked handle only once the module unblocks it.
        unsafe {
            raw::RedisModule_UnblockClient.expect("RedisModule_UnblockClient")(
                handle,
                std::ptr::null_mut(),
            )
        };
    }
}

unsafe extern "C" fn reply_woken(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let value = unsafe {
        raw::RedisModule_GetBlockedClientPrivateData.expect("GetBlockedClientPrivateData")(ctx)
    }
    .cast::<i64>();
    if value.is_null() {
        raw::reply_with_null(ctx);
    } else {
        raw::reply_with_long_long(ctx, unsafe { *value });
    }
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn reply_timed_out(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let handle =
        unsafe { raw::RedisModule_GetBlockedClientHandle.expect("GetBlockedClientHandle")(ctx) };
    forget(&Context::new(ctx), handle, Gone::TimedOut);
    raw::reply_with_null(ctx);
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    handle: *mut raw::RedisModuleBlockedClient,
) {
    forget(&Context::new(ctx), handle, Gone::Disconnected);
}

unsafe extern "C" fn free_reply(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        drop(unsafe { Box::from_raw(privdata.cast::<i64>()) });
    }
}
