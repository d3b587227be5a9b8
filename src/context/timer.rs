//! The one timer each key keeps for its next deadline (a lock's handoff, a sale's earliest
//! hold expiry), following [`crate::logic::alarm::plan`]. Timers are created and stopped through
//! the raw API, wrapped here once: the crate's `stop_timer` frees the data with another type's
//! layout than the one it was created with.

use super::clock::now_ms;
use super::keyspace::KeyLocation;
use crate::logic::alarm::{Plan, plan};
use crate::stats;
use redis_module::{Context, raw};
use std::os::raw::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a timer tells its callback when it fires.
pub struct Fired {
    /// The key the timer was armed for (a RENAME or MOVE since then leaves it stale).
    pub home: KeyLocation,
    /// Which arming this is, so a key recognises its own timer.
    pub seq: u64,
}

pub type OnFire = fn(&Context, Fired);

struct Armed {
    id: raw::RedisModuleTimerID,
    seq: u64,
    due: u64,
    home: KeyLocation,
}

/// A key's timer, kept in the value it serves.
#[derive(Default)]
pub struct KeyTimer {
    armed: Option<Armed>,
}

struct TimerData {
    fired: Fired,
    on_fire: OnFire,
}

static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

unsafe extern "C" fn trampoline(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let data = unsafe { Box::from_raw(data.cast::<TimerData>()) };
    stats::TIMERS.down();
    let ctx = Context::new(ctx);
    // A panic must not unwind into Redis (that aborts the server): log it and go on.
    if catch_unwind(AssertUnwindSafe(|| (data.on_fire)(&ctx, data.fired))).is_err() {
        ctx.log_warning("seckill: a key timer failed internally");
    }
}

impl KeyTimer {
    /// When the timer fires, if it is armed for the key at `db`/`key`: one armed under another
    /// name (before a RENAME or MOVE) does not serve this key.
    fn armed_due(&self, db: i32, key: &[u8]) -> Option<u64> {
        self.armed
            .as_ref()
            .filter(|armed| armed.home.db() == db && armed.home.key == key)
            .map(|armed| armed.due)
    }

    /// Makes the key's one timer fire no later than `wanted` (the key's earliest live
    /// deadline), calling `on_fire` then; `None` stops it.
    pub fn set(
        &mut self,
        ctx: &Context,
        db: i32,
        key: &[u8],
        wanted: Option<u64>,
        on_fire: OnFire,
    ) {
        match plan(self.armed_due(db, key), wanted) {
            Plan::Keep | Plan::Idle => {}
            Plan::Stop => self.stop(ctx),
            Plan::Arm(due) => {
                self.stop(ctx);
                let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
                let home = KeyLocation::new(db, key);
                let data = Box::new(TimerData {
                    fired: Fired {
                        home: home.clone(),
                        seq,
                    },
                    on_fire,
                });
                let delay_ms = timer_delay(due, now_ms()).as_millis() as i64;
                let id = unsafe {
                    raw::RedisModule_CreateTimer.expect("RedisModule_CreateTimer")(
                        ctx.ctx,
                        delay_ms,
                        Some(trampoline),
                        Box::into_raw(data).cast(),
                    )
                };
                stats::TIMERS.up();
                self.armed = Some(Armed { id, seq, due, home });
            }
        }
    }

    /// Called by a firing timer: forgets it if it is this key's, and says so. A timer that is
    /// not the key's (the key was replaced, or re-armed) only finds its deadline planned anew.
    pub fn fired(&mut self, fired: &Fired) -> bool {
        let ours = self
            .armed
            .as_ref()
            .is_some_and(|armed| armed.seq == fired.seq);
        if ours {
            self.armed = None;
        }
        ours
    }

    fn stop(&mut self, ctx: &Context) {
        let Some(armed) = self.armed.take() else {
            return;
        };
        let mut data: *mut c_void = std::ptr::null_mut();
        let stopped = unsafe {
            raw::RedisModule_StopTimer.expect("RedisModule_StopTimer")(ctx.ctx, armed.id, &mut data)
        };
        // Not OK means it already fired (its data went with it).
        if stopped == raw::REDISMODULE_OK as i32 && !data.is_null() {
            drop(unsafe { Box::from_raw(data.cast::<TimerData>()) });
            stats::TIMERS.down();
        }
    }
}

/// Longest single timer: Redis adds the delay to its microsecond clock, and a deadline near
/// i64::MAX ms would overflow there and fire at once, forever. A timer that fires early just
/// arms the next one.
const LONGEST_TIMER_MS: u64 = 24 * 60 * 60 * 1000;

/// The delay of a timer due at `due_at_ms`, at least 1 ms and at most a day.
pub fn timer_delay(due_at_ms: u64, now_ms: u64) -> Duration {
    Duration::from_millis(due_at_ms.saturating_sub(now_ms).clamp(1, LONGEST_TIMER_MS))
}
