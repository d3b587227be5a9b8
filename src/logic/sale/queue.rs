//! The sale's waiting room (`QUEUE`): the room itself is `logic::room`; here it meets the
//! stock. Every change steps it to its clock first (with the hold expiries), a purchase needs
//! an admission, a purchase leaves the room, and the room closes (its memory freed) once
//! nothing is left to sell, opening again, first come first served, if units come back.

use super::{EventKind, Sale, SaleError, SaleEvent, room_seed};
use crate::logic::room::{Move, Place, Room, RoomConfig, RoomState};

impl Sale {
    pub fn room(&self) -> Option<&Room> {
        self.room.as_deref()
    }

    /// Puts back a decoded waiting room (its settings come with it: they are stored last).
    pub fn set_decoded_room(
        &mut self,
        config: RoomConfig,
        state: RoomState,
    ) -> Result<(), SaleError> {
        let seed = room_seed(&self.totals.seed);
        let room = Room::from_state(config, seed, self.config.start_ms, state)
            .map_err(SaleError::Invalid)?;
        self.config.queue = Some(config);
        self.room = Some(Box::new(room));
        Ok(())
    }

    /// Whether nothing is left to sell: no unit left and none held (a hold may come back). A
    /// partition may still get units from the others until its client found them all empty and
    /// sealed it: its room stays open while it is only drained.
    fn sold_out_for_good(&self, now_ms: u64) -> bool {
        self.remaining == 0
            && self.held == 0
            && (self.config.partition.is_none() || self.is_sealed(now_ms))
    }

    /// Steps the room to `now_ms` (run with the hold expiries, first in every change): closes
    /// or reopens it with the stock, lapses windows, admits at the rate.
    pub(super) fn step_room(&mut self, now_ms: u64) {
        self.settle_room(now_ms);
        let remaining = self.remaining;
        let Some(room) = self.room.as_mut() else {
            return;
        };
        let moves = room.step(now_ms, remaining);
        self.record_moves(&moves);
    }

    /// What settling the room at `now_ms` would do: `Some(true)` close it (sold out for good),
    /// `Some(false)` open it again (units came back), `None` nothing.
    fn room_settling(&self, now_ms: u64) -> Option<bool> {
        let room = self.room.as_ref()?;
        let sold_out = self.sold_out_for_good(now_ms);
        if sold_out && !room.is_closed() {
            Some(true)
        } else if !sold_out && room.is_closed() && self.remaining > 0 {
            Some(false)
        } else {
            None
        }
    }

    /// Closes the room once the sale is sold out for good; opens it again when units came back.
    pub(super) fn settle_room(&mut self, now_ms: u64) {
        let Some(close) = self.room_settling(now_ms) else {
            return;
        };
        let room = self.room.as_mut().expect("a room to settle");
        if close {
            room.close(now_ms);
        } else {
            room.reopen(now_ms);
        }
        self.changed = true;
    }

    /// Whether stepping the room at `now_ms` would change it.
    pub(super) fn room_due(&self, now_ms: u64) -> bool {
        self.room_settling(now_ms).is_some()
            || self
                .room
                .as_ref()
                .is_some_and(|room| room.next_step_ms().is_some_and(|at| at <= now_ms))
    }

    /// When the room must be stepped next (the timer's).
    pub fn next_room_step(&self) -> Option<u64> {
        self.room.as_ref().and_then(|room| room.next_step_ms())
    }

    /// Units the room promised: one per admitted user who has not bought, its window open.
    pub(super) fn promised_units(&self) -> u64 {
        self.room.as_ref().map_or(0, |room| room.unbought())
    }

    /// Whether `user` may buy: always in a sale without QUEUE.
    pub(super) fn admitted(&self, user: &[u8]) -> bool {
        self.room.as_ref().is_none_or(|room| room.may_buy(user))
    }

    /// A purchase of `user` at `now_ms` succeeded: it leaves the room.
    pub(super) fn left_room(&mut self, user: &[u8], now_ms: u64) {
        if let Some(room) = self.room.as_mut() {
            room.bought(user);
        }
        self.settle_room(now_ms);
    }

    /// `SECKILL.JOIN`: `user` in the waiting room, and where it stands.
    pub fn join(&mut self, user: &[u8], now_ms: u64) -> Result<Place, SaleError> {
        if self.room.is_none() {
            return Err(SaleError::NoQueue);
        }
        self.expire_due(now_ms);
        let room = self.room.as_mut().expect("checked");
        let before = room.waiting();
        let place = room.join(user, now_ms)?;
        // With PRESENCE a JOIN again keeps the place: a replica must see it to drop the same.
        if room.waiting() != before
            || (room.config().presence_ms.is_some()
                && matches!(place, Place::Waiting(_) | Place::Cohort(_)))
        {
            self.changed = true;
        }
        Ok(place)
    }

    /// `SECKILL.POSITION`: where `user` stands, without joining (`None`: not in the room).
    pub fn position(&self, user: &[u8]) -> Result<Option<Place>, SaleError> {
        let room = self.room.as_ref().ok_or(SaleError::NoQueue)?;
        if user.is_empty() {
            return Err(SaleError::EmptyUser);
        }
        Ok(room.place(user))
    }

    /// `WITHETA`: the ETA (ms) of a user at `place` (0 admitted; -1 sold out or unknown).
    pub fn eta_ms(&self, place: Place, now_ms: u64) -> Result<i64, SaleError> {
        let room = self.room.as_ref().ok_or(SaleError::NoQueue)?;
        Ok(room.eta_ms(place, now_ms))
    }

    /// `SECKILL.LEAVE`: takes `user` out of the waiting room (a waiting user's place, or an
    /// admitted user's unit, goes to the next); whether it was in the room.
    pub fn leave(&mut self, user: &[u8], now_ms: u64) -> Result<bool, SaleError> {
        if self.room.is_none() {
            return Err(SaleError::NoQueue);
        }
        if user.is_empty() {
            return Err(SaleError::EmptyUser);
        }
        self.expire_due(now_ms);
        let remaining = self.remaining;
        let room = self.room.as_mut().expect("checked");
        let Some(moves) = room.leave(user, now_ms, remaining) else {
            return Ok(false);
        };
        self.record_moves(&moves);
        Ok(true)
    }

    /// `SECKILL.ADMIT`: admits up to `n` users by hand; replies how many were.
    pub fn admit(&mut self, n: u64, now_ms: u64) -> Result<u64, SaleError> {
        if self.room.is_none() {
            return Err(SaleError::NoQueue);
        }
        self.expire_due(now_ms);
        let remaining = self.remaining;
        let moves = self
            .room
            .as_mut()
            .expect("checked")
            .admit(n, now_ms, remaining);
        self.record_moves(&moves);
        Ok(moves.iter().filter(|m| matches!(m, Move::Admit(_))).count() as u64)
    }

    /// What the room did, as changes (replicated, so a replica's room follows its master's
    /// timer) and one event each.
    fn record_moves(&mut self, moves: &[Move]) {
        for &step in moves {
            self.changed = true;
            let (kind, user, qty) = match step {
                Move::Draw(users) => (EventKind::Draw, None, users),
                Move::Admit(at) => (EventKind::Admit, Some(at), 0),
                Move::Lapse(at) => (EventKind::Lapse, Some(at), 0),
                Move::Drop(at) => (EventKind::Drop, Some(at), 0),
                Move::Leave(at, place) => {
                    let position = match place {
                        Place::Waiting(position) => position,
                        _ => 0,
                    };
                    (EventKind::Leave, Some(at), position)
                }
            };
            self.events.push(SaleEvent {
                kind,
                record_id: None,
                qty,
                order: 0,
                remaining: self.remaining,
                room_user: user,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{T0, config};
    use super::super::{Partition, Sale, SaleConfig, TryOutcome};
    use crate::logic::room::{Place, RoomConfig};

    const ROOM: RoomConfig = RoomConfig {
        rate: None,
        window_ms: 60_000,
        presence_ms: None,
    };

    fn with_room(partition: Option<Partition>) -> Sale {
        let config = SaleConfig {
            queue: Some(ROOM),
            partition,
            ..config(1, 1)
        };
        Sale::new(config, [1; 16]).unwrap()
    }

    #[test]
    fn a_sold_out_sale_closes_its_room_at_once() {
        let mut sale = with_room(None);
        sale.join(b"a", T0).unwrap();
        sale.join(b"b", T0).unwrap();
        assert_eq!(sale.admit(5, T0).unwrap(), 1);
        assert!(matches!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        ));
        assert_eq!(sale.position(b"b").unwrap(), Some(Place::SoldOut));
    }

    #[test]
    fn a_drained_partition_keeps_its_room_until_it_is_sealed_and_opens_it_for_lent_units() {
        let mut sale = with_room(Some(Partition {
            manifest: b"s".to_vec(),
            index: 1,
            count: 2,
        }));
        sale.join(b"a", T0).unwrap();
        sale.join(b"b", T0).unwrap();
        assert_eq!(sale.admit(5, T0).unwrap(), 1, "one unit: one admitted");
        assert!(matches!(
            sale.try_buy(b"a", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        ));
        // Drained, not sold out: b still waits, and its TRY asks for stock (-5, its client
        // borrows) before it is told it is not admitted.
        assert_eq!(sale.position(b"b").unwrap(), Some(Place::Waiting(1)));
        assert_eq!(sale.try_buy(b"b", 1, T0), Ok(TryOutcome::Drained));
        assert!(!sale.room_due(T0));
        // Units lent by another partition: b is admitted by hand (or at the rate).
        assert!(sale.absorb(b"t1", 1, b"{s/0}", T0).unwrap());
        assert_eq!(sale.try_buy(b"b", 1, T0), Ok(TryOutcome::NotAdmitted));
        assert_eq!(sale.admit(5, T0).unwrap(), 1);
        assert!(matches!(
            sale.try_buy(b"b", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        ));
        // Units promised to an admitted user are not lent away.
        assert!(sale.absorb(b"t3", 2, b"{s/0}", T0).unwrap());
        sale.join(b"e", T0).unwrap();
        assert_eq!(
            sale.admit(5, T0).unwrap(),
            1,
            "e admitted: one of the two units is its"
        );
        assert_eq!(sale.lend(b"t4", 2, b"{s/0}", T0).unwrap(), 1);
        assert_eq!(sale.lend(b"t5", 1, b"{s/0}", T0).unwrap(), 0);
        assert!(matches!(
            sale.try_buy(b"e", 1, T0),
            Ok(TryOutcome::Bought { remaining: 0 })
        ));
        // Every partition found empty: sealed, and the room closes as a sold-out sale's.
        sale.join(b"c", T0).unwrap();
        assert!(sale.seal(1_000, T0).unwrap());
        assert_eq!(sale.position(b"c").unwrap(), Some(Place::SoldOut));
        assert_eq!(sale.join(b"d", T0).unwrap(), Place::SoldOut);
        // The seal lapsing brings no unit back: the room stays closed, and nothing is due.
        assert!(!sale.room_due(T0 + 5_000));
        assert_eq!(sale.join(b"d", T0 + 5_000).unwrap(), Place::SoldOut);
        // A unit lent later opens a new room, first come first served.
        assert!(sale.absorb(b"t2", 1, b"{s/0}", T0 + 6_000).unwrap());
        assert_eq!(sale.join(b"d", T0 + 6_000).unwrap(), Place::Waiting(1));
    }
}
