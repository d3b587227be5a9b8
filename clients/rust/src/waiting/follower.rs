//! The state of one room's shared reader, pure (no connection, the clock passed in): its
//! waiters and what the room's stream told. The same rules as the Python package's
//! `_waiting.Follower`.
//!
//! Every admission (and every drop of an absent user) takes the head of the line, so the
//! reader counts them, `departures`, and a waiter's place is `base - departures`; a `leave`
//! entry names the place it left and moves up the waiters behind it. The entry that admits a
//! waiter is its turn; nothing else claims one (a place never goes below 1 without it). A place
//! the server tells comes with the stream's last entry at that instant: the departures after
//! that entry are the ones that move the waiter on.

use crate::info::{Place, SaleEvent};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Instant;

/// Departures remembered, so that a waiter told its place as of an older entry moves on by
/// the departures after that entry.
pub(crate) const HISTORY: usize = 10_000;

/// A stream entry's ID, `(ms, seq)`.
pub(crate) type EntryId = (u64, u64);

pub(crate) fn entry_id(text: &str) -> EntryId {
    let (ms, seq) = text.split_once('-').unwrap_or((text, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

#[derive(Clone, Debug)]
struct Waiter {
    place: Place,
    /// `place` = `base - departures` while it waits with drawn places.
    base: Option<i64>,
    /// When its ETA was told: the ETA counts down from there.
    eta_at: Instant,
    /// A told place (position) waiting for the reader to reach the entry it was told as of.
    pending: Option<(i64, EntryId)>,
    /// The server must be asked where it stands.
    ask: bool,
    /// The pages (`wait_for_turn` calls) waiting for this user.
    pages: u32,
}

pub(crate) struct Follower {
    pub last_id: String,
    /// Whether the places are drawn (no START, or START passed).
    pub drawn: bool,
    pub presence_ms: Option<u64>,
    waiters: HashMap<Vec<u8>, Waiter>,
    /// Some waiter must be asked where it stands (its `ask`).
    wants_ask: bool,
    /// The places told as of an entry not read yet, soonest first.
    pending: BinaryHeap<Reverse<(EntryId, Vec<u8>)>>,
    departures: i64,
    history: VecDeque<(EntryId, i64)>,
}

impl Follower {
    pub fn new(last_id: String, drawn: bool, presence_ms: Option<u64>) -> Follower {
        Follower {
            last_id,
            drawn,
            presence_ms,
            waiters: HashMap::new(),
            wants_ask: false,
            pending: Default::default(),
            departures: 0,
            history: VecDeque::new(),
        }
    }

    /// A page of `user` starts waiting (two pages of one user share its place).
    pub fn add(&mut self, user: &[u8], now: Instant) {
        let waiter = self.waiters.entry(user.to_vec()).or_insert(Waiter {
            place: Place {
                position: 1,
                eta_ms: -1,
                drawn: false,
            },
            base: None,
            eta_at: now,
            pending: None,
            ask: false,
            pages: 0,
        });
        waiter.pages += 1;
    }

    /// A page of `user` stops; whether it was the user's last.
    pub fn remove(&mut self, user: &[u8]) -> bool {
        let Some(waiter) = self.waiters.get_mut(user) else {
            return true;
        };
        waiter.pages -= 1;
        if waiter.pages > 0 {
            return false;
        }
        self.waiters.remove(user);
        true
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    fn departures_at(&self, at: EntryId) -> Option<i64> {
        if at >= entry_id(&self.last_id) {
            return Some(self.departures);
        }
        let index = self.history.partition_point(|&(id, _)| id <= at);
        if index == 0 {
            return (self.history.len() < HISTORY).then_some(0);
        }
        Some(self.history[index - 1].1)
    }

    /// The stream's last entry is older than the last one read: a promoted replica that had
    /// not all of them. Reading goes on from there (the entries after it are new).
    pub fn rewound(&mut self, as_of: &str) {
        if entry_id(as_of) < entry_id(&self.last_id) {
            self.last_id = as_of.to_string();
            self.history.clear();
        }
    }

    /// The server's answer for `user` as of the stream's entry `as_of`: `None`, not in the
    /// room (it is to join again). Before START a waiting user's number is how many wait.
    pub fn told(&mut self, user: &[u8], told: Option<(i64, i64)>, as_of: &str, now: Instant) {
        let drawn = self.drawn;
        let last = entry_id(&self.last_id);
        let at = entry_id(as_of);
        let counted = self.departures_at(at);
        let Some(waiter) = self.waiters.get_mut(user) else {
            return;
        };
        let Some((position, eta_ms)) = told else {
            waiter.ask = true;
            self.wants_ask = true;
            return;
        };
        waiter.ask = false;
        waiter.eta_at = now;
        waiter.base = None;
        waiter.pending = None;
        waiter.place = Place {
            position,
            eta_ms,
            drawn: drawn || position <= 0,
        };
        if position <= 0 || !drawn {
            return;
        }
        if at > last {
            waiter.pending = Some((position, at));
            self.pending.push(Reverse((at, user.to_vec())));
            return;
        }
        match counted {
            Some(counted) => waiter.base = Some(position + counted),
            None => {
                waiter.ask = true;
                self.wants_ask = true;
            }
        }
    }

    /// Moves the places by `events`: the users whose turn came, and whether the server must
    /// be asked (a draw, a possible sell-out, a waiter dropped).
    pub fn read(&mut self, events: &[SaleEvent]) -> (Vec<Vec<u8>>, bool) {
        let mut turned = Vec::new();
        let mut ask = false;
        for event in events {
            let id = entry_id(&event.id);
            self.resolve_pending(id);
            self.last_id.clone_from(&event.id);
            match event.get("event") {
                kind @ ("admit" | "drop") => {
                    self.drawn = true;
                    self.departures += 1;
                    let user = event.get("user").as_bytes();
                    if let Some(waiter) = self.waiters.get_mut(user)
                        && waiter.place.position > 0
                    {
                        if kind == "admit" {
                            waiter.place = Place {
                                position: 0,
                                eta_ms: 0,
                                drawn: true,
                            };
                            waiter.base = None;
                            turned.push(user.to_vec());
                        } else {
                            waiter.ask = true;
                            self.wants_ask = true;
                            ask = true;
                        }
                    }
                }
                "leave" => self.left(event.get("qty").parse().unwrap_or(0)),
                "draw" => {
                    self.drawn = true;
                    ask = true;
                }
                // Nothing left: sold out, unless a hold comes back.
                _ if event.get("remaining") == "0" => ask = true,
                _ => {}
            }
            if self.history.len() == HISTORY {
                self.history.pop_front();
            }
            self.history.push_back((id, self.departures));
        }
        self.resolve_pending(entry_id(&self.last_id));
        (turned, ask)
    }

    /// A user left from `position`: everyone behind it moves up.
    fn left(&mut self, position: i64) {
        if position <= 0 {
            return;
        }
        for waiter in self.waiters.values_mut() {
            if let Some(base) = waiter.base.as_mut()
                && *base - self.departures > position
            {
                *base -= 1;
            }
        }
    }

    fn resolve_pending(&mut self, reached: EntryId) {
        while let Some(Reverse((at, _))) = self.pending.peek()
            && *at < reached
        {
            let Reverse((at, user)) = self.pending.pop().expect("peeked");
            if let Some(waiter) = self.waiters.get_mut(&user)
                && let Some((position, told_at)) = waiter.pending
                && told_at == at
            {
                waiter.pending = None;
                waiter.base = Some(position + self.departures);
            }
        }
    }

    /// `user`'s place now (never its turn without the entry that admits it), its ETA counted
    /// down from when it was told; `None` if it is not a waiter here.
    pub fn current(&mut self, user: &[u8], now: Instant) -> Option<Place> {
        let departures = self.departures;
        let waiter = self.waiters.get_mut(user)?;
        let mut place = waiter.place;
        if let (Some(base), true) = (waiter.base, place.position > 0) {
            place.position = base - departures;
            if place.position < 1 {
                waiter.ask = true;
                self.wants_ask = true;
                place.position = 1;
            }
        }
        if place.eta_ms > 0 {
            let elapsed = now.saturating_duration_since(waiter.eta_at).as_millis() as i64;
            place.eta_ms = (place.eta_ms - elapsed).max(0);
        }
        Some(place)
    }

    /// Every waiter still waiting: the ones the server is asked about.
    pub fn asking(&self) -> Vec<Vec<u8>> {
        self.waiters
            .iter()
            .filter(|(_, w)| w.place.position > 0)
            .map(|(user, _)| user.clone())
            .collect()
    }

    /// Whether the server found `user` not in the room: it is to join again.
    pub fn needs_join(&self, user: &[u8]) -> bool {
        self.waiters
            .get(user)
            .is_some_and(|w| w.ask && w.place.position > 0)
    }

    /// Whether some waiter must be asked where it stands.
    pub fn must_ask(&self) -> bool {
        self.wants_ask
    }

    /// Everyone is being asked: the waiters still not in the room after it say so again.
    pub fn asking_everyone(&mut self) {
        self.wants_ask = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u64, kind: &str, user: &str, remaining: u64, qty: i64) -> SaleEvent {
        SaleEvent {
            partition: 0,
            stream: "s".into(),
            id: format!("1-{n}"),
            fields: HashMap::from([
                ("event".to_string(), kind.to_string()),
                ("user".to_string(), user.to_string()),
                ("remaining".to_string(), remaining.to_string()),
                ("qty".to_string(), qty.to_string()),
            ]),
        }
    }

    fn follower(places: &[i64], drawn: bool) -> (Follower, Instant) {
        let now = Instant::now();
        let mut follower = Follower::new("1-0".into(), drawn, None);
        for (n, &place) in places.iter().enumerate() {
            let user = format!("w{n}");
            follower.add(user.as_bytes(), now);
            follower.told(user.as_bytes(), Some((place, -1)), "1-0", now);
        }
        (follower, now)
    }

    fn at(f: &mut Follower, user: &str, now: Instant) -> i64 {
        f.current(user.as_bytes(), now).unwrap().position
    }

    #[test]
    fn admissions_and_drops_move_everyone_up_and_the_admitted_one_is_told_its_turn() {
        let (mut f, now) = follower(&[3, 5], true);
        let (turned, ask) = f.read(&[
            event(1, "admit", "x", 5, 0),
            event(2, "drop", "y", 5, 0),
            event(3, "purchase", "x", 4, 1),
        ]);
        assert!(turned.is_empty() && !ask);
        assert_eq!((at(&mut f, "w0", now), at(&mut f, "w1", now)), (1, 3));
        let (turned, _) = f.read(&[event(4, "admit", "w0", 4, 0)]);
        assert_eq!(turned, [b"w0".to_vec()]);
        assert_eq!(at(&mut f, "w0", now), 0);
        assert_eq!((at(&mut f, "w1", now), f.last_id.as_str()), (2, "1-4"));
        assert_eq!(f.asking(), [b"w1".to_vec()]);
    }

    #[test]
    fn a_place_never_reaches_the_turn_without_the_entry_that_admits_it() {
        let (mut f, now) = follower(&[2], true);
        f.read(&[event(1, "admit", "x", 5, 0), event(2, "admit", "y", 5, 0)]);
        assert_eq!(at(&mut f, "w0", now), 1);
        assert!(f.must_ask(), "the server is asked");
    }

    #[test]
    fn a_leaver_ahead_moves_the_waiters_behind_it_up_and_no_one_else() {
        let (mut f, now) = follower(&[2, 4, 6], true);
        f.read(&[event(1, "leave", "x", 5, 3)]);
        let places: Vec<i64> = ["w0", "w1", "w2"]
            .iter()
            .map(|u| at(&mut f, u, now))
            .collect();
        assert_eq!(places, [2, 3, 5]);
        f.read(&[event(2, "leave", "x", 5, 0)]);
        assert_eq!(at(&mut f, "w2", now), 5, "an admitted leaver moves no one");
    }

    #[test]
    fn a_draw_a_possible_sell_out_and_a_dropped_waiter_ask_the_server() {
        let (mut f, _) = follower(&[4], false);
        assert!(f.read(&[event(1, "draw", "", 5, 9)]).1 && f.drawn);
        assert!(f.read(&[event(2, "purchase", "x", 0, 1)]).1);
        assert!(f.read(&[event(3, "drop", "w0", 0, 0)]).1 && f.must_ask());
        let (mut g, _) = follower(&[4], true);
        assert!(!g.read(&[event(4, "lapse", "z", 3, 0)]).1);
    }

    #[test]
    fn a_place_told_as_of_an_older_or_a_newer_entry_counts_the_departures_after_it() {
        let (mut f, now) = follower(&[], true);
        f.read(&[
            event(1, "admit", "x", 5, 0),
            event(2, "admit", "y", 5, 0),
            event(3, "admit", "z", 5, 0),
        ]);
        f.add(b"late", now);
        f.told(b"late", Some((5, -1)), "1-1", now);
        assert_eq!(at(&mut f, "late", now), 3, "entries 2 and 3 moved it since");
        f.add(b"early", now);
        f.told(b"early", Some((5, -1)), "1-9", now);
        f.read(&[event(9, "admit", "x", 5, 0), event(10, "admit", "y", 5, 0)]);
        assert_eq!(at(&mut f, "early", now), 4);
        assert_eq!(entry_id("7"), (7, 0));
    }

    #[test]
    fn a_stream_that_went_back_after_a_failover_is_read_from_its_last_entry() {
        let (mut f, now) = follower(&[5], true);
        f.read(&[event(7, "admit", "x", 5, 0)]);
        f.rewound("1-3");
        assert_eq!(f.last_id, "1-3");
        f.told(b"w0", Some((4, -1)), "1-3", now);
        assert_eq!(at(&mut f, "w0", now), 4);
        f.read(&[event(4, "admit", "y", 5, 0)]);
        assert_eq!(at(&mut f, "w0", now), 3);
        f.rewound("1-9");
        assert_eq!(f.last_id, "1-4", "a newer entry is no rewind");
    }

    #[test]
    fn the_server_answers_its_turn_a_sell_out_or_not_in_the_room() {
        let (mut f, now) = follower(&[2, 3, 4], true);
        f.told(b"w0", Some((0, 0)), "1-0", now);
        f.told(b"w1", Some((-1, -1)), "1-0", now);
        f.told(b"w2", None, "1-0", now);
        assert_eq!((at(&mut f, "w0", now), at(&mut f, "w1", now)), (0, -1));
        assert!(f.must_ask());
        assert_eq!(f.asking(), [b"w2".to_vec()]);
        assert_eq!(f.current(b"stranger", now), None);
    }

    #[test]
    fn before_start_the_number_is_how_many_wait_and_the_eta_counts_down() {
        let (mut f, now) = follower(&[], false);
        f.add(b"u", now);
        f.told(b"u", Some((40, 60_000)), "1-0", now);
        let later = now + std::time::Duration::from_millis(1_500);
        let place = f.current(b"u", later).unwrap();
        assert_eq!(
            place,
            Place {
                position: 40,
                eta_ms: 58_500,
                drawn: false
            }
        );
    }

    #[test]
    fn two_pages_of_one_user_share_a_waiter_until_the_last_goes() {
        let (mut f, now) = follower(&[], true);
        f.add(b"u", now);
        f.add(b"u", now);
        assert!(!f.remove(b"u") && !f.is_empty());
        assert!(f.remove(b"u") && f.is_empty());
    }
}
