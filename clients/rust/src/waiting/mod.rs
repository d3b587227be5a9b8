//! Waiting for a turn in a sale's waiting room: one reader of a room's event stream per sale
//! handle and sale key, shared by every `wait_for_turn` of the process, instead of one stream
//! read per waiting page. Written once over a [`Link`] for the sync iterator
//! ([`crate::Sale::wait_for_turn`], threads) and the async stream
//! ([`crate::aio::Sale::wait_for_turn`], tasks); the same rules as the Python package's.
//!
//! The pages read in turns: whichever page's read is due reads the stream (a non-blocking
//! `XREAD`, every [`READ_EVERY`], on that page's own connection), moves every waiter's place
//! ([`follower::Follower`]) and wakes them all; a page whose place changed yields it. The
//! server is asked (`SECKILL.POSITION ... WITHETA` for every waiter, in one MULTI per batch with
//! the stream's last ID) when the entries cannot say: the cohort's draw at START, a possible
//! sell-out, a waiter dropped or not in the room, `resync_ms` without an entry, and before
//! START every `resync_ms`. With PRESENCE the
//! waiters join again at a third of it. A page dropped before its turn leaves the room. A page
//! given an `update_ms` shows a mere move of its number at most that often ([`notice`]), and the
//! room wakes its pages for moves at most that often, at once for a turn or the server's answer.

mod follower;
mod notice;
mod wake;

use crate::error::{Error, Result};
use crate::info::{Place, SaleEvent, parse_fields};
use crate::key;
use crate::link::Link;
use follower::Follower;
use notice::{Show, Shown};
use redis::{Value, cmd};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
pub(crate) use wake::Wake;

/// How long without an entry before the server is asked anyway (entries trimmed away are
/// caught up), and how often before START (the cohort grows with no entry to say so).
pub const DEFAULT_RESYNC_MS: u64 = 5_000;
/// Entries read at most per read.
const READ_COUNT: usize = 1_000;
/// How often a room's stream is read (a read that finds nothing costs a few bytes).
pub(crate) const READ_EVERY: Duration = Duration::from_millis(50);
/// A page that is not the next to read looks at the room at least this often: it takes over
/// the reading when the page that was to read is no longer polled.
const WAKE_EVERY: Duration = Duration::from_secs(1);
/// Waiters asked about in one MULTI, at most.
const ASK_BATCH: usize = 500;

/// The rooms a sale handle's pages share, one per sale key.
#[derive(Default)]
pub(crate) struct Rooms {
    open: Mutex<HashMap<String, Arc<Shared>>>,
    /// How often a page shows a mere move of its number, at most (`update_ms`); None: every
    /// move, as the crate always did.
    pub(crate) update: Option<Duration>,
}

/// One room's reader, shared by its pages.
pub(crate) struct Shared {
    key: String,
    stream: String,
    state: Mutex<State>,
    wake: Wake,
    pages: AtomicU64,
}

struct State {
    follower: Follower,
    /// A page is reading (or asking the server) now.
    reading: bool,
    /// The page that reads next: it naps until `next_read`, the others until woken.
    reader: Option<u64>,
    next_read: Instant,
    last_ask: Instant,
    last_entry: Instant,
    last_rejoin: Instant,
    resync: Duration,
    /// The shortest `update_ms` of its pages: moves wake them at most this often.
    update: Duration,
    last_notice: Instant,
    /// The last read failed: the server is asked where everyone stands once it answers.
    failed: bool,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("room lock")
    }
}

/// Whose waiting room a wait is in: a one-key sale's, or the room of the user's partition.
#[derive(Clone, Copy)]
pub(crate) enum Room<'a> {
    Key(&'a str, &'a Rooms),
    Partitioned(&'a crate::PartitionedSale),
}

impl<'a> Room<'a> {
    fn key(&self, user: &[u8]) -> &'a str {
        match *self {
            Room::Key(key, _) => key,
            Room::Partitioned(sale) => sale.key_of(user),
        }
    }

    fn rooms(&self) -> &'a Rooms {
        match *self {
            Room::Key(_, rooms) => rooms,
            Room::Partitioned(sale) => sale.rooms(),
        }
    }

    /// How long a page holds a mere move back: zero without an `update_ms` (every move shown).
    fn update(&self) -> Duration {
        self.rooms().update.unwrap_or(Duration::ZERO)
    }

    /// The room's reader (made, from the sale's settings, if none runs), with a page of
    /// `user` added to it.
    async fn enter<L: Link>(
        self,
        link: &mut L,
        user: &[u8],
        resync: Duration,
    ) -> Result<(Arc<Shared>, u64)> {
        key::check_call(user, None)?;
        if resync.is_zero() {
            return Err(Error::InvalidArgument(
                "resync_ms must be at least 1".into(),
            ));
        }
        let update = self.update();
        if self.rooms().update.is_some_and(|u| u.is_zero()) {
            return Err(Error::InvalidArgument(
                "update_ms must be at least 1".into(),
            ));
        }
        let sale_key = self.key(user);
        let found = self
            .rooms()
            .open
            .lock()
            .expect("rooms lock")
            .get(sale_key)
            .cloned();
        let shared = match found {
            Some(shared) => shared,
            None => {
                let opened = Arc::new(open(link, sale_key, resync, update).await?);
                let mut rooms = self.rooms().open.lock().expect("rooms lock");
                rooms.entry(sale_key.to_string()).or_insert(opened).clone()
            }
        };
        let page = shared.pages.fetch_add(1, Ordering::Relaxed);
        let mut state = shared.state();
        state.resync = state.resync.min(resync);
        state.update = state.update.min(update);
        state.follower.add(user, Instant::now());
        drop(state);
        Ok((shared, page))
    }

    /// The page stopped: another page reads from now on if it was the next to, and the room's
    /// reader goes with its last page. Whether it was its user's last page.
    fn left(self, shared: &Arc<Shared>, page: u64, user: &[u8]) -> bool {
        let (last, empty, was_reader) = {
            let mut state = shared.state();
            let last = state.follower.remove(user);
            let was_reader = state.reader == Some(page);
            if was_reader {
                state.reader = None;
            }
            (last, state.follower.is_empty(), was_reader)
        };
        if was_reader {
            // Without this the others would wait for the reading to go stale (a second).
            shared.wake.wake_all();
        }
        if empty {
            let mut rooms = self.rooms().open.lock().expect("rooms lock");
            if rooms
                .get(&shared.key)
                .is_some_and(|s| Arc::ptr_eq(s, shared))
            {
                rooms.remove(&shared.key);
            }
        }
        last
    }

    /// [`Room::left`], then its user leaves the room if its turn has not come (its place goes
    /// to the next).
    async fn exit<L: Link>(
        self,
        link: &mut L,
        (shared, page): &(Arc<Shared>, u64),
        user: &[u8],
        done: bool,
    ) {
        if self.left(shared, *page, user) && !done {
            // Best effort: with PRESENCE an absent page is dropped in its turn anyway.
            let _ = key::leave(link, &shared.key, user).await;
        }
    }

    /// The next place of `user` to show after `shown` (the first: JOIN's), as [`notice::show`]
    /// tells.
    async fn next_place<L: Link>(
        self,
        link: &mut L,
        shared: &Shared,
        page: u64,
        user: &[u8],
        shown: Option<Shown>,
    ) -> Result<Place> {
        if shown.is_none() {
            join(link, shared, user).await?;
        }
        let update = self.update();
        loop {
            let now = Instant::now();
            let (seen, read, nap) = {
                let mut state = shared.state();
                let place = state.follower.current(user, now);
                let place = place.ok_or_else(|| Error::InvalidArgument("not waiting".into()))?;
                let held = match notice::show(shown.as_ref(), &place, update, now) {
                    Show::Now => return Ok(place),
                    Show::At(due) => Some(due),
                    Show::Nothing => None,
                };
                let seen = shared.wake.generation();
                let stale = now >= state.next_read + WAKE_EVERY;
                let read = !state.reading
                    && now >= state.next_read
                    && (state.reader.is_none_or(|r| r == page) || stale);
                if read {
                    state.reading = true;
                    state.reader = Some(page);
                }
                let nap = if state.reader == Some(page) {
                    state.next_read.saturating_duration_since(now)
                } else {
                    WAKE_EVERY
                };
                let nap = held.map_or(nap, |due| nap.min(due.saturating_duration_since(now)));
                (seen, read, nap)
            };
            if read {
                self.cycle(link, shared).await;
                continue;
            }
            link.nap(&shared.wake, seen, nap.max(Duration::from_millis(1)))
                .await;
        }
    }

    /// One read of the room for every page: the stream, the server when it must be asked,
    /// PRESENCE's joins; then every page is woken.
    async fn cycle<L: Link>(self, link: &mut L, shared: &Shared) {
        // A page dropped in the middle of its read (a closed stream) gives the reading back.
        let reading = Reading(shared);
        let outcome = self.read_and_ask(link, shared).await;
        std::mem::forget(reading);
        let now = Instant::now();
        let mut state = shared.state();
        state.reading = false;
        state.failed = outcome.is_err();
        state.next_read = now
            + match outcome {
                Ok(_) => READ_EVERY,
                Err(_) => WAKE_EVERY / 4,
            };
        // Moves wake the pages at most every `update` (a page holding one back wakes at its
        // own time); the server's answer and a failed read at once.
        let wake = match outcome {
            Ok(Moved::Nothing) => false,
            Ok(Moved::Places) => now >= state.last_notice + state.update,
            Ok(Moved::Asked) | Err(_) => true,
        };
        if wake {
            state.last_notice = now;
        }
        drop(state);
        if wake {
            shared.wake.wake_all();
        }
    }

    /// What the read found.
    async fn read_and_ask<L: Link>(self, link: &mut L, shared: &Shared) -> Result<Moved> {
        let (last_id, failed) = {
            let state = shared.state();
            (state.follower.last_id.clone(), state.failed)
        };
        let reply: Option<redis::streams::StreamReadReply> = link
            .query(
                cmd("XREAD")
                    .arg("COUNT")
                    .arg(READ_COUNT)
                    .arg("STREAMS")
                    .arg(&shared.stream)
                    .arg(&last_id),
            )
            .await?;
        let mut events = Vec::new();
        for stream in reply.map(|r| r.keys).unwrap_or_default() {
            for entry in stream.ids {
                events.push(SaleEvent::from_entry(0, &shared.stream, entry)?);
            }
        }
        let now = Instant::now();
        let (must_ask, rejoin) = {
            let mut state = shared.state();
            let (turned, must_ask) = state.follower.read(&events);
            if !turned.is_empty() {
                // Told at once, before anyone is asked about (a draw's resync of many places
                // must not hold up the first tick's turns).
                shared.wake.wake_all();
            }
            if !events.is_empty() {
                state.last_entry = now;
            }
            // After `resync` without an entry, and before START every `resync` (the cohort
            // grows with no entry to say so); while entries flow they tell every move.
            let due = now >= state.last_ask + state.resync
                && (!state.follower.drawn || now >= state.last_entry + state.resync);
            let rejoin = state
                .follower
                .presence_ms
                .is_some_and(|ms| now >= state.last_rejoin + Duration::from_millis(ms / 3));
            if rejoin {
                state.last_rejoin = now;
            }
            // After a failed read everyone is asked, once the node answers again.
            let must_ask = must_ask || due || failed || state.follower.must_ask();
            (must_ask, rejoin)
        };
        if must_ask {
            ask(link, shared).await?;
            if let Room::Partitioned(sale) = self {
                let waiting = shared.state().follower.asking();
                if let Some(user) = waiting.first()
                    && sale.borrow_for_waiters(link, user).await?
                {
                    // Units came, or every partition was found empty and this one sealed.
                    ask(link, shared).await?;
                }
            }
        }
        if rejoin {
            let waiting = shared.state().follower.asking();
            for batch in waiting.chunks(ASK_BATCH) {
                let mut pipe = redis::pipe();
                for user in batch {
                    pipe.cmd("SECKILL.JOIN").arg(&shared.key).arg(user).ignore();
                }
                link.query_pipe::<()>(&pipe).await?;
            }
        }
        Ok(if must_ask {
            Moved::Asked
        } else if events.is_empty() {
            Moved::Nothing
        } else {
            Moved::Places
        })
    }
}

/// What a read of a room found.
enum Moved {
    Nothing,
    /// Entries: places moved.
    Places,
    /// The server was asked where everyone stands.
    Asked,
}

/// The reading role of a page whose read did not finish: given back when dropped.
struct Reading<'s>(&'s Shared);

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.reading = false;
        state.reader = None;
    }
}

/// The room's stream, PRESENCE and whether its places are drawn, and the stream's last entry:
/// a reader starts there.
async fn open<L: Link>(
    link: &mut L,
    sale_key: &str,
    resync: Duration,
    update: Duration,
) -> Result<Shared> {
    let reply: Value = link.query(cmd("SECKILL.INFO").arg(sale_key)).await?;
    let mut fields = parse_fields(reply)?;
    let Some(Value::BulkString(stream)) = fields.remove("events") else {
        return Err(Error::InvalidArgument(format!(
            "{sale_key}: waiting for a turn reads the sale's event stream; make the sale with events"
        )));
    };
    let stream = String::from_utf8_lossy(&stream).into_owned();
    let presence = match fields.remove("queue_presence") {
        Some(Value::Int(ms)) if ms > 0 => Some(ms as u64),
        _ => None,
    };
    let drawn = key::started(link, fields.remove("start")).await?;
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
    let now = Instant::now();
    Ok(Shared {
        key: sale_key.to_string(),
        stream,
        state: Mutex::new(State {
            follower: Follower::new(last_id, drawn, presence),
            reading: false,
            reader: None,
            next_read: now,
            last_ask: now,
            last_entry: now,
            last_rejoin: now,
            resync,
            update,
            last_notice: now,
            failed: false,
        }),
        wake: Wake::default(),
        pages: AtomicU64::new(0),
    })
}

/// A POSITION or JOIN with WITHETA: `[position, eta_ms]`, or nil (not in the room).
fn told(value: Value) -> Result<Option<(i64, i64)>> {
    Ok(redis::from_redis_value(value)?)
}

/// `commands` and then the stream's last ID, in one MULTI: their replies and that ID.
async fn with_last_id<L: Link>(
    link: &mut L,
    shared: &Shared,
    commands: impl Iterator<Item = redis::Cmd>,
) -> Result<(Vec<Value>, String)> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for command in commands {
        pipe.add_command(command);
    }
    pipe.cmd("XREVRANGE")
        .arg(&shared.stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1);
    let mut replies: Vec<Value> = link.query_pipe(&pipe).await?;
    let last: redis::streams::StreamRangeReply =
        redis::from_redis_value(replies.pop().unwrap_or(Value::Nil))?;
    let last_id = last.ids.first().map_or("0-0".to_string(), |e| e.id.clone());
    Ok((replies, last_id))
}

/// JOIN ... WITHETA and the stream's last ID, at one instant.
async fn join<L: Link>(link: &mut L, shared: &Shared, user: &[u8]) -> Result<()> {
    let mut join = cmd("SECKILL.JOIN");
    join.arg(&shared.key).arg(user).arg("WITHETA");
    let (mut replies, as_of) = with_last_id(link, shared, std::iter::once(join)).await?;
    let answer = told(replies.pop().unwrap_or(Value::Nil))?;
    shared
        .state()
        .follower
        .told(user, answer, &as_of, Instant::now());
    Ok(())
}

/// POSITION ... WITHETA for every waiter and the stream's last ID, in one MULTI per batch; a
/// waiter not in the room (dropped, or the room reopened after a sell-out) joins again.
async fn ask<L: Link>(link: &mut L, shared: &Shared) -> Result<()> {
    let waiting = {
        let mut state = shared.state();
        state.follower.asking_everyone();
        state.follower.asking()
    };
    for batch in waiting.chunks(ASK_BATCH) {
        let positions = batch.iter().map(|user| {
            let mut position = cmd("SECKILL.POSITION");
            position.arg(&shared.key).arg(user).arg("WITHETA");
            position
        });
        let (replies, as_of) = with_last_id(link, shared, positions).await?;
        let now = Instant::now();
        let mut state = shared.state();
        state.follower.rewound(&as_of);
        for (user, reply) in batch.iter().zip(replies) {
            state.follower.told(user, told(reply)?, &as_of, now);
        }
    }
    let lost: Vec<Vec<u8>> = {
        let state = shared.state();
        waiting
            .into_iter()
            .filter(|user| state.follower.needs_join(user))
            .collect()
    };
    for user in lost {
        join(link, shared, &user).await?;
    }
    shared.state().last_ask = Instant::now();
    Ok(())
}

/// The places of one user as [`crate::Sale::wait_for_turn`] and
/// [`crate::PartitionedSale::wait_for_turn`] yield them: each change of its number, ending with
/// 0 (its turn) or -1 (sold out); an error ends it too. Dropped before its turn, it leaves the
/// room.
pub struct Turns<'a, C: redis::ConnectionLike> {
    con: &'a mut C,
    room: Room<'a>,
    user: Vec<u8>,
    resync: Duration,
    entered: Option<(Arc<Shared>, u64)>,
    shown: Option<Shown>,
    finished: bool,
}

impl<'a, C: redis::ConnectionLike> Turns<'a, C> {
    pub(crate) fn new(con: &'a mut C, room: Room<'a>, user: &[u8], resync_ms: u64) -> Self {
        Turns {
            con,
            room,
            user: user.to_vec(),
            resync: Duration::from_millis(resync_ms),
            entered: None,
            shown: None,
            finished: false,
        }
    }
}

impl<C: redis::ConnectionLike> Iterator for Turns<'_, C> {
    type Item = Result<Place>;

    fn next(&mut self) -> Option<Result<Place>> {
        if self.finished {
            return None;
        }
        let link = &mut crate::link::Blocking(&mut *self.con);
        let (room, user, resync, shown) = (self.room, &self.user, self.resync, self.shown);
        let entered = &mut self.entered;
        let next = crate::link::block_on(async {
            if entered.is_none() {
                *entered = Some(room.enter(link, user, resync).await?);
            }
            let (shared, page) = entered.as_ref().expect("entered");
            room.next_place(link, shared, *page, user, shown).await
        });
        self.finished = next.as_ref().is_ok_and(|p| p.position <= 0) || next.is_err();
        if let Ok(place) = next {
            self.shown = Some(Shown::now(place));
        }
        Some(next)
    }
}

impl<C: redis::ConnectionLike> Drop for Turns<'_, C> {
    fn drop(&mut self) {
        if let Some(entered) = self.entered.take() {
            let done = self.shown.is_some_and(|s| s.place.position <= 0);
            let link = &mut crate::link::Blocking(&mut *self.con);
            crate::link::block_on(self.room.exit(link, &entered, &self.user, done));
        }
    }
}

/// [`Turns`], async: a stream that owns its connection; each call bounded by `bound`. Dropped
/// before its turn, it leaves the room (from a task of its own, on the stream's connection).
pub(crate) fn stream<'a, C: redis::aio::ConnectionLike + Send + 'static>(
    con: C,
    room: Room<'a>,
    user: Vec<u8>,
    resync_ms: u64,
    bound: Duration,
) -> impl futures_util::Stream<Item = Result<Place>> + Send + 'a {
    let resync = Duration::from_millis(resync_ms);
    let page = Page {
        con: Some(con),
        room,
        user,
        entered: None,
        done: false,
        bound,
    };
    futures_util::stream::unfold(
        (page, None::<Shown>, false),
        move |(mut page, shown_before, finished)| async move {
            if finished {
                return None;
            }
            let next = page.next(resync, shown_before).await;
            let finished = next.as_ref().is_ok_and(|p| p.position <= 0) || next.is_err();
            page.done = next.as_ref().is_ok_and(|p| p.position <= 0);
            let shown = next.as_ref().ok().copied().map(Shown::now).or(shown_before);
            Some((next, (page, shown, finished)))
        },
    )
}

/// An async page: its connection, and its room once entered.
struct Page<'a, C: redis::aio::ConnectionLike + Send + 'static> {
    con: Option<C>,
    room: Room<'a>,
    user: Vec<u8>,
    entered: Option<(Arc<Shared>, u64)>,
    done: bool,
    bound: Duration,
}

impl<C: redis::aio::ConnectionLike + Send + 'static> Page<'_, C> {
    async fn next(&mut self, resync: Duration, shown: Option<Shown>) -> Result<Place> {
        let con = self.con.as_mut().expect("a page's connection");
        let link = &mut crate::link::Tokio::within(con, self.bound);
        if self.entered.is_none() {
            self.entered = Some(self.room.enter(link, &self.user, resync).await?);
        }
        let (shared, page) = self.entered.as_ref().expect("entered");
        self.room
            .next_place(link, shared, *page, &self.user, shown)
            .await
    }
}

impl<C: redis::aio::ConnectionLike + Send + 'static> Drop for Page<'_, C> {
    fn drop(&mut self) {
        let Some((shared, page)) = self.entered.take() else {
            return;
        };
        let last = self.room.left(&shared, page, &self.user);
        // Leaving needs the server: a task of its own, where a runtime runs (best effort:
        // with PRESENCE an absent page is dropped in its turn anyway).
        if let (true, Some(mut con), Ok(runtime)) = (
            last && !self.done,
            self.con.take(),
            tokio::runtime::Handle::try_current(),
        ) {
            let (key, user, bound) = (shared.key.clone(), self.user.clone(), self.bound);
            drop(runtime.spawn(async move {
                let link = &mut crate::link::Tokio::within(&mut con, bound);
                let _ = key::leave(link, &key, &user).await;
            }));
        }
    }
}
