//! Counters behind `INFO seckill`. Atomics, because a value's `free` may run on a lazy-free
//! thread; everything else runs on Redis' main thread.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }

    pub fn incr(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A count of live values that goes up on create and down on free.
pub struct Gauge(AtomicI64);

impl Gauge {
    const fn new() -> Gauge {
        Gauge(AtomicI64::new(0))
    }

    pub fn up(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn down(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

pub static TRIES: Counter = Counter::new();
pub static PURCHASES: Counter = Counter::new();
pub static SOLD_OUT_REJECTIONS: Counter = Counter::new();
pub static DRAINED_REJECTIONS: Counter = Counter::new();
pub static SEALS: Counter = Counter::new();
pub static LIMIT_REJECTIONS: Counter = Counter::new();
pub static WINDOW_REJECTIONS: Counter = Counter::new();
pub static HOLDS: Counter = Counter::new();
pub static CONFIRMS: Counter = Counter::new();
pub static EXPIRIES: Counter = Counter::new();
pub static CANCELS: Counter = Counter::new();
pub static RESTOCKS: Counter = Counter::new();
pub static EVENTS_FAILED: Counter = Counter::new();
pub static LENDS: Counter = Counter::new();
pub static ABSORBS: Counter = Counter::new();
/// Users admitted from waiting rooms, and TRYs refused for not being admitted (-6).
pub static ADMISSIONS: Counter = Counter::new();
pub static QUEUE_REJECTIONS: Counter = Counter::new();
/// Waiting rooms' cohorts drawn at START, admitted users whose window lapsed, users who left,
/// and users dropped in their turn for being absent (PRESENCE).
pub static DRAWS: Counter = Counter::new();
pub static LAPSES: Counter = Counter::new();
pub static LEAVES: Counter = Counter::new();
pub static DROPS: Counter = Counter::new();
pub static SALES: Gauge = Gauge::new();

pub static LOCKS: Gauge = Gauge::new();
pub static LOCK_ACQUIRED: Counter = Counter::new();
pub static LOCK_CONTENDED: Counter = Counter::new();
pub static LOCK_WAITED: Counter = Counter::new();
pub static LOCK_TIMED_OUT: Counter = Counter::new();
pub static LOCK_EXPIRED: Counter = Counter::new();
/// Key timers armed and not yet fired or stopped (at most one per sale or lock key).
pub static TIMERS: Gauge = Gauge::new();

/// (field, value) pairs of the `seckill` INFO section, in display order, given the number of
/// clients waiting for locks (which the lock commands track).
pub fn fields(lock_waiting_clients: usize) -> Vec<(&'static str, i64)> {
    let c = |counter: &Counter| counter.get() as i64;
    vec![
        ("sales", SALES.get()),
        ("tries", c(&TRIES)),
        ("purchases", c(&PURCHASES)),
        ("sold_out_rejections", c(&SOLD_OUT_REJECTIONS)),
        ("limit_rejections", c(&LIMIT_REJECTIONS)),
        ("window_rejections", c(&WINDOW_REJECTIONS)),
        ("holds", c(&HOLDS)),
        ("confirms", c(&CONFIRMS)),
        ("expiries", c(&EXPIRIES)),
        ("cancels", c(&CANCELS)),
        ("restocks", c(&RESTOCKS)),
        ("events_failed", c(&EVENTS_FAILED)),
        ("locks", LOCKS.get()),
        ("lock_acquired", c(&LOCK_ACQUIRED)),
        ("lock_contended", c(&LOCK_CONTENDED)),
        ("lock_waited", c(&LOCK_WAITED)),
        ("lock_timed_out", c(&LOCK_TIMED_OUT)),
        ("lock_expired", c(&LOCK_EXPIRED)),
        ("lock_waiting_clients", lock_waiting_clients as i64),
        ("timers", TIMERS.get()),
        ("lends", c(&LENDS)),
        ("absorbs", c(&ABSORBS)),
        ("drained_rejections", c(&DRAINED_REJECTIONS)),
        ("seals", c(&SEALS)),
        ("admissions", c(&ADMISSIONS)),
        ("queue_rejections", c(&QUEUE_REJECTIONS)),
        ("room_draws", c(&DRAWS)),
        ("room_lapses", c(&LAPSES)),
        ("room_leaves", c(&LEAVES)),
        ("room_drops", c(&DROPS)),
    ]
}
