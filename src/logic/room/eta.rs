//! How long a waiting user has left to wait (`WITHETA`): what the room knows of its future
//! admissions. At a rate, the tick that reaches the user; admitted by hand, the pace of the
//! last minute's admissions; before START, the time until START.

use super::{Place, Rate};
use std::collections::VecDeque;

/// How far back the pace of admissions by hand is measured.
pub const PACE_WINDOW_MS: u64 = 60_000;

/// The shortest span a pace is measured over: a burst admitted in one ms is no pace.
const MIN_PACE_SPAN_MS: u64 = 1_000;

/// The room's recent admissions, `(ms, users)`, oldest first, within [`PACE_WINDOW_MS`]. Not
/// stored: after a restart the pace is unknown until the next admissions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pace {
    recent: VecDeque<(u64, u64)>,
}

impl Pace {
    pub fn admitted(&mut self, users: u64, now_ms: u64) {
        if users == 0 {
            return;
        }
        self.forget_before(now_ms);
        match self.recent.back_mut() {
            // One entry per second at most: a room admitting all day holds 60.
            Some((at, n)) if now_ms < *at + 1_000 => *n += users,
            _ => self.recent.push_back((now_ms, users)),
        }
    }

    fn forget_before(&mut self, now_ms: u64) {
        let oldest = now_ms.saturating_sub(PACE_WINDOW_MS);
        while self.recent.front().is_some_and(|&(at, _)| at < oldest) {
            self.recent.pop_front();
        }
    }

    /// Users admitted within the window before `now_ms`, and the span they took (ms).
    fn within(&self, now_ms: u64) -> Option<(u64, u64)> {
        let oldest = now_ms.saturating_sub(PACE_WINDOW_MS);
        let mut users = 0;
        let mut first = None;
        for &(at, n) in self.recent.iter().filter(|&&(at, _)| at >= oldest) {
            first.get_or_insert(at);
            users += n;
        }
        let span = now_ms.saturating_sub(first?).max(MIN_PACE_SPAN_MS);
        (users > 0).then_some((users, span))
    }
}

/// What the room knows of when a user is admitted.
pub struct Outlook<'a> {
    pub start_ms: Option<u64>,
    pub rate: Option<Rate>,
    pub next_tick_ms: Option<u64>,
    pub pace: &'a Pace,
}

impl Outlook<'_> {
    /// The ETA (ms) of a user at `place`: 0 admitted, -1 sold out or nothing known.
    pub fn eta_ms(&self, place: Place, now_ms: u64) -> i64 {
        let ms = match place {
            Place::Admitted => Some(0),
            Place::SoldOut => None,
            Place::Cohort(_) => self.start_ms.map(|start| start.saturating_sub(now_ms)),
            Place::Waiting(position) => self.waiting(position, now_ms),
        };
        ms.map_or(-1, |ms| ms.min(i64::MAX as u64) as i64)
    }

    fn waiting(&self, position: u64, now_ms: u64) -> Option<u64> {
        if let Some(rate) = self.rate {
            // The first step after START admits at once; later ones at each tick.
            let next = self.next_tick_ms.unwrap_or(now_ms).saturating_sub(now_ms);
            let ticks_after = position.div_ceil(rate.users).saturating_sub(1);
            return Some(next.saturating_add(ticks_after.saturating_mul(rate.per_ms)));
        }
        let (users, span) = self.pace.within(now_ms)?;
        Some(position.saturating_mul(span).div_ceil(users))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 5_000_000;

    fn outlook(rate: Option<(u64, u64)>, next_tick_ms: Option<u64>, pace: &Pace) -> Outlook<'_> {
        Outlook {
            start_ms: Some(NOW + 3_000),
            rate: rate.map(|(users, per_ms)| Rate { users, per_ms }),
            next_tick_ms,
            pace,
        }
    }

    #[test]
    fn at_a_rate_the_eta_is_the_tick_that_reaches_the_user() {
        let pace = Pace::default();
        let at = outlook(Some((100, 100)), Some(NOW + 40), &pace);
        assert_eq!(at.eta_ms(Place::Waiting(1), NOW), 40);
        assert_eq!(at.eta_ms(Place::Waiting(100), NOW), 40);
        assert_eq!(at.eta_ms(Place::Waiting(101), NOW), 140);
        assert_eq!(at.eta_ms(Place::Waiting(1_000), NOW), 940);
        let first = outlook(Some((100, 100)), None, &pace);
        assert_eq!(
            first.eta_ms(Place::Waiting(150), NOW),
            100,
            "first tick at once"
        );
    }

    #[test]
    fn before_start_it_counts_down_to_start_and_admitted_or_sold_out_users_are_told_so() {
        let pace = Pace::default();
        let at = outlook(None, None, &pace);
        assert_eq!(at.eta_ms(Place::Cohort(7), NOW), 3_000);
        assert_eq!(at.eta_ms(Place::Cohort(7), NOW + 2_999), 1);
        assert_eq!(at.eta_ms(Place::Cohort(7), NOW + 9_000), 0);
        assert_eq!(at.eta_ms(Place::Admitted, NOW), 0);
        assert_eq!(at.eta_ms(Place::SoldOut, NOW), -1);
        let no_start = Outlook {
            start_ms: None,
            ..outlook(None, None, &pace)
        };
        assert_eq!(no_start.eta_ms(Place::Cohort(1), NOW), -1);
    }

    #[test]
    fn admitted_by_hand_the_eta_follows_the_last_minutes_pace() {
        let mut pace = Pace::default();
        assert_eq!(
            outlook(None, None, &pace).eta_ms(Place::Waiting(5), NOW),
            -1,
            "nothing known before the first admission"
        );
        // 10 users every 2 s for 20 s: 5 a second.
        for s in 0..10 {
            pace.admitted(10, NOW + s * 2_000);
        }
        pace.admitted(0, NOW + 19_000);
        let at = outlook(None, None, &pace);
        let now = NOW + 20_000;
        assert_eq!(at.eta_ms(Place::Waiting(100), now), 20_000);
        // Admissions older than a minute are forgotten; a lone burst counts over a second.
        assert_eq!(at.eta_ms(Place::Waiting(1), NOW + 200_000), -1);
        let mut burst = Pace::default();
        burst.admitted(2, NOW);
        burst.admitted(2, NOW + 500);
        assert_eq!(burst.recent.len(), 1, "one entry a second");
        let at = outlook(None, None, &burst);
        assert_eq!(at.eta_ms(Place::Waiting(8), NOW + 500), 2_000);
    }
}
