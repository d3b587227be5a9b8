//! Waiting for a turn in a sale's waiting room, on the sale's event stream: one blocking read
//! per change of the room instead of one poll per waiting buyer. Written once over a [`Link`]
//! for the sync iterator ([`crate::Sale::wait_for_turn`]) and the async stream
//! ([`crate::aio::Sale::wait_for_turn`]); the same rules as the Python package's.
//!
//! Every admission takes the head of the line, so each `admit` entry that names someone else
//! moves a waiting user one place up; the entry that names the user is its turn. The server is
//! asked (`SECKILL.POSITION`) only when the entries cannot say: the first admissions seen (they
//! may be START's, which draws the cohort's order), a sale that may have sold out (an entry with
//! no unit left), and a quiet stream (`resync` without an entry, in case entries were trimmed).

use crate::error::{Error, Result};
use crate::info::SaleEvent;
use crate::key;
use crate::link::Link;
use redis::cmd;
use std::time::Duration;

/// How long one read of the stream blocks before the server is asked (a quiet stream).
pub const DEFAULT_RESYNC_MS: u64 = 5_000;
/// Entries read at most per read.
const READ_COUNT: usize = 1_000;

/// One user's place, kept from the sale's event stream; `place` is what `SECKILL.JOIN`
/// replies: >= 1 waiting (before START: the cohort's size), 0 admitted, -1 sold out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TurnWatch {
    user: Vec<u8>,
    stream: String,
    /// The last entry read; the next read starts after it.
    last_id: String,
    place: i64,
    /// Whether the place was read after the first admissions (START's shuffle may precede them).
    synced: bool,
}

impl TurnWatch {
    fn new(user: &[u8], stream: String, last_id: String, place: i64) -> TurnWatch {
        TurnWatch {
            user: user.to_vec(),
            stream,
            last_id,
            place,
            synced: false,
        }
    }

    pub fn place(&self) -> i64 {
        self.place
    }

    pub fn done(&self) -> bool {
        self.place <= 0
    }

    /// Moves the place by `events`; true when only the server can say where the user is.
    fn read(&mut self, events: &[SaleEvent]) -> bool {
        if events.is_empty() {
            return true;
        }
        let (mut admissions, mut ask) = (0, false);
        for event in events {
            self.last_id.clone_from(&event.id);
            if event.get("event") == "admit" {
                if event.get("user").as_bytes() == self.user {
                    self.place = 0;
                    return false;
                }
                admissions += 1;
            } else if event.get("remaining") == "0" {
                ask = true;
            }
        }
        if admissions > 0 {
            if !self.synced || self.place - admissions < 1 {
                return true;
            }
            self.place -= admissions;
        }
        ask
    }

    /// The server's answer; `None` (not in the room: one reopened after selling out) is turned
    /// into a JOIN by the caller.
    fn asked(&mut self, place: Option<i64>) {
        if let Some(place) = place {
            self.place = place;
            self.synced = true;
        }
    }
}

/// The stream's last entry, then JOIN: every admission after the join is read.
pub(crate) async fn start<L: Link>(link: &mut L, sale_key: &str, user: &[u8]) -> Result<TurnWatch> {
    key::check_call(user, None)?;
    let Some(stream) = key::event_stream(link, sale_key).await? else {
        return Err(Error::InvalidArgument(format!(
            "{sale_key}: waiting for a turn reads the sale's event stream; make the sale with events"
        )));
    };
    let last: redis::streams::StreamRangeReply = link
        .query(
            cmd("XREVRANGE")
                .arg(&stream)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(1),
        )
        .await?;
    let last_id = last.ids.first().map_or("0-0".to_string(), |e| e.id.clone());
    let place = key::join(link, sale_key, user).await?;
    Ok(TurnWatch::new(user, stream, last_id, place))
}

/// One blocking read of the stream (at most `resync`), then the server when it must; true
/// when it was asked. The read is given `resync` on top of the link's own bound for one call.
async fn step<L: Link>(
    link: &mut L,
    sale_key: &str,
    watch: &mut TurnWatch,
    resync: Duration,
    bound: Duration,
) -> Result<bool> {
    let mut read = cmd("XREAD");
    read.arg("COUNT")
        .arg(READ_COUNT)
        .arg("BLOCK")
        .arg(resync.as_millis() as u64)
        .arg("STREAMS")
        .arg(&watch.stream)
        .arg(&watch.last_id);
    let reply: Option<redis::streams::StreamReadReply> =
        link.query_within(&read, resync + bound).await?;
    let mut events = Vec::new();
    for stream in reply.map(|r| r.keys).unwrap_or_default() {
        for entry in stream.ids {
            events.push(SaleEvent::from_entry(0, &watch.stream, entry)?);
        }
    }
    if !watch.read(&events) {
        return Ok(false);
    }
    ask(link, sale_key, watch).await?;
    Ok(true)
}

/// The user's place from the server: POSITION, or JOIN again for a user no longer in the room
/// (a room reopened after selling out).
async fn ask<L: Link>(link: &mut L, sale_key: &str, watch: &mut TurnWatch) -> Result<()> {
    let place = match key::position(link, sale_key, &watch.user).await? {
        Some(place) => place,
        None => key::join(link, sale_key, &watch.user).await?,
    };
    watch.asked(Some(place));
    Ok(())
}

/// Whose waiting room a wait is in: a one-key sale's, or the room of the user's partition.
#[derive(Clone, Copy)]
pub(crate) enum Room<'a> {
    Key(&'a str),
    Partitioned(&'a crate::PartitionedSale),
}

impl Room<'_> {
    fn key(&self, user: &[u8]) -> &str {
        match self {
            Room::Key(key) => key,
            Room::Partitioned(sale) => sale.key_of(user),
        }
    }

    /// The next place, different from the last one: the first is JOIN's. A partitioned sale's
    /// drained partition borrows stock for its waiters as `try_buy` would: its room admits
    /// nobody without units, and a page that only waits sends no TRY to borrow for it.
    async fn next_place<L: Link>(
        self,
        link: &mut L,
        watch: &mut Option<TurnWatch>,
        user: &[u8],
        (resync, bound): (Duration, Duration),
    ) -> Result<i64> {
        if resync.is_zero() {
            return Err(Error::InvalidArgument(
                "resync_ms must be at least 1".into(),
            ));
        }
        let Some(watch) = watch.as_mut() else {
            let started = start(link, self.key(user), user).await?;
            return Ok(watch.insert(started).place());
        };
        let before = watch.place();
        loop {
            let asked = step(link, self.key(user), watch, resync, bound).await?;
            if let Room::Partitioned(sale) = self
                && asked
                && !watch.done()
                && sale.borrow_for_waiters(link, user).await?
            {
                // Units came, or every partition was found empty and this one sealed: its
                // room says which at once (the stream may stay quiet until `resync`).
                ask(link, self.key(user), watch).await?;
            }
            if watch.place() != before {
                return Ok(watch.place());
            }
        }
    }
}

/// The places of one user as [`crate::Sale::wait_for_turn`] and
/// [`crate::PartitionedSale::wait_for_turn`] yield them: each change, ending with 0 (its turn)
/// or -1 (sold out); an error ends it too.
pub struct Turns<'a, C> {
    con: &'a mut C,
    room: Room<'a>,
    user: Vec<u8>,
    resync: Duration,
    watch: Option<TurnWatch>,
    finished: bool,
}

impl<'a, C> Turns<'a, C> {
    pub(crate) fn new(con: &'a mut C, room: Room<'a>, user: &[u8], resync_ms: u64) -> Self {
        Turns {
            con,
            room,
            user: user.to_vec(),
            resync: Duration::from_millis(resync_ms),
            watch: None,
            finished: false,
        }
    }
}

impl<C: redis::ConnectionLike> Iterator for Turns<'_, C> {
    type Item = Result<i64>;

    fn next(&mut self) -> Option<Result<i64>> {
        if self.finished {
            return None;
        }
        let link = &mut crate::link::Blocking(&mut *self.con);
        let times = (self.resync, Duration::ZERO);
        let next =
            crate::link::block_on(
                self.room
                    .next_place(link, &mut self.watch, &self.user, times),
            );
        self.finished = next.is_err() || self.watch.as_ref().is_some_and(TurnWatch::done);
        Some(next)
    }
}

/// [`Turns`], async: a stream that owns its connection; each call bounded by `bound`.
pub(crate) fn stream<'a, C: redis::aio::ConnectionLike + Send + 'a>(
    con: C,
    room: Room<'a>,
    user: Vec<u8>,
    resync_ms: u64,
    bound: Duration,
) -> impl futures_util::Stream<Item = Result<i64>> + Send + 'a {
    let times = (Duration::from_millis(resync_ms), bound);
    let state = (con, None::<TurnWatch>, false);
    futures_util::stream::unfold(state, move |(mut con, mut watch, finished)| {
        let user = user.clone();
        async move {
            if finished {
                return None;
            }
            let link = &mut crate::link::Tokio::within(&mut con, bound);
            let next = room.next_place(link, &mut watch, &user, times).await;
            let finished = next.is_err() || watch.as_ref().is_some_and(TurnWatch::done);
            Some((next, (con, watch, finished)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn event(n: u32, kind: &str, user: &str, remaining: u64) -> SaleEvent {
        SaleEvent {
            partition: 0,
            stream: "s".into(),
            id: format!("1-{n}"),
            fields: HashMap::from([
                ("event".to_string(), kind.to_string()),
                ("user".to_string(), user.to_string()),
                ("remaining".to_string(), remaining.to_string()),
            ]),
        }
    }

    fn watch(place: i64, synced: bool) -> TurnWatch {
        let mut watch = TurnWatch::new(b"me", "s".into(), "0-0".into(), place);
        watch.synced = synced;
        watch
    }

    #[test]
    fn a_quiet_stream_asks_the_server() {
        let mut w = watch(4, false);
        assert!(w.read(&[]));
        assert_eq!((w.place(), w.last_id.as_str()), (4, "0-0"));
    }

    #[test]
    fn the_first_admissions_ask_then_later_ones_count_down() {
        let mut w = watch(10, false);
        assert!(
            w.read(&[event(1, "admit", "a", 5)]),
            "START may have moved it"
        );
        assert_eq!((w.place(), w.last_id.as_str()), (10, "1-1"));
        w.asked(Some(6));
        assert!(w.synced);
        let events = [
            event(2, "admit", "b", 5),
            event(3, "try", "b", 4),
            event(4, "admit", "c", 4),
        ];
        assert!(!w.read(&events));
        assert_eq!((w.place(), w.last_id.as_str()), (4, "1-4"));
    }

    #[test]
    fn its_own_admission_ends_the_wait() {
        let mut w = watch(2, true);
        let events = [
            event(1, "admit", "a", 5),
            event(2, "admit", "me", 5),
            event(3, "admit", "z", 5),
        ];
        assert!(!w.read(&events));
        assert!(w.done() && w.place() == 0);
    }

    #[test]
    fn more_admissions_than_places_ahead_ask() {
        let mut w = watch(2, true);
        assert!(w.read(&[event(1, "admit", "a", 5), event(2, "admit", "b", 5)]));
        assert_eq!(w.place(), 2, "left for the server's answer");
    }

    #[test]
    fn a_sale_that_may_be_sold_out_asks_and_none_keeps_the_place() {
        let mut w = watch(3, true);
        assert!(w.read(&[event(1, "try", "a", 0)]));
        w.asked(None);
        assert_eq!(w.place(), 3);
        w.asked(Some(-1));
        assert!(w.done());
    }
}
