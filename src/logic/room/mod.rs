//! The waiting room of a sale made with `QUEUE` (#43): who may buy, and when. Pure, like the
//! sale: the command layer passes the clock and the units left in, and replicates what a step
//! did at the master's clock, so a replica or an AOF replay reaches the same room.
//!
//! Everyone who joins before START forms one cohort, put in a uniformly random order drawn
//! from the sale's seed once START has passed; later joiners queue behind it in arrival order.
//! Users leave the queue's head when admitted: at a rate (`ADMIT n PER ms`), by hand
//! (`SECKILL.ADMIT`), and in place of an admitted user whose window lapsed. Admission stops
//! while the admitted users who have not bought cover the units left, so nobody is admitted
//! to a sale that cannot serve them. Once the sale is sold out the room is closed and its
//! memory freed.

mod shuffle;
mod table;

pub use shuffle::{SplitMix64, shuffle};
use table::grow_gently;
pub use table::{RoomUsers, Status, UserRef};

use std::collections::VecDeque;

/// An admitted user's window to buy when `QUEUE` gives none.
pub const DEFAULT_WINDOW_MS: u64 = 60_000;

/// `ADMIT users PER per_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub users: u64,
    pub per_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoomConfig {
    /// Automatic admission; `None`: by hand only.
    pub rate: Option<Rate>,
    /// How long an admitted user may buy.
    pub window_ms: u64,
}

/// What JOIN and POSITION tell a user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Before START: no place exists yet; the cohort has this many users.
    Cohort(u64),
    /// Waiting: this many users are ahead of it, plus one.
    Waiting(u64),
    /// Admitted (or already bought): it may buy.
    Admitted,
    /// The sale sold out: nobody waits any more.
    SoldOut,
}

impl Place {
    /// The integer JOIN and POSITION reply.
    pub fn reply(self) -> i64 {
        match self {
            Place::Cohort(n) | Place::Waiting(n) => n as i64,
            Place::Admitted => 0,
            Place::SoldOut => -1,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoomError {
    /// A user id must not be empty.
    EmptyUser,
    /// The room holds all the users it can (about 4 GiB of ids, or 4 billion users).
    Full,
}

/// A room as stored: users in join order, the queue and the open windows by user index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomState<'a> {
    pub closed: bool,
    pub drawn: bool,
    pub cohort: u64,
    pub head: u64,
    pub next_tick_ms: Option<u64>,
    /// (user, status, place) of each user.
    pub users: Vec<(&'a [u8], Status, u32)>,
    pub queue: Vec<u32>,
    pub admitted: Vec<(u32, u64)>,
}

#[derive(Clone)]
pub struct Room {
    config: RoomConfig,
    /// The cohort's shuffle is drawn from this (the sale's seed).
    seed: u64,
    /// When START passes (unix ms); `None`: no cohort, every joiner queues in arrival order.
    start_ms: Option<u64>,
    users: RoomUsers,
    /// Users in admission order; `queue[..head]` have left it.
    queue: Vec<UserRef>,
    head: usize,
    /// `queue[..cohort]` joined before START.
    cohort: usize,
    /// The cohort's order was drawn (START passed and the room was stepped since).
    drawn: bool,
    /// Admitted users and their window's end, in admission order (so in deadline order);
    /// entries of users who bought since are skipped when met.
    admitted: VecDeque<(UserRef, u64)>,
    /// Admitted users who have not bought and whose window is open.
    unbought: u64,
    /// The next instant the rate admits its users (`None` until the room is first stepped
    /// after START: then at once).
    next_tick_ms: Option<u64>,
    closed: bool,
}

impl Room {
    /// A room whose cohort forms until `start_ms` (`None`: no cohort), made at `now_ms`.
    pub fn new(config: RoomConfig, seed: u64, start_ms: Option<u64>, now_ms: u64) -> Room {
        Room {
            config,
            seed,
            start_ms,
            users: RoomUsers::default(),
            queue: Vec::new(),
            head: 0,
            cohort: 0,
            drawn: start_ms.is_none_or(|start| start <= now_ms),
            admitted: VecDeque::new(),
            unbought: 0,
            next_tick_ms: None,
            closed: false,
        }
    }

    pub fn config(&self) -> RoomConfig {
        self.config
    }

    /// Users waiting in the queue.
    pub fn waiting(&self) -> u64 {
        (self.queue.len() - self.head) as u64
    }

    /// Admitted users who have not bought, their window open.
    pub fn unbought(&self) -> u64 {
        self.unbought
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Puts `user` in the room (a user already there keeps its place; one whose window
    /// lapsed queues again at the back), and tells it where it stands.
    pub fn join(&mut self, user: &[u8], now_ms: u64) -> Result<Place, RoomError> {
        if user.is_empty() {
            return Err(RoomError::EmptyUser);
        }
        if self.closed {
            return Ok(Place::SoldOut);
        }
        self.draw_if_due(now_ms);
        let queued = self.queue.len() as u32;
        match self.users.find(user) {
            Some(at) if self.users.status(at) == Status::Lapsed => {
                self.users.set(at, Status::Waiting, queued);
                grow_gently(&mut self.queue, 1);
                self.queue.push(at);
            }
            Some(_) => {}
            None => {
                if !self.users.has_room(user.len()) || self.queue.len() >= u32::MAX as usize {
                    return Err(RoomError::Full);
                }
                let at = self.users.insert(user, Status::Waiting, queued);
                grow_gently(&mut self.queue, 1);
                self.queue.push(at);
                if !self.drawn {
                    self.cohort += 1;
                }
            }
        }
        Ok(self.place(user).expect("joined"))
    }

    /// Where `user` stands, without joining (`None`: it never joined). A read: before the
    /// room is stepped past START, the cohort still has no order.
    pub fn place(&self, user: &[u8]) -> Option<Place> {
        if self.closed {
            return Some(Place::SoldOut);
        }
        let at = self.users.find(user)?;
        Some(match self.users.status(at) {
            Status::Waiting if !self.drawn => Place::Cohort(self.cohort as u64),
            Status::Waiting => {
                Place::Waiting(u64::from(self.users.place(at)) - self.head as u64 + 1)
            }
            Status::Admitted | Status::Bought => Place::Admitted,
            // It joins again to queue at the back.
            Status::Lapsed => Place::Waiting(self.waiting() + 1),
        })
    }

    /// Whether `user` may buy now: admitted and within its window, or a buyer already (it may
    /// buy up to LIMIT). The caller stepped the room to now first.
    pub fn may_buy(&self, user: &[u8]) -> bool {
        !self.closed
            && self.users.find(user).is_some_and(|at| {
                matches!(self.users.status(at), Status::Admitted | Status::Bought)
            })
    }

    /// A purchase of `user` succeeded: it leaves the room.
    pub fn bought(&mut self, user: &[u8]) {
        if let Some(at) = self.users.find(user)
            && self.users.status(at) == Status::Admitted
        {
            self.users.set_status(at, Status::Bought);
            self.unbought -= 1;
        }
    }

    /// Steps the room to `now_ms` with `remaining` units left: draws the cohort once START
    /// has passed, lapses the windows that ended (each place passed to the next in line), and
    /// admits at the rate. Returns the users admitted, in order, for the events.
    pub fn step(&mut self, now_ms: u64, remaining: u64) -> Vec<UserRef> {
        if self.closed {
            return Vec::new();
        }
        self.draw_if_due(now_ms);
        if !self.drawn {
            return Vec::new();
        }
        let mut allowance = self.lapse(now_ms);
        if let Some(rate) = self.config.rate {
            let next = *self.next_tick_ms.get_or_insert(now_ms);
            if now_ms >= next {
                // Ticks missed while nobody waited are gone, not saved up for a burst.
                let ticks = (now_ms - next) / rate.per_ms + 1;
                self.next_tick_ms = Some(next + ticks * rate.per_ms);
                allowance = allowance.saturating_add(ticks.saturating_mul(rate.users));
            }
        }
        self.admit_next(allowance, now_ms, remaining)
    }

    /// `SECKILL.ADMIT`: admits up to `n` users by hand (the room stepped to now first).
    pub fn admit(&mut self, n: u64, now_ms: u64, remaining: u64) -> Vec<UserRef> {
        if self.closed || !self.drawn {
            return Vec::new();
        }
        self.admit_next(n, now_ms, remaining)
    }

    /// The sale sold out: everyone waiting is told so and the room's memory is freed.
    pub fn close(&mut self) {
        *self = Room {
            closed: true,
            ..Room::new(self.config, self.seed, None, 0)
        };
    }

    /// Units came back to a sold-out sale (a restock, a refund): the room opens again, empty
    /// and first come first served (the cohort's draw was for the sale's opening).
    pub fn reopen(&mut self) {
        if self.closed {
            *self = Room::new(self.config, self.seed, None, 0);
        }
    }

    /// The next instant the room must be stepped at (the timer's): START for a cohort not yet
    /// drawn, the first open window's end, the rate's next tick while anyone waits.
    pub fn next_step_ms(&self) -> Option<u64> {
        if self.closed {
            return None;
        }
        if !self.drawn {
            return self.start_ms;
        }
        let window = self
            .admitted
            .iter()
            .find(|&&(at, _)| self.users.status(at) == Status::Admitted)
            .map(|&(_, deadline)| deadline);
        let tick = self
            .next_tick_ms
            .filter(|_| self.config.rate.is_some() && self.waiting() > 0);
        window.into_iter().chain(tick).min()
    }

    /// The user behind a handle (for events and replies).
    pub fn user(&self, at: UserRef) -> &[u8] {
        self.users.user(at)
    }

    /// Bytes held, as the allocator counts them.
    pub fn bytes(&self) -> usize {
        use crate::logic::buyers::allocated;
        self.users.bytes()
            + allocated(self.queue.capacity() * size_of::<UserRef>())
            + allocated(self.admitted.capacity() * size_of::<(UserRef, u64)>())
    }

    /// The room as the encoding stores it.
    pub fn state(&self) -> RoomState<'_> {
        let refs: Vec<UserRef> = self.users.iter().collect();
        let index = |at: UserRef| refs.binary_search(&at).expect("a user of this room") as u32;
        RoomState {
            closed: self.closed,
            drawn: self.drawn,
            cohort: self.cohort as u64,
            head: self.head as u64,
            next_tick_ms: self.next_tick_ms,
            users: refs
                .iter()
                .map(|&at| {
                    (
                        self.users.user(at),
                        self.users.status(at),
                        self.users.place(at),
                    )
                })
                .collect(),
            queue: self.queue.iter().map(|&at| index(at)).collect(),
            admitted: self
                .admitted
                .iter()
                .map(|&(at, deadline)| (index(at), deadline))
                .collect(),
        }
    }

    /// A room rebuilt from its stored state, refusing one that breaks the room's rules.
    pub fn from_state(
        config: RoomConfig,
        seed: u64,
        start_ms: Option<u64>,
        state: RoomState,
    ) -> Result<Room, &'static str> {
        let mut room = Room::new(config, seed, start_ms, 0);
        room.closed = state.closed;
        room.drawn = state.drawn;
        room.next_tick_ms = state.next_tick_ms;
        let mut refs = Vec::with_capacity(state.users.len());
        for &(user, status, place) in &state.users {
            if user.is_empty()
                || room.users.find(user).is_some()
                || !room.users.has_room(user.len())
            {
                return Err("waiting room user empty or twice");
            }
            refs.push(room.users.insert(user, status, place));
        }
        let at = |index: u32| {
            refs.get(index as usize)
                .copied()
                .ok_or("waiting room index out of range")
        };
        room.queue = state
            .queue
            .iter()
            .map(|&i| at(i))
            .collect::<Result<_, _>>()?;
        room.admitted = state
            .admitted
            .iter()
            .map(|&(i, deadline)| Ok((at(i)?, deadline)))
            .collect::<Result<_, &'static str>>()?;
        room.head = usize::try_from(state.head).map_err(|_| "bad head")?;
        room.cohort = usize::try_from(state.cohort).map_err(|_| "bad cohort")?;
        if room.head > room.queue.len()
            || room.cohort > room.queue.len()
            || (room.closed && !refs.is_empty())
        {
            return Err("waiting room out of range");
        }
        for (place, &at) in room.queue.iter().enumerate().skip(room.head) {
            if room.users.status(at) != Status::Waiting || room.users.place(at) as usize != place {
                return Err("waiting room queue and places disagree");
            }
        }
        let waiting = refs
            .iter()
            .filter(|&&at| room.users.status(at) == Status::Waiting)
            .count();
        if waiting != room.queue.len() - room.head {
            return Err("waiting room queue and places disagree");
        }
        room.unbought = refs
            .iter()
            .filter(|&&at| room.users.status(at) == Status::Admitted)
            .count() as u64;
        if room
            .admitted
            .iter()
            .filter(|&&(at, _)| room.users.status(at) == Status::Admitted)
            .count() as u64
            != room.unbought
        {
            return Err("waiting room admissions disagree");
        }
        Ok(room)
    }

    fn draw_if_due(&mut self, now_ms: u64) {
        if !self.drawn && self.start_ms.is_some_and(|start| now_ms >= start) {
            shuffle(&mut self.queue[..self.cohort], self.seed);
            for (place, &at) in self.queue[..self.cohort].iter().enumerate() {
                self.users.set(at, Status::Waiting, place as u32);
            }
            self.drawn = true;
        }
    }

    /// Ends the windows that closed by `now_ms`; returns how many places were passed on.
    fn lapse(&mut self, now_ms: u64) -> u64 {
        let mut lapsed = 0;
        while let Some(&(at, deadline)) = self.admitted.front() {
            let open = self.users.status(at) == Status::Admitted;
            if open && deadline > now_ms {
                break;
            }
            self.admitted.pop_front();
            if open {
                self.users.set_status(at, Status::Lapsed);
                self.unbought -= 1;
                lapsed += 1;
            }
        }
        lapsed
    }

    fn admit_next(&mut self, wanted: u64, now_ms: u64, remaining: u64) -> Vec<UserRef> {
        let cover = remaining.saturating_sub(self.unbought);
        let n = wanted.min(cover).min(self.waiting()) as usize;
        let deadline = now_ms.saturating_add(self.config.window_ms);
        let admitted: Vec<UserRef> = self.queue[self.head..self.head + n].to_vec();
        for &at in &admitted {
            self.users.set_status(at, Status::Admitted);
            self.admitted.push_back((at, deadline));
        }
        self.head += n;
        self.unbought += n as u64;
        admitted
    }
}

#[cfg(test)]
mod tests;
