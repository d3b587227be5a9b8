//! The ceiling of the rows above on this machine: a client written for this bench alone, with
//! no library, no tasks and no parsing beyond integers. The bench's 256 purchases in flight
//! as 2 connections of 128 pipelined `SECKILL.TRY ... ID` per write (the shape of the crate's
//! session: 2 connections per node), each write read back whole before the next; with a
//! replica's acknowledgement, each write ended by one `WAIT 1 1000`, and optionally two writes
//! of 64 in flight per connection (the second queued in the server behind the first's `WAIT`;
//! the same 256 in flight as the other rows).
//! What the durability costs when the client costs next to nothing: the servers' own work (a
//! `WAIT`, the replica's `REPLCONF ACK`) and the replica's round trip.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const CONNECTIONS: usize = 2;

#[derive(Clone, Copy)]
pub enum ByHand {
    /// Answered by the master alone.
    Master,
    /// Each write ended by one `WAIT`, read back before the next.
    WaitPerWrite,
    /// Each write ended by one `WAIT`, two writes in flight per connection (each half as big).
    TwoWritesInFlight,
}

/// `purchases` purchases of `key`, users `{row}:{n}`, `in_flight` at once: how long they took.
pub fn run(
    port: u16,
    key: &str,
    row: &str,
    (purchases, in_flight): (usize, usize),
    how: ByHand,
) -> Duration {
    let depth = if matches!(how, ByHand::TwoWritesInFlight) {
        2
    } else {
        1
    };
    // The same purchases in flight whatever the depth: a write holds fewer when two are.
    let batch = in_flight / (CONNECTIONS * depth);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let connections: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (next, key, row) = (next.clone(), key.to_string(), row.to_string());
            std::thread::spawn(move || {
                let mut con = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                con.set_nodelay(true).expect("nodelay");
                let mut written: std::collections::VecDeque<usize> = Default::default();
                let (mut out, mut replies) = (Vec::new(), Replies::default());
                loop {
                    while written.len() < depth {
                        let first = next.fetch_add(batch, Ordering::Relaxed);
                        if first >= purchases {
                            break;
                        }
                        let last = (first + batch).min(purchases);
                        out.clear();
                        for n in first..last {
                            let (user, id) = (format!("{row}:{n}"), format!("{n:032x}"));
                            let args: [&[u8]; 6] = [
                                b"SECKILL.TRY",
                                key.as_bytes(),
                                user.as_bytes(),
                                b"1",
                                b"ID",
                                id.as_bytes(),
                            ];
                            seckill_harness::encode_command(&args, &mut out);
                        }
                        let mut count = last - first;
                        if !matches!(how, ByHand::Master) {
                            let wait: [&[u8]; 3] = [b"WAIT", b"1", b"1000"];
                            seckill_harness::encode_command(&wait, &mut out);
                            count += 1;
                        }
                        con.write_all(&out).expect("write");
                        written.push_back(count);
                    }
                    let Some(count) = written.pop_front() else {
                        break;
                    };
                    replies.read(&mut con, count);
                }
            })
        })
        .collect();
    for connection in connections {
        connection.join().expect("a connection's thread");
    }
    started.elapsed()
}

/// What was read and not yet counted.
#[derive(Default)]
struct Replies {
    buffer: Vec<u8>,
}

impl Replies {
    /// Reads `count` replies, each a non-negative integer (a purchase, a WAIT's count).
    fn read(&mut self, con: &mut TcpStream, count: usize) {
        let mut chunk = [0u8; 64 * 1024];
        let mut seen = 0;
        loop {
            let mut at = 0;
            while seen < count {
                let Some(end) = self.buffer[at..].windows(2).position(|w| w == b"\r\n") else {
                    break;
                };
                let reply = &self.buffer[at..at + end];
                assert!(
                    reply.starts_with(b":") && reply.get(1) != Some(&b'-'),
                    "{:?}",
                    String::from_utf8_lossy(reply)
                );
                at += end + 2;
                seen += 1;
            }
            self.buffer.drain(..at);
            if seen == count {
                return;
            }
            let read = con.read(&mut chunk).expect("read");
            assert!(read > 0, "the server closed the connection");
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }
}
