//! One attempt per buyer at a time, in this process. The module recognizes a retry by the
//! buyer's *last* attempt id (docs/commands.md, "Retries"): were two purchases of one buyer in
//! flight at once (a double tap, two tabs), the retry of the first, after the second was made,
//! would count as a new purchase. So a buyer's calls take turns here; different buyers never
//! wait for each other. The wait is a tokio lock: it parks a task in the async API and a thread
//! in the sync one, and the map's own std lock is never held across an `.await`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::OwnedMutexGuard;

type Turn = Arc<tokio::sync::Mutex<()>>;

#[derive(Default)]
pub(crate) struct BuyerTurns {
    /// A buyer's entry lives while one of its calls runs or waits.
    turns: Mutex<HashMap<Arc<[u8]>, Turn>>,
}

/// The buyer's turn: its calls may run until this is dropped.
pub(crate) struct Holding<'a> {
    turns: &'a BuyerTurns,
    user: Arc<[u8]>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl BuyerTurns {
    /// Waits until no other call of `user` runs in this process.
    pub(crate) async fn take(&self, user: &[u8]) -> Holding<'_> {
        // One allocation for the name, shared by the map's entry and the holding.
        let user: Arc<[u8]> = user.into();
        let turn = {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            turns.entry(user.clone()).or_default().clone()
        };
        let guard = turn.lock_owned().await;
        Holding {
            turns: self,
            user,
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    fn buyers(&self) -> usize {
        self.turns.lock().unwrap().len()
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let mut turns = self.turns.turns.lock().unwrap_or_else(|e| e.into_inner());
        drop(self.guard.take());
        // Only the map holds it: nobody waits, the entry goes.
        if turns
            .get(&*self.user)
            .is_some_and(|turn| Arc::strong_count(turn) == 1)
        {
            turns.remove(&*self.user);
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
}
