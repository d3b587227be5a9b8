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
//! memory freed. A user may leave (`SECKILL.LEAVE`); with `PRESENCE` one that did not join
//! again in time is dropped when its turn comes, and the admission goes to the next.

mod eta;
mod gaps;
mod shuffle;
mod table;

use eta::Outlook;
pub use eta::{PACE_WINDOW_MS, Pace};
use gaps::Gaps;
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
    /// `PRESENCE ms`: a waiting user keeps its place by joining again within this long of its
    /// last JOIN; `None`: it keeps it until its turn.
    pub presence_ms: Option<u64>,
}

/// What a step of the room did to one user, in order: the sale writes one stream entry each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    /// START passed: the cohort of this many users was put in its random order.
    Draw(u64),
    /// Admitted from the head of the line.
    Admit(UserRef),
    /// An admitted user's window ended before it bought.
    Lapse(UserRef),
    /// Its turn came after it stopped joining again (PRESENCE): it left the line.
    Drop(UserRef),
    /// It left (`SECKILL.LEAVE`) from this place (admitted: its unit goes to the next).
    Leave(UserRef, Place),
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
    /// What `seen` counts from (unix ms).
    pub epoch_ms: u64,
    /// With PRESENCE, each queue place's last JOIN, in ms after `epoch_ms`.
    pub seen: Vec<u32>,
}

#[derive(Clone)]
pub struct Room {
    config: RoomConfig,
    /// The cohort's shuffle is drawn from this (the sale's seed).
    seed: u64,
    /// When START passes (unix ms); `None`: no cohort, every joiner queues in arrival order.
    start_ms: Option<u64>,
    users: RoomUsers,
    /// Users in admission order; `queue[..head]` have left it, and so have the users of the
    /// places after it counted in `gaps` (an entry is live while its user waits at it).
    queue: Vec<UserRef>,
    head: usize,
    gaps: Gaps,
    /// Users waiting in the queue.
    waiting: u64,
    /// With PRESENCE, each queue place's last JOIN, in ms after `epoch_ms`, the room's first
    /// join (a room lives less than the 49 days a u32 counts).
    seen: Vec<u32>,
    epoch_ms: u64,
    /// Recent admissions, for the ETA of a room admitted by hand.
    pace: Pace,
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
            gaps: Gaps::default(),
            waiting: 0,
            seen: Vec::new(),
            epoch_ms: now_ms,
            pace: Pace::default(),
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
        self.waiting
    }

    /// Admitted users who have not bought, their window open.
    pub fn unbought(&self) -> u64 {
        self.unbought
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Puts `user` in the room (a user already there keeps its place, and with PRESENCE
    /// counts as present again; one that lapsed, left or was dropped queues again at the
    /// back), and tells it where it stands.
    pub fn join(&mut self, user: &[u8], now_ms: u64) -> Result<Place, RoomError> {
        if user.is_empty() {
            return Err(RoomError::EmptyUser);
        }
        if self.closed {
            return Ok(Place::SoldOut);
        }
        self.draw_if_due(now_ms);
        let found = self.users.find(user);
        if let Some(at) = found.filter(|&at| !self.users.status(at).is_out()) {
            if self.users.status(at) == Status::Waiting {
                self.mark_seen(self.users.place(at) as usize, now_ms);
            }
            return Ok(self.place(user).expect("in the room"));
        }
        // Only a user who queues needs a place: one already in the room is never refused.
        if self.queue.len() >= u32::MAX as usize
            || (found.is_none() && !self.users.has_room(user.len()))
        {
            return Err(RoomError::Full);
        }
        let queued = self.queue.len() as u32;
        let at = match found {
            Some(at) => {
                self.users.set(at, Status::Waiting, queued);
                at
            }
            None => self.users.insert(user, Status::Waiting, queued),
        };
        if !self.drawn {
            self.cohort += 1;
        }
        self.enqueue(at, now_ms);
        Ok(self.place(user).expect("joined"))
    }

    fn enqueue(&mut self, at: UserRef, now_ms: u64) {
        if self.queue.is_empty() {
            // No place was seen yet: presence counts from the first join.
            self.epoch_ms = now_ms;
        }
        self.gaps.push(self.queue.len());
        grow_gently(&mut self.queue, 1);
        self.queue.push(at);
        self.waiting += 1;
        if self.config.presence_ms.is_some() {
            grow_gently(&mut self.seen, 1);
            self.seen.push(0);
            self.mark_seen(self.queue.len() - 1, now_ms);
        }
    }

    fn mark_seen(&mut self, place: usize, now_ms: u64) {
        if let Some(seen) = self.seen.get_mut(place) {
            *seen = u32::try_from(now_ms.saturating_sub(self.epoch_ms)).unwrap_or(u32::MAX);
        }
    }

    /// Whether the user waiting at `place` joined within PRESENCE of `now_ms`.
    fn present(&self, place: usize, now_ms: u64) -> bool {
        let (Some(presence), Some(&seen)) = (self.config.presence_ms, self.seen.get(place)) else {
            return true;
        };
        now_ms <= self.epoch_ms + u64::from(seen) + presence
    }

    /// Where `user` stands, without joining (`None`: not in the room: it never joined, or it
    /// lapsed, left or was dropped). A read: before the room is stepped past START, the cohort
    /// still has no order.
    pub fn place(&self, user: &[u8]) -> Option<Place> {
        if self.closed {
            return Some(Place::SoldOut);
        }
        let at = self.users.find(user)?;
        Some(match self.users.status(at) {
            Status::Waiting if !self.drawn => Place::Cohort(self.waiting),
            Status::Waiting => {
                let place = self.users.place(at) as usize;
                let ahead = (place - self.head) as u64 - self.gaps.between(self.head, place);
                Place::Waiting(ahead + 1)
            }
            Status::Admitted | Status::Bought => Place::Admitted,
            Status::Lapsed | Status::Left | Status::Dropped => return None,
        })
    }

    /// The ETA (ms) of a user at `place` (see [`eta`]).
    pub fn eta_ms(&self, place: Place, now_ms: u64) -> i64 {
        Outlook {
            start_ms: self.start_ms.filter(|_| !self.drawn),
            rate: self.config.rate,
            next_tick_ms: self.next_tick_ms,
            pace: &self.pace,
        }
        .eta_ms(place, now_ms)
    }

    /// `SECKILL.LEAVE`: takes `user` out of the room, waiting or admitted and not yet bought
    /// (the room stepped to now first); `None`: it was not in the room. An admitted user's
    /// unit goes to the next in line at once.
    pub fn leave(&mut self, user: &[u8], now_ms: u64, remaining: u64) -> Option<Vec<Move>> {
        let place = self.place(user)?;
        let at = self.users.find(user)?;
        let mut moves = vec![Move::Leave(at, place)];
        match place {
            Place::Waiting(_) | Place::Cohort(_) => {
                let slot = self.users.place(at) as usize;
                self.users.set_status(at, Status::Left);
                self.waiting -= 1;
                // A cohort not yet drawn drops its leavers when it is.
                if self.drawn {
                    self.gaps.mark(slot, self.queue.len());
                }
            }
            Place::Admitted if self.users.status(at) == Status::Admitted => {
                self.users.set_status(at, Status::Left);
                self.unbought -= 1;
                // Its window goes with it: joining again, it may be admitted again.
                self.admitted.retain(|&(admitted, _)| admitted != at);
                moves.extend(self.admit_next(1, now_ms, remaining));
            }
            Place::Admitted | Place::SoldOut => return None,
        }
        Some(moves)
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
    /// admits at the rate (dropping the absent users whose turn it is). Returns what it did.
    pub fn step(&mut self, now_ms: u64, remaining: u64) -> Vec<Move> {
        if self.closed {
            return Vec::new();
        }
        let mut moves: Vec<Move> = self.draw_if_due(now_ms).into_iter().collect();
        if !self.drawn {
            return moves;
        }
        let mut allowance = self.lapse(now_ms, &mut moves);
        if let Some(rate) = self.config.rate {
            let next = *self.next_tick_ms.get_or_insert(now_ms);
            if now_ms >= next {
                // Ticks missed while nobody waited are gone, not saved up for a burst.
                let ticks = (now_ms - next) / rate.per_ms + 1;
                self.next_tick_ms = Some(next + ticks * rate.per_ms);
                allowance = allowance.saturating_add(ticks.saturating_mul(rate.users));
            }
        }
        moves.extend(self.admit_next(allowance, now_ms, remaining));
        moves
    }

    /// `SECKILL.ADMIT`: admits up to `n` users by hand (the room stepped to now first).
    pub fn admit(&mut self, n: u64, now_ms: u64, remaining: u64) -> Vec<Move> {
        if self.closed || !self.drawn {
            return Vec::new();
        }
        self.admit_next(n, now_ms, remaining)
    }

    /// The sale sold out: everyone waiting is told so and the room's memory is freed.
    pub fn close(&mut self, now_ms: u64) {
        *self = Room {
            closed: true,
            ..Room::new(self.config, self.seed, None, now_ms)
        };
    }

    /// Units came back to a sold-out sale (a restock, a refund): the room opens again, empty
    /// and first come first served (the cohort's draw was for the sale's opening).
    pub fn reopen(&mut self, now_ms: u64) {
        if self.closed {
            *self = Room::new(self.config, self.seed, None, now_ms);
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
            + allocated(self.seen.capacity() * size_of::<u32>())
            + self.gaps.bytes()
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
            epoch_ms: self.epoch_ms,
            seen: self.seen.clone(),
        }
    }

    /// A room rebuilt from its stored state, refusing one that breaks the room's rules.
    pub fn from_state(
        config: RoomConfig,
        seed: u64,
        start_ms: Option<u64>,
        state: RoomState,
    ) -> Result<Room, &'static str> {
        let mut room = Room::new(config, seed, start_ms, state.epoch_ms);
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
        let live = |room: &Room, place: usize, at: UserRef| {
            room.users.status(at) == Status::Waiting && room.users.place(at) as usize == place
        };
        let mut gaps = Vec::new();
        for (place, &at) in room.queue.iter().enumerate().skip(room.head) {
            if !live(&room, place, at) {
                gaps.push(place);
            }
        }
        if !room.drawn && room.cohort != room.queue.len() {
            return Err("waiting room cohort and queue disagree");
        }
        room.waiting = (room.queue.len() - room.head - gaps.len()) as u64;
        if room.drawn {
            for place in gaps {
                room.gaps.mark(place, room.queue.len());
            }
        }
        let waiting = refs
            .iter()
            .filter(|&&at| room.users.status(at) == Status::Waiting)
            .count();
        if waiting as u64 != room.waiting {
            return Err("waiting room queue and places disagree");
        }
        if config.presence_ms.is_some() == state.seen.is_empty() && !room.queue.is_empty()
            || (!state.seen.is_empty() && state.seen.len() != room.queue.len())
        {
            return Err("waiting room presence and queue disagree");
        }
        room.seen = state.seen;
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

    /// Once START has passed: the cohort's users who left are dropped from it, and the rest
    /// put in their random order, places 1 to n.
    fn draw_if_due(&mut self, now_ms: u64) -> Option<Move> {
        if self.drawn || self.start_ms.is_none_or(|start| now_ms < start) {
            return None;
        }
        debug_assert_eq!((self.cohort, self.head), (self.queue.len(), 0));
        let users = &self.users;
        let live = |&(place, &at): &(usize, &UserRef)| {
            users.status(at) == Status::Waiting && users.place(at) as usize == place
        };
        let mut cohort: Vec<UserRef> = self
            .queue
            .iter()
            .enumerate()
            .filter(live)
            .map(|(_, &at)| at)
            .collect();
        shuffle(&mut cohort, self.seed);
        if !self.seen.is_empty() {
            // Each user's last JOIN moves with it.
            self.seen = cohort
                .iter()
                .map(|&at| self.seen[self.users.place(at) as usize])
                .collect();
        }
        for (place, &at) in cohort.iter().enumerate() {
            self.users.set(at, Status::Waiting, place as u32);
        }
        self.cohort = cohort.len();
        self.queue = cohort;
        self.gaps = Gaps::default();
        self.drawn = true;
        Some(Move::Draw(self.cohort as u64))
    }

    /// Ends the windows that closed by `now_ms`; returns how many places were passed on.
    fn lapse(&mut self, now_ms: u64, moves: &mut Vec<Move>) -> u64 {
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
                moves.push(Move::Lapse(at));
            }
        }
        lapsed
    }

    /// Admits up to `wanted` users from the head of the line, as many as the units left not
    /// promised yet can serve; a user absent past PRESENCE is dropped in its turn, and the
    /// admission goes to the next.
    fn admit_next(&mut self, wanted: u64, now_ms: u64, remaining: u64) -> Vec<Move> {
        let mut n = wanted.min(remaining.saturating_sub(self.unbought));
        let deadline = now_ms.saturating_add(self.config.window_ms);
        let mut moves = Vec::new();
        let mut admitted = 0;
        while n > 0 && self.head < self.queue.len() {
            let place = self.head;
            let at = self.queue[place];
            self.head += 1;
            if self.users.status(at) != Status::Waiting || self.users.place(at) as usize != place {
                continue; // it left
            }
            self.waiting -= 1;
            if !self.present(place, now_ms) {
                self.users.set_status(at, Status::Dropped);
                moves.push(Move::Drop(at));
                continue;
            }
            self.users.set_status(at, Status::Admitted);
            self.admitted.push_back((at, deadline));
            self.unbought += 1;
            admitted += 1;
            n -= 1;
            moves.push(Move::Admit(at));
        }
        self.pace.admitted(admitted, now_ms);
        moves
    }
}

#[cfg(test)]
mod tests;
