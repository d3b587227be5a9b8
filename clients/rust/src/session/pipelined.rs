//! The crate's own async connection to one node, under the async cluster session: one writer
//! task that sends every call queued since its last write in one `write`, one reader task that
//! hands each reply to its caller in order, and nothing else (no retries, no timeouts: the
//! session bounds each call and drops a connection that failed one).
//!
//! Why not redis-rs's `MultiplexedConnection`: on a multi-threaded tokio runtime (axum's) its
//! driver task is woken into the scheduler's LIFO slot by the first caller and runs at once,
//! so it wrote each call alone: 100 000 purchases from 256 tasks made 100 002 `writev`s, and
//! the purchase cost 9.4 us of client CPU (3.6 on a current-thread runtime). Here the writer,
//! once woken, yields first: every task ready to call queues its call before the write, and
//! one write carries them all (see `make bench`, "Durability"). While a `WAIT` holds the
//! connection in the server, the writer holds what is sent meanwhile and writes it all once the
//! `WAIT` has answered, with one `WAIT` after it (see `released`).

use redis::{Cmd, Pipeline, ProtocolVersion, RedisConnectionInfo, RedisResult, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, mpsc, oneshot};

/// The most bytes one write carries (more calls wait for the next one).
const MAX_WRITE: usize = 1 << 20;
/// The reader's first buffer (it grows for a larger reply).
const READ_CHUNK: usize = 64 * 1024;

/// A connection; clones share it.
#[derive(Clone)]
pub(crate) struct Pipelined {
    calls: mpsc::UnboundedSender<Call>,
    /// Dropped with the last clone, after its `calls`.
    handles: Arc<Handles>,
}

/// The handles' share of a connection's state: the last one dropped tells a writer held by a
/// `WAIT` that nobody waits for what it holds.
struct Handles {
    state: Arc<State>,
}

impl Drop for Handles {
    fn drop(&mut self) {
        self.state.released.notify_one();
    }
}

/// What the writer and the reader tell each other, and the connection's users.
#[derive(Default)]
struct State {
    /// `WAIT`s (and calls that block, `BLOCK`s) written whose answer has not come: each holds
    /// the connection in the server.
    holding: AtomicUsize,
    /// Told when the last `WAIT` holding the connection has answered, the reader ended, or
    /// the last handle was dropped.
    released: Notify,
    /// The last kept write read changed something: the writer ends a write that carries kept
    /// writes with their wait, instead of waiting for the reader to ask for it once their
    /// replies came (a round trip less while purchases succeed; none while they are refused,
    /// so that a sold-out sale's refusals never wait behind a `WAIT`).
    changing: AtomicBool,
}

/// Where a call's replies go, with the call's number on the connection.
type CallDone = oneshot::Sender<RedisResult<(Vec<Value>, u64)>>;
/// Where a `WAIT` asked for by a task goes.
type Done = oneshot::Sender<RedisResult<Vec<Value>>>;

/// A write kept as its caller asks: when `changed` says its reply changed something, it is
/// answered once the `wait` (a packed `WAIT` or `WAITAOF`) written after it has answered too,
/// else at once: the one that ends its own write when the writer added one, else one the
/// reader asks for as it reads the replies (one for every reply of one read, see `reader`).
/// The caller is woken once.
#[derive(Clone)]
pub(crate) struct Kept {
    pub wait: Arc<[u8]>,
    pub changed: fn(&Value) -> bool,
}

/// What a task asks of the connection.
enum Call {
    /// Commands written together, and who waits for which of their replies.
    Commands { packed: Vec<u8>, awaited: Awaited },
    /// A `WAIT` (or `WAITAOF`, `packed`) written after the call numbered `after`: one sent
    /// since counts it, so the requests share one (see `writer`).
    Wait {
        after: u64,
        packed: Arc<[u8]>,
        waiters: Vec<Waiter>,
    },
}

/// The replies of one call: `skip` of them dropped (a transaction's QUEUED), then `count`
/// handed over, with the call's number on the connection; a call that `holds` it blocks in the
/// server (a `BLOCK`, a `WAIT` sent as a command) and holds the connection until it answers.
struct Awaited {
    skip: usize,
    count: usize,
    to: Reply,
    holds: bool,
}

enum Reply {
    /// One caller, told the call's number too. A kept write's waits for its wait: `covered`
    /// when one ends the write it went in (then the reader need not ask for one).
    Call {
        done: CallDone,
        number: u64,
        kept: Option<Kept>,
        covered: bool,
    },
    /// A shared `WAIT` (its bytes) and its callers.
    Wait(Arc<Mutex<Shared>>, Arc<[u8]>),
}

/// Who waits for a `WAIT`'s answer.
enum Waiter {
    /// A task that asked for it (`Pipelined::wait_after`).
    Asked(Done),
    /// A kept write's caller: its reply (alone in a vector with room for the answer) is
    /// handed over with the answer.
    Kept {
        done: CallDone,
        replies: Vec<Value>,
        number: u64,
    },
}

impl Waiter {
    fn answer(self, answer: &RedisResult<Vec<Value>>) {
        match self {
            Waiter::Asked(done) => {
                let _ = done.send(answer.clone());
            }
            Waiter::Kept {
                done,
                mut replies,
                number,
            } => {
                let answered = answer.as_ref().map_err(Clone::clone).map(|answer| {
                    replies.push(answer.first().cloned().unwrap_or(Value::Nil));
                    (replies, number)
                });
                let _ = done.send(answered);
            }
        }
    }
}

/// A written `WAIT`'s callers until its answer comes, then its answer (for a caller that asks
/// after it came and whose call it counts).
enum Shared {
    Waiting(Vec<Waiter>),
    Answered(RedisResult<Vec<Value>>),
}

impl Shared {
    /// `waiters` wait for this `WAIT`'s answer, or have it now.
    fn add(&mut self, waiters: Vec<Waiter>) {
        match self {
            Shared::Waiting(callers) => callers.extend(waiters),
            Shared::Answered(answer) => waiters.into_iter().for_each(|w| w.answer(answer)),
        }
    }
}

impl Pipelined {
    /// A connection over `stream`, after the handshake `info` asks for (RESP3's HELLO, AUTH,
    /// SELECT); `waits` counts the `WAIT`s it writes.
    pub(crate) async fn handshake(
        stream: TcpStream,
        info: &RedisConnectionInfo,
        waits: Arc<AtomicU64>,
    ) -> RedisResult<Pipelined> {
        let (read, write) = stream.into_split();
        let (calls, queued) = mpsc::unbounded_channel();
        let (awaited, expected) = mpsc::unbounded_channel();
        let state = Arc::new(State::default());
        tokio::spawn(writer(write, queued, awaited, (state.clone(), waits)));
        tokio::spawn(reader(read, expected, (state.clone(), calls.downgrade())));
        let con = Pipelined {
            calls,
            handles: Arc::new(Handles { state }),
        };
        for cmd in handshake(info) {
            if let Value::ServerError(e) = con.send_packed_command(&cmd).await?.0 {
                return Err(e.into());
            }
        }
        Ok(con)
    }

    /// `cmd`'s reply (a server error as `Value::ServerError`) and the call's number on the
    /// connection (for [`Pipelined::wait_after`]).
    pub(crate) async fn send_packed_command(&self, cmd: &Cmd) -> RedisResult<(Value, u64)> {
        let (mut replies, number) = self.send_bytes(cmd.get_packed_command(), 0, 1).await?;
        Ok((replies.pop().unwrap_or(Value::Nil), number))
    }

    /// `pipeline`'s replies after the first `offset`, `count` of them, and the call's number.
    pub(crate) async fn send_packed_commands(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<(Vec<Value>, u64)> {
        self.send_bytes(pipeline.get_packed_pipeline(), offset, count)
            .await
    }

    /// The answer of a `wait` (a `WAIT` or `WAITAOF`) written after the call numbered
    /// `after`, so that it counts that call's writes: one written for an earlier caller is
    /// shared when it was written after that call; the requests that come while the writer
    /// is busy share the next one.
    pub(crate) async fn wait_after(&self, after: u64, wait: &Cmd) -> RedisResult<Value> {
        let (done, answer) = oneshot::channel();
        let packed = wait.get_packed_command().into();
        self.calls
            .send(Call::Wait {
                after,
                packed,
                waiters: vec![Waiter::Asked(done)],
            })
            .map_err(|_| dropped())?;
        let mut replies = answer.await.map_err(|_| dropped())??;
        Ok(replies.pop().unwrap_or(Value::Nil))
    }

    /// Whether a `WAIT` (or a call that blocks) holds the connection in the server now: calls
    /// sent on it wait for its answer.
    pub(crate) fn holding(&self) -> bool {
        self.handles.state.holding.load(Ordering::Relaxed) > 0
    }

    /// Packed commands' replies after `skip`, `count` of them, and the call's number.
    pub(crate) fn send_bytes(
        &self,
        packed: Vec<u8>,
        skip: usize,
        count: usize,
    ) -> impl Future<Output = RedisResult<(Vec<Value>, u64)>> + Send + 'static {
        self.call(packed, (skip, count), None, false)
    }

    /// `packed`'s replies after `skip`, `count` of them (commands whose replies are skipped:
    /// an `ASKING`), kept as `kept` says: a kept write's reply, then the wait's answer (`Nil`
    /// when its reply changed nothing, and nothing was waited for); a call that `holds` blocks
    /// in the server, holding the connection until it answers (see `holding`). Queued for the
    /// writer now, not at the first poll: the future only waits for the answer (its arguments,
    /// kept across the wait, made a purchase's 248 bytes).
    pub(crate) fn call(
        &self,
        packed: Vec<u8>,
        (skip, count): (usize, usize),
        kept: Option<Kept>,
        holds: bool,
    ) -> impl Future<Output = RedisResult<(Vec<Value>, u64)>> + Send + 'static {
        let (done, answer) = oneshot::channel();
        let awaited = Awaited {
            skip,
            count,
            to: Reply::Call {
                done,
                number: 0,
                kept,
                covered: false,
            },
            holds,
        };
        let queued = self.calls.send(Call::Commands { packed, awaited }).is_ok();
        async move {
            if !queued {
                return Err(dropped());
            }
            answer.await.map_err(|_| dropped())?
        }
    }
}

/// The commands that open a connection as `info` says.
fn handshake(info: &RedisConnectionInfo) -> Vec<Cmd> {
    let mut commands = Vec::new();
    let password = info.password();
    if info.protocol() != ProtocolVersion::RESP2 {
        let mut hello = redis::cmd("HELLO");
        hello.arg(3);
        if let Some(password) = password {
            hello
                .arg("AUTH")
                .arg(info.username().unwrap_or("default"))
                .arg(password);
        }
        commands.push(hello);
    } else if let Some(password) = password {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = info.username() {
            auth.arg(user);
        }
        commands.push(auth.arg(password).clone());
    }
    if info.db() != 0 {
        commands.push(redis::cmd("SELECT").arg(info.db()).clone());
    }
    commands
}

/// The connection is gone: every call on it fails so (the session drops it and connects anew).
fn dropped() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "the connection was dropped",
    )
    .into()
}

/// The last `WAIT` written: its bytes, its call number, and its callers or answer.
struct LastWait {
    packed: Arc<[u8]>,
    number: u64,
    shared: Arc<Mutex<Shared>>,
}

/// Writes the calls as they come: once woken by one, it waits until no `WAIT` holds the
/// connection (`released`), yields, so that every task ready to call queues its call, then
/// writes all that are queued at once. Each call's replies are
/// announced to the reader before its bytes are written, with the call's number (calls are
/// numbered in the order they are written). A `WAIT` asked for after a call is shared: with
/// the last one written when that was written after the call, else with the others asked in
/// the same write, one `WAIT` at its end (so it counts every write before it). Different
/// waits (another timeout) are not merged: only the last kind written is shared.
async fn writer(
    mut write: OwnedWriteHalf,
    mut queued: mpsc::UnboundedReceiver<Call>,
    awaited: mpsc::UnboundedSender<Awaited>,
    (state, waits_written): (Arc<State>, Arc<AtomicU64>),
) {
    let mut buffer = Vec::with_capacity(READ_CHUNK);
    let mut number: u64 = 0;
    let mut last_wait: Option<LastWait> = None;
    while let Some(first) = queued.recv().await {
        released(&state, &queued).await;
        if queued.is_closed() {
            // Every handle is gone (the session dropped the connection, its calls failed or
            // were given up): what is held here is written nowhere, so it runs nowhere later.
            return;
        }
        tokio::task::yield_now().await;
        let mut next = Some(first);
        // The waits asked in this write, to end it with.
        let mut waits: Vec<(Arc<[u8]>, Vec<Waiter>)> = Vec::new();
        while let Some(call) = next.take() {
            match call {
                Call::Commands {
                    packed,
                    awaited: mut replies,
                } => {
                    number += 1;
                    if let Reply::Call {
                        number: n,
                        kept,
                        covered,
                        ..
                    } = &mut replies.to
                    {
                        *n = number;
                        if let Some(kept) = kept
                            && state.changing.load(Ordering::Relaxed)
                        {
                            if !waits.iter().any(|(p, _)| *p == kept.wait) {
                                waits.push((kept.wait.clone(), Vec::new()));
                            }
                            *covered = true;
                        }
                    }
                    buffer.extend_from_slice(&packed);
                    if replies.holds {
                        state.holding.fetch_add(1, Ordering::Relaxed);
                    }
                    if awaited.send(replies).is_err() {
                        return; // the reader is gone: so is the connection
                    }
                }
                Call::Wait {
                    after,
                    packed,
                    waiters,
                } => {
                    if let Some(last) = &last_wait
                        && last.number > after
                        && last.packed == packed
                    {
                        lock(&last.shared).add(waiters);
                    } else if let Some((_, callers)) = waits.iter_mut().find(|(p, _)| *p == packed)
                    {
                        callers.extend(waiters);
                    } else {
                        waits.push((packed, waiters));
                    }
                }
            }
            if buffer.len() < MAX_WRITE {
                next = queued.try_recv().ok();
            }
        }
        for (packed, callers) in waits {
            number += 1;
            buffer.extend_from_slice(&packed);
            let shared = Arc::new(Mutex::new(Shared::Waiting(callers)));
            state.holding.fetch_add(1, Ordering::Relaxed);
            waits_written.fetch_add(1, Ordering::Relaxed);
            let to = Reply::Wait(shared.clone(), packed.clone());
            if awaited
                .send(Awaited {
                    skip: 0,
                    count: 1,
                    to,
                    holds: false,
                })
                .is_err()
            {
                return;
            }
            last_wait = Some(LastWait {
                packed,
                number,
                shared,
            });
        }
        if buffer.is_empty() {
            continue; // only waits shared with one already written
        }
        if write.write_all(&buffer).await.is_err() {
            return;
        }
        buffer.clear();
    }
}

/// Returns once no `WAIT` (nor a call that blocks) holds the connection in the server. What
/// would be written behind one waits in the server for its answer (a blocked client's commands
/// are not read), and its kept writes would need a `WAIT` of their own, a replica's round trip
/// after the first: held here until the answer, all the calls that came meanwhile go in one
/// write with one `WAIT`.
/// (A `WAIT` answers within its timeout; a server that never answers fails the calls waiting
/// here by their own deadlines, as it would fail them written.) Returns too once every handle
/// to the connection is gone.
async fn released(state: &State, queued: &mpsc::UnboundedReceiver<Call>) {
    while state.holding.load(Ordering::Relaxed) > 0 && !queued.is_closed() {
        state.released.notified().await;
    }
}

/// Reads replies and hands each call its own, in the order the calls were written. A kept
/// write whose reply changed something waits for the `WAIT` that ends its write (`covered`),
/// else for one the reader asks the writer for once the replies of one read are handed over
/// (its callers share it). On a failure or the end of the stream, every call still waiting
/// fails.
async fn reader(
    mut read: OwnedReadHalf,
    mut expected: mpsc::UnboundedReceiver<Awaited>,
    (state, calls): (Arc<State>, mpsc::WeakUnboundedSender<Call>),
) {
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut current: Option<(Awaited, Vec<Value>)> = None;
    // The kept writes of this read that wait for a WAIT, by its bytes, and the last's number.
    let mut to_keep: Vec<(Arc<[u8]>, Vec<Waiter>, u64)> = Vec::new();
    // The kept writes read that a WAIT written after them in their own write covers, by its
    // bytes: the next of those bytes to answer is that one.
    let mut covered_by: Vec<(Arc<[u8]>, Vec<Waiter>)> = Vec::new();
    'reading: loop {
        buffer.reserve(READ_CHUNK);
        match read.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let mut at = 0;
        loop {
            let length = match frame_length(&buffer[at..]) {
                Ok(Some(length)) => length,
                Ok(None) => break,
                Err(()) => break 'reading,
            };
            let Ok(value) = parse(&buffer[at..at + length]) else {
                break 'reading;
            };
            at += length;
            if matches!(value, Value::Push { .. }) {
                continue; // no subscription here: nobody waits for it
            }
            let (call, replies) = match current.as_mut() {
                Some(waiting) => waiting,
                None => match expected.try_recv() {
                    Ok(call) => {
                        // A kept write's answer joins its reply: room for it now.
                        let kept = matches!(&call.to, Reply::Call { kept: Some(_), .. });
                        let room = call.skip + call.count + usize::from(kept);
                        current.insert((call, Vec::with_capacity(room)))
                    }
                    Err(_) => break 'reading, // a reply nobody asked for: out of step
                },
            };
            replies.push(value);
            if replies.len() == call.skip + call.count {
                let (call, mut replies) = current.take().expect("just matched");
                if call.holds && state.holding.fetch_sub(1, Ordering::Relaxed) == 1 {
                    state.released.notify_one();
                }
                // (`split_off(0)` would allocate an empty vector in its place.)
                let replies = if call.skip == 0 {
                    replies
                } else {
                    replies.split_off(call.skip)
                };
                match call.to {
                    Reply::Call {
                        done,
                        number,
                        kept: None,
                        ..
                    } => {
                        let _ = done.send(Ok((replies, number)));
                    }
                    Reply::Call {
                        done,
                        number,
                        kept: Some(kept),
                        covered,
                    } => {
                        let mut replies = replies;
                        replies.truncate(1);
                        let changed = replies.first().is_some_and(kept.changed);
                        state.changing.store(changed, Ordering::Relaxed);
                        if !changed {
                            replies.resize(2, Value::Nil);
                            let _ = done.send(Ok((replies, number)));
                            continue;
                        }
                        let waiter = Waiter::Kept {
                            done,
                            replies,
                            number,
                        };
                        if covered {
                            match covered_by.iter_mut().find(|(wait, _)| *wait == kept.wait) {
                                Some((_, waiters)) => waiters.push(waiter),
                                None => covered_by.push((kept.wait, vec![waiter])),
                            }
                            continue;
                        }
                        match to_keep.iter_mut().find(|(wait, ..)| *wait == kept.wait) {
                            Some((_, waiters, last)) => {
                                waiters.push(waiter);
                                *last = number;
                            }
                            None => to_keep.push((kept.wait, vec![waiter], number)),
                        }
                    }
                    Reply::Wait(shared, packed) => {
                        if state.holding.fetch_sub(1, Ordering::Relaxed) == 1 {
                            state.released.notify_one();
                        }
                        let answer = Ok(replies);
                        let waiting = std::mem::replace(
                            &mut *lock(&shared),
                            Shared::Answered(answer.clone()),
                        );
                        let mut callers = match waiting {
                            Shared::Waiting(callers) => callers,
                            Shared::Answered(_) => Vec::new(),
                        };
                        // The kept writes read before it are counted by it: theirs too.
                        if let Some(at) = to_keep.iter().position(|(wait, ..)| *wait == packed) {
                            callers.extend(to_keep.swap_remove(at).1);
                        }
                        if let Some(at) = covered_by.iter().position(|(wait, _)| *wait == packed) {
                            callers.extend(covered_by.swap_remove(at).1);
                        }
                        callers.into_iter().for_each(|w| w.answer(&answer));
                    }
                }
            }
        }
        buffer.drain(..at);
        if !to_keep.is_empty() {
            let Some(calls) = calls.upgrade() else {
                break; // the connection is being dropped: its callers fail
            };
            for (packed, waiters, after) in to_keep.drain(..) {
                let wait = Call::Wait {
                    after,
                    packed,
                    waiters,
                };
                if calls.send(wait).is_err() {
                    break 'reading;
                }
            }
        }
    }
    // Dropping the senders fails the calls still waiting (`dropped`); a shared WAIT's callers
    // that come later fail too; the writer, no longer held, finds the reader gone.
    expected.close();
    state.holding.store(0, Ordering::Relaxed);
    state.released.notify_one();
    while let Ok(call) = expected.try_recv() {
        if let Reply::Wait(shared, _) = call.to {
            *lock(&shared) = Shared::Answered(Err(dropped()));
        }
    }
    if let Some((
        Awaited {
            to: Reply::Wait(shared, _),
            ..
        },
        _,
    )) = current
    {
        *lock(&shared) = Shared::Answered(Err(dropped()));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The value of one whole frame: an integer (a purchase's reply, a `WAIT`'s answer) read
/// here, anything else by redis-rs's parser (which costs more than the call's other work).
fn parse(frame: &[u8]) -> RedisResult<Value> {
    if let [b':', digits @ .., b'\r', b'\n'] = frame
        && let Some(n) = std::str::from_utf8(digits)
            .ok()
            .and_then(|text| text.parse().ok())
    {
        return Ok(Value::Int(n));
    }
    redis::parse_redis_value(frame)
}

/// The length of the RESP2/RESP3 frame at the start of `bytes`: `None` while it is not all
/// there, `Err` for bytes that are no frame.
pub(crate) fn frame_length(bytes: &[u8]) -> Result<Option<usize>, ()> {
    let mut at = 0;
    // Frames still to read whole, counting the one at `at`.
    let mut left: usize = 1;
    while left > 0 {
        let Some(&kind) = bytes.get(at) else {
            return Ok(None);
        };
        let Some(line) = bytes[at..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let header = &bytes[at + 1..at + line];
        at += line + 2;
        left -= 1;
        let number = || -> Result<i64, ()> {
            std::str::from_utf8(header)
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or(())
        };
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'!' | b'=' => {
                if let Ok(length) = usize::try_from(number()?) {
                    at = at
                        .checked_add(length)
                        .and_then(|at| at.checked_add(2))
                        .ok_or(())?;
                    if bytes.len() < at {
                        return Ok(None);
                    }
                }
            }
            // Counts past what any reply holds are refused, not added up: no overflow.
            b'*' | b'~' | b'>' => left = add_frames(left, number()?, 1)?,
            b'%' => left = add_frames(left, number()?, 2)?,
            // An attribute: its pairs, then the reply it is attached to.
            b'|' => left = add_frames(left, number()?, 2)?.checked_add(1).ok_or(())?,
            _ => return Err(()),
        }
    }
    Ok(Some(at))
}

/// `left` frames to read, and an aggregate's `items` (-1: null) of `per_item` frames each.
fn add_frames(left: usize, items: i64, per_item: usize) -> Result<usize, ()> {
    let items = usize::try_from(items.max(0)).map_err(|_| ())?;
    items
        .checked_mul(per_item)
        .and_then(|frames| left.checked_add(frames))
        .ok_or(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_measured_whole_or_not_at_all() {
        let frames: [&[u8]; 12] = [
            b"+OK\r\n",
            b"-ERR no\r\n",
            b":42\r\n",
            b"$5\r\nhe\r\nl\r\n",
            b"$-1\r\n",
            b"*2\r\n:1\r\n$1\r\na\r\n",
            b"*-1\r\n",
            b"%1\r\n+k\r\n*1\r\n:1\r\n",
            b"_\r\n",
            b"#t\r\n",
            b">2\r\n+a\r\n+b\r\n",
            b"|1\r\n+key\r\n+val\r\n:7\r\n",
        ];
        for frame in frames {
            assert_eq!(frame_length(frame), Ok(Some(frame.len())), "{frame:?}");
            for cut in 0..frame.len() {
                assert_eq!(
                    frame_length(&frame[..cut]),
                    Ok(None),
                    "{frame:?} cut at {cut}"
                );
            }
            let mut two = frame.to_vec();
            two.extend_from_slice(b":1\r\n");
            assert_eq!(frame_length(&two), Ok(Some(frame.len())));
        }
        assert_eq!(frame_length(b"*9223372036854775807\r\n"), Ok(None));
        let nested = b"*9223372036854775807\r\n%9223372036854775807\r\n";
        assert_eq!(
            frame_length(nested),
            Err(()),
            "more frames than a usize counts"
        );
        assert_eq!(frame_length(b"$9223372036854775807\r\n"), Ok(None));
        assert_eq!(frame_length(b"?x\r\n"), Err(()));
        assert_eq!(frame_length(b"$x\r\n"), Err(()));
        assert_eq!(frame_length(b"*x\r\n"), Err(()));
    }

    #[test]
    fn integers_are_read_as_redis_rs_reads_them() {
        for frame in [
            &b":42\r\n"[..],
            b":-2\r\n",
            b":0\r\n",
            b":+7\r\n",
            b"+OK\r\n",
        ] {
            assert_eq!(parse(frame), redis::parse_redis_value(frame), "{frame:?}");
        }
        assert!(parse(b":x\r\n").is_err());
        assert!(parse(b":\r\n").is_err());
    }

    #[test]
    fn the_handshake_follows_the_connection_info() {
        let names = |info: RedisConnectionInfo| -> Vec<Vec<u8>> {
            handshake(&info)
                .iter()
                .map(|cmd| cmd.get_packed_command())
                .collect()
        };
        assert!(names(RedisConnectionInfo::default()).is_empty());
        let resp3 = RedisConnectionInfo::default()
            .set_protocol(ProtocolVersion::RESP3)
            .set_password("pw");
        assert_eq!(
            names(resp3),
            [redis::cmd("HELLO")
                .arg(3)
                .arg("AUTH")
                .arg("default")
                .arg("pw")
                .get_packed_command()]
        );
        let resp2 = RedisConnectionInfo::default()
            .set_username("u")
            .set_password("pw")
            .set_db(2);
        assert_eq!(
            names(resp2),
            [
                redis::cmd("AUTH").arg("u").arg("pw").get_packed_command(),
                redis::cmd("SELECT").arg(2).get_packed_command()
            ]
        );
    }
}
