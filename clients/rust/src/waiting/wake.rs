//! How a room's reader wakes the waiters that share it: a generation moved on, waited for by
//! a thread (the sync API, on a condition variable) or a task (the async one, on a tokio
//! `Notify`, which needs no runtime of its own). Every wait has a timeout, so a wake missed
//! between reading the generation and waiting costs that timeout at most.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

#[derive(Default)]
pub(crate) struct Wake {
    generation: Mutex<u64>,
    moved: Condvar,
    notify: tokio::sync::Notify,
}

impl Wake {
    pub fn generation(&self) -> u64 {
        *self.generation.lock().expect("wake lock")
    }

    /// Wakes every waiter.
    pub fn wake_all(&self) {
        *self.generation.lock().expect("wake lock") += 1;
        self.moved.notify_all();
        self.notify.notify_waiters();
    }

    /// Blocks this thread until the generation moves past `seen`, or `timeout`.
    pub fn wait_blocking(&self, seen: u64, timeout: Duration) {
        let generation = self.generation.lock().expect("wake lock");
        let _ = self
            .moved
            .wait_timeout_while(generation, timeout, |g| *g == seen)
            .expect("wake lock");
    }

    /// Waits (a task) until the generation moves past `seen`, or `timeout`.
    pub async fn wait(&self, seen: u64, timeout: Duration) {
        let mut notified = std::pin::pin!(self.notify.notified());
        notified.as_mut().enable();
        if self.generation() != seen {
            return;
        }
        let _ = tokio::time::timeout(timeout, notified).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_thread_wakes_when_the_generation_moves_and_not_before_its_timeout_otherwise() {
        let wake = Arc::new(Wake::default());
        let seen = wake.generation();
        let started = Instant::now();
        wake.wait_blocking(seen, Duration::from_millis(30));
        assert!(started.elapsed() >= Duration::from_millis(30));
        let waker = {
            let wake = wake.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                wake.wake_all();
            })
        };
        wake.wait_blocking(seen, Duration::from_secs(60));
        assert_eq!(wake.generation(), seen + 1);
        waker.join().unwrap();
        // Already moved: no wait at all.
        pollster::block_on(wake.wait(seen, Duration::from_secs(60)));
    }
}
