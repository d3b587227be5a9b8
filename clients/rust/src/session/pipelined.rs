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
//! one write carries them all (see `make bench`, "Durability").

use redis::{Cmd, Pipeline, ProtocolVersion, RedisConnectionInfo, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

/// The most bytes one write carries (more calls wait for the next one).
const MAX_WRITE: usize = 1 << 20;
/// The reader's first buffer (it grows for a larger reply).
const READ_CHUNK: usize = 64 * 1024;

/// A connection; clones share it.
#[derive(Clone)]
pub(crate) struct Pipelined {
    calls: mpsc::UnboundedSender<Call>,
}

/// Commands written together, and who waits for which of their replies.
struct Call {
    packed: Vec<u8>,
    awaited: Awaited,
}

/// The replies of one call: `skip` of them dropped (a transaction's QUEUED), then `count`
/// handed over.
struct Awaited {
    skip: usize,
    count: usize,
    done: oneshot::Sender<RedisResult<Vec<Value>>>,
}

impl Pipelined {
    /// A connection over `stream`, after the handshake `info` asks for (RESP3's HELLO, AUTH,
    /// SELECT).
    pub(crate) async fn handshake(
        stream: TcpStream,
        info: &RedisConnectionInfo,
    ) -> RedisResult<Pipelined> {
        let (read, write) = stream.into_split();
        let (calls, queued) = mpsc::unbounded_channel();
        let (awaited, expected) = mpsc::unbounded_channel();
        tokio::spawn(writer(write, queued, awaited));
        tokio::spawn(reader(read, expected));
        let con = Pipelined { calls };
        for cmd in handshake(info) {
            if let Value::ServerError(e) = con.send_packed_command(&cmd).await? {
                return Err(e.into());
            }
        }
        Ok(con)
    }

    /// `cmd`'s reply (a server error as `Value::ServerError`).
    pub(crate) async fn send_packed_command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut replies = self.send(cmd.get_packed_command(), 0, 1).await?;
        Ok(replies.pop().unwrap_or(Value::Nil))
    }

    /// `pipeline`'s replies after the first `offset`, `count` of them.
    pub(crate) async fn send_packed_commands(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send(pipeline.get_packed_pipeline(), offset, count)
            .await
    }

    async fn send(&self, packed: Vec<u8>, skip: usize, count: usize) -> RedisResult<Vec<Value>> {
        let (done, answer) = oneshot::channel();
        let awaited = Awaited { skip, count, done };
        self.calls
            .send(Call { packed, awaited })
            .map_err(|_| dropped())?;
        answer.await.map_err(|_| dropped())?
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

/// Writes the calls as they come: once woken by one, it yields, so that every task ready to
/// call queues its call, then writes all that are queued at once. Each call's replies are
/// announced to the reader before its bytes are written.
async fn writer(
    mut write: OwnedWriteHalf,
    mut queued: mpsc::UnboundedReceiver<Call>,
    awaited: mpsc::UnboundedSender<Awaited>,
) {
    let mut buffer = Vec::with_capacity(READ_CHUNK);
    while let Some(first) = queued.recv().await {
        tokio::task::yield_now().await;
        let mut next = Some(first);
        while let Some(call) = next.take() {
            buffer.extend_from_slice(&call.packed);
            if awaited.send(call.awaited).is_err() {
                return; // the reader is gone: so is the connection
            }
            if buffer.len() < MAX_WRITE {
                next = queued.try_recv().ok();
            }
        }
        if write.write_all(&buffer).await.is_err() {
            return;
        }
        buffer.clear();
    }
}

/// Reads replies and hands each call its own, in the order the calls were written. On a
/// failure or the end of the stream, every call still waiting fails.
async fn reader(mut read: OwnedReadHalf, mut expected: mpsc::UnboundedReceiver<Awaited>) {
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut current: Option<(Awaited, Vec<Value>)> = None;
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
            let Ok(value) = redis::parse_redis_value(&buffer[at..at + length]) else {
                break 'reading;
            };
            at += length;
            if matches!(value, Value::Push { .. }) {
                continue; // no subscription here: nobody waits for it
            }
            let (call, replies) = match current.as_mut() {
                Some(waiting) => waiting,
                None => match expected.try_recv() {
                    Ok(call) => current.insert((call, Vec::new())),
                    Err(_) => break 'reading, // a reply nobody asked for: out of step
                },
            };
            replies.push(value);
            if replies.len() == call.skip + call.count {
                let (call, mut replies) = current.take().expect("just matched");
                let _ = call.done.send(Ok(replies.split_off(call.skip)));
            }
        }
        buffer.drain(..at);
    }
    // Dropping the senders fails the calls still waiting (`dropped`).
    expected.close();
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
