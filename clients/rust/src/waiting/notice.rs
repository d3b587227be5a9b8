//! When a waiting page shows a new place: its turn, a sell-out, its first place and the draw at
//! once; a mere move of its number (everyone moves up at each admission) at most every
//! `update` (Python's `update_ms`, whose reader wakes its waiters for moves at most that
//! often; zero: every move). Pure: the caller gives the clock.

use crate::info::Place;
use std::time::{Duration, Instant};

/// What a page last showed, and when.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shown {
    pub place: Place,
    pub at: Instant,
}

impl Shown {
    /// `place`, shown now (a page stamps each place it yields).
    pub fn now(place: Place) -> Shown {
        Shown {
            place,
            at: Instant::now(),
        }
    }
}

/// Whether a page shows its current place.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Show {
    /// Nothing to show: its number has not changed.
    Nothing,
    Now,
    /// A move held back until then (`update` after the last one shown).
    At(Instant),
}

pub(crate) fn show(shown: Option<&Shown>, place: &Place, update: Duration, now: Instant) -> Show {
    let Some(shown) = shown else {
        return Show::Now;
    };
    if shown.place.position == place.position {
        return Show::Nothing;
    }
    let news = place.position <= 0 || shown.place.drawn != place.drawn;
    let due = shown.at + update;
    if news || now >= due {
        Show::Now
    } else {
        Show::At(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPDATE: Duration = Duration::from_secs(3);

    fn place(position: i64, drawn: bool) -> Place {
        Place {
            position,
            eta_ms: -1,
            drawn,
        }
    }

    fn shown(position: i64, at: Instant) -> Shown {
        Shown {
            place: place(position, true),
            at,
        }
    }

    #[test]
    fn the_first_place_is_shown_at_once() {
        let now = Instant::now();
        assert_eq!(show(None, &place(40, true), UPDATE, now), Show::Now);
    }

    #[test]
    fn an_unchanged_number_shows_nothing_whatever_the_time() {
        let at = Instant::now();
        let later = at + UPDATE * 10;
        assert_eq!(
            show(Some(&shown(40, at)), &place(40, true), UPDATE, later),
            Show::Nothing
        );
    }

    #[test]
    fn a_move_waits_for_update_after_the_last_shown_then_shows() {
        let at = Instant::now();
        let last = shown(40, at);
        let early = at + Duration::from_millis(10);
        assert_eq!(
            show(Some(&last), &place(39, true), UPDATE, early),
            Show::At(at + UPDATE)
        );
        assert_eq!(
            show(Some(&last), &place(12, true), UPDATE, at + UPDATE),
            Show::Now
        );
    }

    #[test]
    fn a_turn_a_sell_out_and_the_draw_are_shown_at_once() {
        let at = Instant::now();
        let last = shown(40, at);
        assert_eq!(show(Some(&last), &place(0, true), UPDATE, at), Show::Now);
        assert_eq!(show(Some(&last), &place(-1, true), UPDATE, at), Show::Now);
        let before_start = Shown {
            place: place(7, false),
            at,
        };
        assert_eq!(
            show(Some(&before_start), &place(3, true), UPDATE, at),
            Show::Now
        );
        // Before START the cohort grows: a move like any other.
        assert_eq!(
            show(Some(&before_start), &place(9, false), UPDATE, at),
            Show::At(at + UPDATE)
        );
    }
}
