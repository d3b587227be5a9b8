//! One attempt per buyer at a time, in this process. The module recognizes a retry by the
//! buyer's *last* attempt id (docs/commands.md, "Retries"): were two purchases of one buyer in
//! flight at once (a double tap, two tabs), the retry of the first, after the second was made,
//! would count as a new purchase. So a buyer's calls take turns here; different buyers never
//! wait for each other. A buyer's entry is its queue of waiting calls: the call that ends hands
//! the turn to the first of them, so a buyer nobody else waits for costs one map entry and no
//! lock of its own (a tokio mutex per buyer and its shared name were 7 % of a purchase's client
//! CPU, `make bench`, "Durability"). A waiting call parks its task in the async API and its
//! thread in the sync one; the map's std lock is never held across an `.await`.
//!
//! A buyer is known by its name's hash (SipHash under this process's random keys), hashed once
//! per call: no copy of the name, no second hash to hand the turn on, no name compared. Two
//! names of one hash would take turns as one buyer: a wait, never a wrong answer, and for any
//! two names a chance of one in 2^64.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Mutex;
use tokio::sync::oneshot;

/// The buyers with a call running (by their names' hashes), each with the calls waiting for
/// their turn.
type Buyers = HashMap<u64, VecDeque<oneshot::Sender<()>>, BuildHasherDefault<Hashed>>;

#[derive(Default)]
pub(crate) struct BuyerTurns {
    /// A buyer's entry lives while one of its calls runs.
    turns: Mutex<Buyers>,
    /// How a buyer's name is hashed: random keys per process, so that names chosen to collide
    /// cannot be made up in advance.
    names: RandomState,
}

/// A map key that is a hash already: used as it is.
#[derive(Default)]
struct Hashed(u64);

impl Hasher for Hashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not called: the map's keys are u64s (`write_u64`).
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// The buyer's turn: its calls may run until this is dropped.
pub(crate) struct Holding<'a> {
    turns: &'a BuyerTurns,
    buyer: u64,
}

/// A call waiting for its turn: dropped after the turn was handed to it (its task given up
/// between the hand-over and its poll), it hands the turn on.
struct Waiting<'a> {
    turns: &'a BuyerTurns,
    buyer: u64,
    turn: oneshot::Receiver<()>,
    /// The call has the turn (a `Holding` now).
    taken: bool,
}

impl BuyerTurns {
    /// Waits until no other call of `user` runs in this process.
    pub(crate) async fn take(&self, user: &[u8]) -> Holding<'_> {
        let buyer = self.names.hash_one(user);
        let turn = {
            match self.lock().entry(buyer) {
                Entry::Vacant(free) => {
                    free.insert(VecDeque::new());
                    return Holding { turns: self, buyer };
                }
                Entry::Occupied(mut running) => {
                    let (handed, turn) = oneshot::channel();
                    running.get_mut().push_back(handed);
                    turn
                }
            }
        };
        let mut waiting = Waiting {
            turns: self,
            buyer,
            turn,
            taken: false,
        };
        // The sender goes when it hands the turn over, or with the entry, which goes only
        // once nobody waits: either way the turn is this call's.
        let _ = (&mut waiting.turn).await;
        waiting.taken = true;
        Holding { turns: self, buyer }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buyers> {
        self.turns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The turn of `buyer`'s call that ends goes to the first call still waiting, or the entry
    /// goes.
    fn hand_on(&self, buyer: u64) {
        let mut turns = self.lock();
        // One lookup when nobody waits (the entry goes); put back when a call took the turn.
        let Some(mut waiting) = turns.remove(&buyer) else {
            return;
        };
        while let Some(next) = waiting.pop_front() {
            if next.send(()).is_ok() {
                turns.insert(buyer, waiting);
                return;
            }
            // That call was given up while it waited: the next one.
        }
    }

    #[cfg(test)]
    fn buyers(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.turns.hand_on(self.buyer);
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        // Closed first, so that a hand-over after this fails (and goes to the next call):
        // one that came before is this call's turn, handed on now.
        self.turn.close();
        if self.turn.try_recv().is_ok() {
            self.turns.hand_on(self.buyer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buyers_calls_take_turns_and_other_buyers_never_wait() {
        let turns = BuyerTurns::default();
        crate::link::block_on(async {
            let first = turns.take(b"dave").await;
            // Another buyer goes at once.
            let other = turns.take(b"erin").await;
            assert_eq!(turns.buyers(), 2);
            drop(other);
            assert_eq!(turns.buyers(), 1, "a buyer's entry goes with its last call");
            // The same buyer waits for the first call's end.
            let second = turns.take(b"dave");
            let mut second = std::pin::pin!(second);
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            assert!(second.as_mut().poll(&mut cx).is_pending());
            drop(first);
            assert!(second.as_mut().poll(&mut cx).is_ready());
        });
        assert_eq!(turns.buyers(), 0);
    }

    #[test]
    fn the_turn_goes_to_the_calls_in_the_order_they_came_past_those_given_up() {
        let turns = BuyerTurns::default();
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        crate::link::block_on(async {
            let first = turns.take(b"dave").await;
            let mut second = Box::pin(turns.take(b"dave"));
            let mut given_up = Box::pin(turns.take(b"dave"));
            let mut third = Box::pin(turns.take(b"dave"));
            for waiting in [&mut second, &mut given_up, &mut third] {
                assert!(waiting.as_mut().poll(&mut cx).is_pending());
            }
            drop(first);
            let std::task::Poll::Ready(second) = second.as_mut().poll(&mut cx) else {
                panic!("the first call waiting has the turn");
            };
            assert!(third.as_mut().poll(&mut cx).is_pending());
            drop(given_up);
            drop(second);
            assert!(
                third.as_mut().poll(&mut cx).is_ready(),
                "past the one given up"
            );
        });
        assert_eq!(turns.buyers(), 0);
    }

    #[test]
    fn a_turn_handed_to_a_call_given_up_before_it_ran_goes_on() {
        let turns = BuyerTurns::default();
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        crate::link::block_on(async {
            let first = turns.take(b"dave").await;
            let mut handed = Box::pin(turns.take(b"dave"));
            let mut next = Box::pin(turns.take(b"dave"));
            assert!(handed.as_mut().poll(&mut cx).is_pending());
            assert!(next.as_mut().poll(&mut cx).is_pending());
            drop(first); // the turn is `handed`'s now, before it runs again
            drop(handed);
            assert!(next.as_mut().poll(&mut cx).is_ready());
            // With nobody left waiting, the entry goes.
            let mut last = Box::pin(turns.take(b"erin"));
            assert!(last.as_mut().poll(&mut cx).is_ready());
            let blocker = turns.take(b"erin").await;
            let mut gone = Box::pin(turns.take(b"erin"));
            assert!(gone.as_mut().poll(&mut cx).is_pending());
            drop(blocker);
            drop(gone);
        });
        assert_eq!(turns.buyers(), 0, "no entry outlives its calls");
    }
}
