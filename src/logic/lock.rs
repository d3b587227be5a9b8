//! The lock state machine: token-compared ownership, fencing tokens, FIFO waiters.
//! No Redis types and no clock: every call gets `now_ms` (unix milliseconds).
//!
//! Handoffs and expiries are recorded as [`LockEvent`]s that the caller drains with
//! [`Lock::drain_events`], so the command layer can wake clients and count without the core
//! knowing about either.

use std::collections::VecDeque;

/// Fencing tokens are replied as Redis integers.
pub const MAX_FENCE: u64 = i64::MAX as u64;

/// Bits of a clock fence below the milliseconds: room for 2^11 = 2048 grants of one key in one
/// millisecond (more than a server runs commands) before the counter runs ahead of the clock,
/// and clock fences below 2^53 for every millisecond below 2^42 (until May 2109): exact as an
/// IEEE double, so JavaScript, Lua's `tonumber` and JSON read every fence as it was issued.
/// (0.7 and earlier shifted by 20: about 1.9e18, rounded by all of them.)
pub const CLOCK_SHIFT: u32 = 11;

/// The first integer an IEEE double cannot hold exactly is 2^53 + 1: fences below this read
/// the same in every client.
pub const EXACT_IN_DOUBLES: u64 = 1 << 53;

/// How a new fencing token is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FenceMode {
    /// A hybrid logical clock: `max(last + 1, now_ms << CLOCK_SHIFT)`. A replica promoted
    /// after losing grants its master made (asynchronous replication) still issues larger
    /// fences than any of them, as long as its clock is behind the old master's by less than
    /// the failover took (the caller floors `now_ms` at the millisecond after the promotion:
    /// [`Lock::set_fences_from_ms`]).
    #[default]
    Clock,
    /// `last + 1`: small numbers, but a promoted replica that missed grants issues their
    /// fences again. Safe only without failover.
    Counter,
}

/// The fence after `last` at `now_ms`.
pub fn next_fence(last: u64, now_ms: u64, mode: FenceMode) -> u64 {
    let floor = match mode {
        FenceMode::Clock => now_ms.min(MAX_FENCE >> CLOCK_SHIFT) << CLOCK_SHIFT,
        FenceMode::Counter => 0,
    };
    // 2^63 acquisitions of one key cannot happen; saturating keeps the reply an integer.
    last.saturating_add(1).max(floor).min(MAX_FENCE)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: Vec<u8>,
    pub fence: u64,
    pub expires_at_ms: u64,
}

/// A client blocked in `LOCK.ACQUIRE ... WAIT`; `id` is chosen by the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub id: u64,
    pub token: Vec<u8>,
    pub ttl_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// The lock was free; a new fencing token was issued.
    Acquired { fence: u64 },
    /// The caller already held it; its TTL was reset and the fence is unchanged.
    Renewed { fence: u64 },
    /// Another token holds it.
    Busy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockEvent {
    /// A holder's TTL ran out.
    Expired,
    /// The waiter with this id now holds the lock under `fence`.
    Granted { waiter_id: u64, fence: u64 },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lock {
    last_fence: u64,
    holder: Option<Holder>,
    /// Runtime only: never persisted or replicated (the clients live on this server only).
    waiters: VecDeque<Waiter>,
    events: Vec<LockEvent>,
    /// Runtime only, set by the caller from the server's configuration.
    fences: FenceMode,
    /// Runtime only, set by the caller: clock fences come from this millisecond or later.
    fences_from_ms: u64,
}

impl Lock {
    /// Rebuilds a lock from persisted state; `None` if the holder's fence is not the last one.
    pub fn from_parts(last_fence: u64, holder: Option<Holder>) -> Option<Lock> {
        if last_fence > MAX_FENCE {
            return None;
        }
        if let Some(h) = &holder
            && (h.fence != last_fence || h.token.is_empty() || h.fence == 0)
        {
            return None;
        }
        Some(Lock {
            last_fence,
            holder,
            ..Lock::default()
        })
    }

    pub fn last_fence(&self) -> u64 {
        self.last_fence
    }

    /// How the next fences are chosen (the server's configuration; not persisted).
    pub fn set_fence_mode(&mut self, mode: FenceMode) {
        self.fences = mode;
    }

    /// The first millisecond clock fences may come from, whatever `now_ms` says: the one after
    /// this server became master (not persisted).
    pub fn set_fences_from_ms(&mut self, from_ms: u64) {
        self.fences_from_ms = from_ms;
    }

    /// The holder as stored, even if its TTL has run out (persistence keeps it as it is).
    pub fn stored_holder(&self) -> Option<&Holder> {
        self.holder.as_ref()
    }

    /// The holder whose TTL has not run out at `now_ms`.
    pub fn holder(&self, now_ms: u64) -> Option<&Holder> {
        self.holder.as_ref().filter(|h| now_ms < h.expires_at_ms)
    }

    /// Milliseconds left for the live holder.
    pub fn ttl_ms(&self, now_ms: u64) -> Option<u64> {
        self.holder(now_ms).map(|h| h.expires_at_ms - now_ms)
    }

    pub fn waiter_count(&self) -> usize {
        self.waiters.len()
    }

    /// When a timer must fire to hand the lock over: only while someone waits.
    pub fn handoff_due_at(&self) -> Option<u64> {
        if self.waiters.is_empty() {
            return None;
        }
        self.holder.as_ref().map(|h| h.expires_at_ms)
    }

    pub fn drain_events(&mut self) -> Vec<LockEvent> {
        std::mem::take(&mut self.events)
    }

    fn issue(&mut self, token: Vec<u8>, ttl_ms: u64, now_ms: u64) -> u64 {
        let clock_ms = now_ms.max(self.fences_from_ms);
        self.last_fence = next_fence(self.last_fence, clock_ms, self.fences);
        self.holder = Some(Holder {
            token,
            fence: self.last_fence,
            expires_at_ms: now_ms.saturating_add(ttl_ms),
        });
        self.last_fence
    }

    /// Drops an expired holder and hands a free lock to the first waiter. Every operation
    /// starts here, so an expired lock is free even when no timer has run yet.
    pub fn expire_due(&mut self, now_ms: u64) {
        if self.holder.is_some() && self.holder(now_ms).is_none() {
            self.holder = None;
            self.events.push(LockEvent::Expired);
        }
        if self.holder.is_none()
            && let Some(waiter) = self.waiters.pop_front()
        {
            let fence = self.issue(waiter.token, waiter.ttl_ms, now_ms);
            self.events.push(LockEvent::Granted {
                waiter_id: waiter.id,
                fence,
            });
        }
    }

    pub fn acquire(&mut self, token: &[u8], ttl_ms: u64, now_ms: u64) -> AcquireOutcome {
        self.expire_due(now_ms);
        match &mut self.holder {
            None => AcquireOutcome::Acquired {
                fence: self.issue(token.to_vec(), ttl_ms, now_ms),
            },
            Some(h) if h.token == token => {
                h.expires_at_ms = now_ms.saturating_add(ttl_ms);
                AcquireOutcome::Renewed { fence: h.fence }
            }
            Some(_) => AcquireOutcome::Busy,
        }
    }

    /// Queues a waiter behind the current holder (call after `acquire` said `Busy`).
    pub fn enqueue(&mut self, waiter: Waiter) {
        self.waiters.push_back(waiter);
    }

    /// Takes a waiter out of the queue (timeout or disconnect); false if it is not queued.
    pub fn remove_waiter(&mut self, waiter_id: u64) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|w| w.id != waiter_id);
        self.waiters.len() != before
    }

    pub fn has_waiter(&self, waiter_id: u64) -> bool {
        self.waiters.iter().any(|w| w.id == waiter_id)
    }

    /// Empties the queue, e.g. when the key is deleted, and returns who was waiting.
    pub fn take_waiters(&mut self) -> Vec<Waiter> {
        self.waiters.drain(..).collect()
    }

    fn held_by(&self, token: &[u8], now_ms: u64) -> bool {
        self.holder(now_ms).is_some_and(|h| h.token == token)
    }

    /// True if `token` held the lock; the next waiter (if any) then gets it.
    pub fn release(&mut self, token: &[u8], now_ms: u64) -> bool {
        self.expire_due(now_ms);
        if !self.held_by(token, now_ms) {
            return false;
        }
        self.holder = None;
        self.expire_due(now_ms);
        true
    }

    /// True if `token` holds the lock; it then expires at `now_ms + ttl_ms`.
    pub fn extend(&mut self, token: &[u8], ttl_ms: u64, now_ms: u64) -> bool {
        self.expire_due(now_ms);
        match &mut self.holder {
            Some(h) if h.token == token => {
                h.expires_at_ms = now_ms.saturating_add(ttl_ms);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::alarm::Plan;
    use super::*;

    /// A lock with small, predictable fences, for the tests that are about ownership.
    fn counter_lock() -> Lock {
        let mut lock = Lock::default();
        lock.set_fence_mode(FenceMode::Counter);
        lock
    }

    #[test]
    fn clock_fences_follow_the_clock_and_never_go_back() {
        const T: u64 = 1_764_000_000_000;
        assert_eq!(next_fence(0, T, FenceMode::Clock), T << CLOCK_SHIFT);
        assert_eq!(
            next_fence(T << CLOCK_SHIFT, T, FenceMode::Clock),
            (T << CLOCK_SHIFT) + 1
        );
        // A clock behind the last fence (a promoted replica, a step back): last + 1.
        let ahead = (T + 5_000) << CLOCK_SHIFT;
        assert_eq!(next_fence(ahead, T, FenceMode::Clock), ahead + 1);
        // An old counter-mode fence only grows.
        assert_eq!(next_fence(7, T, FenceMode::Clock), T << CLOCK_SHIFT);
        assert_eq!(next_fence(7, T, FenceMode::Counter), 8);
        // Positive 63-bit always, even for absurd clocks.
        assert_eq!(
            next_fence(0, u64::MAX, FenceMode::Clock),
            (MAX_FENCE >> CLOCK_SHIFT) << CLOCK_SHIFT
        );
        assert_eq!(next_fence(MAX_FENCE, T, FenceMode::Clock), MAX_FENCE);
        assert!(next_fence(0, u64::MAX, FenceMode::Clock) <= MAX_FENCE);
        assert_eq!(next_fence(0, 0, FenceMode::Clock), 1);
    }

    #[test]
    fn a_server_promoted_within_a_lost_grants_millisecond_fences_above_it() {
        const T: u64 = 1_764_000_000_000;
        // The old master granted at T after the last grant its replica saw (T - 5); it died
        // and the replica was promoted, all within millisecond T.
        let lost = next_fence((T - 5) << CLOCK_SHIFT, T, FenceMode::Clock);
        let mut promoted = Lock::from_parts((T - 5) << CLOCK_SHIFT, None).unwrap();
        promoted.set_fences_from_ms(T + 1);
        let AcquireOutcome::Acquired { fence } = promoted.acquire(b"c", 1_000, T) else {
            panic!("free lock not acquired");
        };
        let last_of_millisecond_t = (T << CLOCK_SHIFT) | ((1 << CLOCK_SHIFT) - 1);
        assert!(fence > last_of_millisecond_t, "{fence} after {lost}");
        assert_eq!(fence, (T + 1) << CLOCK_SHIFT);
        // The clock decides the TTL: only fences are held back.
        assert_eq!(promoted.ttl_ms(T), Some(1_000));
        // Without the floor, the lost fence is issued again.
        let mut unfloored = Lock::from_parts((T - 5) << CLOCK_SHIFT, None).unwrap();
        assert_eq!(
            unfloored.acquire(b"c", 1_000, T),
            AcquireOutcome::Acquired { fence: lost }
        );
        // Counter fences ignore the clock, floor included.
        let mut counter = counter_lock();
        counter.set_fences_from_ms(T + 1);
        assert_eq!(
            counter.acquire(b"c", 1_000, T),
            AcquireOutcome::Acquired { fence: 1 }
        );
    }

    #[test]
    fn clock_fences_are_exact_in_doubles_until_2109_and_old_fences_keep_growing() {
        const JANUARY_2100_MS: u64 = 4_102_444_800_000;
        let fence = next_fence(0, JANUARY_2100_MS, FenceMode::Clock);
        assert!(fence < EXACT_IN_DOUBLES);
        assert_eq!(fence as f64 as u64, fence);
        // The last millisecond below 2^42, and a full millisecond of grants after it.
        let last_ms = (1 << 42) - 1;
        let mut fence = next_fence(0, last_ms, FenceMode::Clock);
        for _ in 0..(1 << CLOCK_SHIFT) - 1 {
            fence = next_fence(fence, last_ms, FenceMode::Clock);
        }
        assert_eq!(fence, EXACT_IN_DOUBLES - 1);
        // A fence 0.7 issued (shift 20) is far above the clock: it grows by one.
        const T: u64 = 1_764_000_000_000;
        assert_eq!(next_fence(T << 20, T, FenceMode::Clock), (T << 20) + 1);
    }

    #[test]
    fn the_default_lock_issues_clock_fences() {
        const T: u64 = 1_764_000_000_000;
        let mut lock = Lock::default();
        assert_eq!(
            lock.acquire(b"a", 100, T),
            AcquireOutcome::Acquired {
                fence: T << CLOCK_SHIFT
            }
        );
        lock.release(b"a", T);
        // Two grants in one millisecond: the counter part keeps them apart.
        assert_eq!(
            lock.acquire(b"b", 100, T),
            AcquireOutcome::Acquired {
                fence: (T << CLOCK_SHIFT) + 1
            }
        );
        lock.release(b"b", T);
        // A lost grant far ahead: a lock restored behind it still only grows from its own
        // last fence, and from the clock.
        let mut promoted = Lock::from_parts(T << CLOCK_SHIFT, None).unwrap();
        assert_eq!(
            promoted.acquire(b"c", 100, T + 1_000),
            AcquireOutcome::Acquired {
                fence: (T + 1_000) << CLOCK_SHIFT
            }
        );
    }

    fn waiter(id: u64, token: &[u8], ttl_ms: u64) -> Waiter {
        Waiter {
            id,
            token: token.to_vec(),
            ttl_ms,
        }
    }

    #[test]
    fn acquire_free_issues_increasing_fences() {
        let mut lock = counter_lock();
        assert_eq!(
            lock.acquire(b"a", 100, 1_000),
            AcquireOutcome::Acquired { fence: 1 }
        );
        assert_eq!(lock.ttl_ms(1_040), Some(60));
        assert!(lock.release(b"a", 1_050));
        assert_eq!(lock.ttl_ms(1_050), None);
        assert_eq!(
            lock.acquire(b"b", 100, 1_060),
            AcquireOutcome::Acquired { fence: 2 }
        );
        assert_eq!(lock.last_fence(), 2);
        assert!(lock.drain_events().is_empty());
    }

    #[test]
    fn same_token_renews_without_new_fence() {
        let mut lock = counter_lock();
        lock.acquire(b"a", 100, 0);
        assert_eq!(
            lock.acquire(b"a", 500, 90),
            AcquireOutcome::Renewed { fence: 1 }
        );
        assert_eq!(lock.ttl_ms(90), Some(500));
        assert_eq!(lock.last_fence(), 1);
    }

    #[test]
    fn other_token_is_busy_until_expiry() {
        let mut lock = counter_lock();
        lock.acquire(b"a", 100, 0);
        assert_eq!(lock.acquire(b"b", 100, 99), AcquireOutcome::Busy);
        // Expiry is exclusive: at exactly expires_at the lock is free.
        assert_eq!(
            lock.acquire(b"b", 100, 100),
            AcquireOutcome::Acquired { fence: 2 }
        );
        assert_eq!(lock.drain_events(), vec![LockEvent::Expired]);
    }

    #[test]
    fn expired_holder_cannot_release_or_extend() {
        let mut lock = counter_lock();
        lock.acquire(b"a", 100, 0);
        assert!(!lock.extend(b"a", 100, 100));
        assert!(!lock.release(b"a", 150));
        lock.acquire(b"b", 100, 150);
        // The stalled first holder comes back late: nothing it does touches b's lock.
        assert!(!lock.release(b"a", 160));
        assert!(!lock.extend(b"a", 100, 160));
        assert_eq!(lock.holder(160).unwrap().token, b"b");
        assert_eq!(lock.holder(160).unwrap().fence, 2);
    }

    #[test]
    fn release_and_extend_need_the_owner() {
        let mut lock = counter_lock();
        assert!(!lock.release(b"a", 0));
        assert!(!lock.extend(b"a", 10, 0));
        lock.acquire(b"a", 100, 0);
        assert!(!lock.release(b"b", 10));
        assert!(!lock.extend(b"b", 10, 10));
        assert!(lock.extend(b"a", 1_000, 50));
        assert_eq!(lock.ttl_ms(50), Some(1_000));
        assert!(lock.release(b"a", 60));
        assert!(lock.holder(60).is_none());
    }

    #[test]
    fn release_hands_over_in_fifo_order() {
        let mut lock = counter_lock();
        lock.acquire(b"a", 100, 0);
        lock.enqueue(waiter(7, b"w1", 50));
        lock.enqueue(waiter(8, b"w2", 60));
        lock.enqueue(waiter(9, b"w3", 70));
        assert_eq!(lock.waiter_count(), 3);
        assert_eq!(lock.handoff_due_at(), Some(100));

        assert!(lock.release(b"a", 10));
        assert_eq!(
            lock.drain_events(),
            vec![LockEvent::Granted {
                waiter_id: 7,
                fence: 2
            }]
        );
        let holder = lock.holder(10).unwrap();
        assert_eq!(
            (holder.token.as_slice(), holder.expires_at_ms),
            (&b"w1"[..], 60)
        );

        assert!(lock.release(b"w1", 20));
        assert!(lock.release(b"w2", 30));
        assert_eq!(
            lock.drain_events(),
            vec![
                LockEvent::Granted {
                    waiter_id: 8,
                    fence: 3
                },
                LockEvent::Granted {
                    waiter_id: 9,
                    fence: 4
                },
            ]
        );
        assert_eq!(lock.waiter_count(), 0);
        assert_eq!(lock.handoff_due_at(), None);
    }

    #[test]
    fn expiry_hands_over_at_expire_due() {
        let mut lock = counter_lock();
        lock.acquire(b"a", 100, 0);
        lock.enqueue(waiter(1, b"w", 30));
        lock.expire_due(99);
        assert!(lock.drain_events().is_empty());
        lock.expire_due(100);
        assert_eq!(
            lock.drain_events(),
            vec![
                LockEvent::Expired,
                LockEvent::Granted {
                    waiter_id: 1,
                    fence: 2
                }
            ]
        );
        assert_eq!(lock.ttl_ms(100), Some(30));
    }

    #[test]
    fn newcomer_does_not_jump_the_queue_after_expiry() {
        let mut lock = counter_lock();
        lock.acquire(b"a", 100, 0);
        lock.enqueue(waiter(1, b"w", 30));
        assert_eq!(lock.acquire(b"n", 10, 150), AcquireOutcome::Busy);
        assert_eq!(lock.holder(150).unwrap().token, b"w");
    }

    #[test]
    fn removed_waiters_are_never_granted() {
        let mut lock = counter_lock();
        lock.acquire(b"a", 100, 0);
        lock.enqueue(waiter(1, b"w1", 30));
        lock.enqueue(waiter(2, b"w2", 30));
        assert!(lock.has_waiter(1));
        assert!(lock.remove_waiter(1));
        assert!(!lock.remove_waiter(1));
        assert!(!lock.has_waiter(1));
        assert!(lock.release(b"a", 5));
        assert_eq!(
            lock.drain_events(),
            vec![LockEvent::Granted {
                waiter_id: 2,
                fence: 2
            }]
        );
        lock.enqueue(waiter(3, b"w3", 30));
        assert_eq!(lock.take_waiters(), vec![waiter(3, b"w3", 30)]);
        assert_eq!(lock.waiter_count(), 0);
    }

    #[test]
    fn from_parts_validates_and_keeps_expired_holder_stored() {
        assert!(Lock::from_parts(MAX_FENCE + 1, None).is_none());
        let holder = Holder {
            token: b"a".to_vec(),
            fence: 5,
            expires_at_ms: 100,
        };
        assert!(Lock::from_parts(6, Some(holder.clone())).is_none());
        assert!(
            Lock::from_parts(
                5,
                Some(Holder {
                    token: Vec::new(),
                    ..holder.clone()
                })
            )
            .is_none()
        );
        assert!(
            Lock::from_parts(
                0,
                Some(Holder {
                    fence: 0,
                    ..holder.clone()
                })
            )
            .is_none()
        );
        let mut lock = Lock::from_parts(5, Some(holder.clone())).unwrap();
        lock.set_fence_mode(FenceMode::Counter);
        assert_eq!(lock.stored_holder(), Some(&holder));
        assert!(lock.holder(100).is_none());
        assert_eq!(
            lock.acquire(b"b", 10, 200),
            AcquireOutcome::Acquired { fence: 6 }
        );
    }

    /// A key driven as the command layer drives it: one timer planned by `plan` after every
    /// change, blocked clients that time out, and a fake clock. `Err` names the first moment a
    /// waiter was still waiting while no live holder had the lock.
    fn run_model(seed: u64, plan: fn(Option<u64>, Option<u64>) -> Plan) -> Result<(), String> {
        let mut rng = seed.max(1);
        let mut next = move |bound: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound
        };
        let mut lock = counter_lock();
        let mut now = 1_000u64;
        let mut timer: Option<u64> = None;
        // Blocked clients: waiter id and when its WAIT runs out.
        let mut blocked: Vec<(u64, u64)> = Vec::new();
        let mut next_id = 0;
        let tokens: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
        let replan = |lock: &Lock, timer: &mut Option<u64>| {
            *timer = match plan(*timer, lock.handoff_due_at()) {
                Plan::Keep => *timer,
                Plan::Arm(due) => Some(due),
                Plan::Stop | Plan::Idle => None,
            };
        };
        let forget_granted = |lock: &mut Lock, blocked: &mut Vec<(u64, u64)>| {
            for event in lock.drain_events() {
                if let LockEvent::Granted { waiter_id, .. } = event {
                    blocked.retain(|&(id, _)| id != waiter_id);
                }
            }
        };
        let check = |lock: &Lock, at: u64| {
            if lock.waiter_count() > 0 && lock.holder(at).is_none() {
                Err(format!(
                    "seed {seed}: a waiter still waits at {at} on a free lock"
                ))
            } else {
                Ok(())
            }
        };
        for _ in 0..400 {
            // Time passes: the timer and blocked clients' timeouts fire in order.
            let until = now + next(120);
            loop {
                let timeout = blocked.iter().map(|&(_, at)| at).min();
                let Some(at) = [timer, timeout].into_iter().flatten().min() else {
                    break;
                };
                if at > until {
                    break;
                }
                now = now.max(at);
                if timer == Some(at) {
                    timer = None;
                    lock.expire_due(now);
                } else {
                    let (id, _) = *blocked.iter().find(|&&(_, t)| t == at).unwrap();
                    blocked.retain(|&(i, _)| i != id);
                    lock.remove_waiter(id);
                }
                forget_granted(&mut lock, &mut blocked);
                replan(&lock, &mut timer);
                check(&lock, now)?;
            }
            now = until;
            let token = tokens[next(4) as usize];
            let ttl = 1 + next(400);
            match next(5) {
                0 | 1 => {
                    if lock.acquire(token, ttl, now) == AcquireOutcome::Busy && next(3) > 0 {
                        next_id += 1;
                        lock.enqueue(waiter(next_id, token, ttl));
                        blocked.push((next_id, now + 1 + next(600)));
                    }
                }
                2 => {
                    lock.release(token, now);
                }
                3 => {
                    lock.extend(token, ttl, now);
                }
                _ => {
                    if let Some(&(id, _)) = blocked.get(next(4) as usize) {
                        // A client disconnects.
                        blocked.retain(|&(i, _)| i != id);
                        lock.remove_waiter(id);
                    }
                }
            }
            forget_granted(&mut lock, &mut blocked);
            replan(&lock, &mut timer);
            if let (Some(at), Some(due)) = (timer, lock.handoff_due_at())
                && at > due
            {
                return Err(format!(
                    "seed {seed}: timer at {at} after the deadline {due}"
                ));
            }
            check(&lock, now)?;
        }
        Ok(())
    }

    #[test]
    fn a_waiter_gets_the_lock_at_the_holders_deadline_in_every_history() {
        for seed in 1..=300 {
            run_model(seed, super::super::alarm::plan).unwrap();
        }
    }

    #[test]
    fn the_model_catches_a_timer_kept_for_a_later_deadline() {
        // The planner before the fix: whatever timer is armed counts as the key's timer.
        fn first_timer_wins(armed: Option<u64>, wanted: Option<u64>) -> Plan {
            match (armed, wanted) {
                (Some(_), _) => Plan::Keep,
                (None, Some(due)) => Plan::Arm(due),
                (None, None) => Plan::Idle,
            }
        }
        assert!((1..=300).any(|seed| run_model(seed, first_timer_wins).is_err()));
    }

    #[test]
    fn fence_saturates_and_ttl_saturates() {
        let mut lock = Lock::from_parts(MAX_FENCE, None).unwrap();
        assert_eq!(
            lock.acquire(b"a", u64::MAX, 10),
            AcquireOutcome::Acquired { fence: MAX_FENCE }
        );
        assert_eq!(lock.holder(u64::MAX - 1).unwrap().expires_at_ms, u64::MAX);
    }
}
