//! The sale's waiting room (`QUEUE`): the room itself is `logic::room`; here it meets the
//! stock. Every change steps it to its clock first (with the hold expiries), a purchase needs
//! an admission, a purchase leaves the room, and the room closes (its memory freed) once
//! nothing is left to sell, opening again, first come first served, if units come back.

use super::{EventKind, Sale, SaleError, SaleEvent, room_seed};
use crate::logic::room::{Place, Room, RoomConfig, RoomState, UserRef};

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

    /// Whether nothing is left to sell: no unit left and none held (a hold may come back).
    fn sold_out_for_good(&self) -> bool {
        self.remaining == 0 && self.held == 0
    }

    /// Steps the room to `now_ms` (run with the hold expiries, first in every change): closes
    /// or reopens it with the stock, lapses windows, admits at the rate.
    pub(super) fn step_room(&mut self, now_ms: u64) {
        self.settle_room();
        let remaining = self.remaining;
        let Some(room) = self.room.as_mut() else {
            return;
        };
        let admitted = room.step(now_ms, remaining);
        if !admitted.is_empty() {
            self.record_admissions(&admitted);
        }
    }

    /// Closes the room once the sale is sold out for good; opens it again when units came back.
    pub(super) fn settle_room(&mut self) {
        let sold_out = self.sold_out_for_good();
        if let Some(room) = self.room.as_mut() {
            if sold_out && !room.is_closed() {
                room.close();
                self.changed = true;
            } else if !sold_out && room.is_closed() && self.remaining > 0 {
                room.reopen();
                self.changed = true;
            }
        }
    }

    /// Whether stepping the room at `now_ms` would change it.
    pub(super) fn room_due(&self, now_ms: u64) -> bool {
        self.room.as_ref().is_some_and(|room| {
            room.next_step_ms().is_some_and(|at| at <= now_ms)
                || room.is_closed() != self.sold_out_for_good()
        })
    }

    /// When the room must be stepped next (the timer's).
    pub fn next_room_step(&self) -> Option<u64> {
        self.room.as_ref().and_then(|room| room.next_step_ms())
    }

    /// Whether `user` may buy: always in a sale without QUEUE.
    pub(super) fn admitted(&self, user: &[u8]) -> bool {
        self.room.as_ref().is_none_or(|room| room.may_buy(user))
    }

    /// A purchase of `user` succeeded: it leaves the room.
    pub(super) fn left_room(&mut self, user: &[u8]) {
        if let Some(room) = self.room.as_mut() {
            room.bought(user);
        }
        self.settle_room();
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
        if room.waiting() != before {
            self.changed = true;
        }
        Ok(place)
    }

    /// `SECKILL.POSITION`: where `user` stands, without joining (`None`: never joined).
    pub fn position(&self, user: &[u8]) -> Result<Option<Place>, SaleError> {
        let room = self.room.as_ref().ok_or(SaleError::NoQueue)?;
        if user.is_empty() {
            return Err(SaleError::EmptyUser);
        }
        Ok(room.place(user))
    }

    /// `SECKILL.ADMIT`: admits up to `n` users by hand; replies how many were.
    pub fn admit(&mut self, n: u64, now_ms: u64) -> Result<u64, SaleError> {
        if self.room.is_none() {
            return Err(SaleError::NoQueue);
        }
        self.expire_due(now_ms);
        let remaining = self.remaining;
        let admitted = self
            .room
            .as_mut()
            .expect("checked")
            .admit(n, now_ms, remaining);
        self.record_admissions(&admitted);
        Ok(admitted.len() as u64)
    }

    fn record_admissions(&mut self, admitted: &[UserRef]) {
        for &at in admitted {
            self.changed = true;
            self.events.push(SaleEvent {
                kind: EventKind::Admit,
                record_id: None,
                qty: 0,
                order: 0,
                remaining: self.remaining,
                admitted: Some(at),
            });
        }
    }
}
