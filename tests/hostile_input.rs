//! Hostile input against a real server: random argument vectors for every command never crash
//! or hang it, and RESTORE of corrupt payloads that carry a valid checksum is refused. Short by
//! default (in `make test`); `SECKILL_SOAK=1` (`make soak`) runs the long versions.

use redis::Value;
use seckill_harness::seeded::{Rng, scale};
use seckill_harness::{Server, int, ok};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One RESP2 reply, parsed strictly; an error here means the server sent something invalid.
fn read_reply(reader: &mut BufReader<TcpStream>) -> Result<(), String> {
    let mut line = Vec::new();
    reader
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("read: {e}"))?;
    if !line.ends_with(b"\r\n") || line.len() < 3 {
        return Err(format!("bad line {line:?}"));
    }
    let body = std::str::from_utf8(&line[1..line.len() - 2])
        .map_err(|_| format!("non-UTF-8 header {line:?}"))?;
    match line[0] {
        b'+' | b'-' => Ok(()),
        b':' => body
            .parse::<i64>()
            .map(|_| ())
            .map_err(|_| format!("bad integer {body}")),
        b'$' => {
            let len: i64 = body.parse().map_err(|_| format!("bad length {body}"))?;
            if len >= 0 {
                let mut data = vec![0; len as usize + 2];
                reader
                    .read_exact(&mut data)
                    .map_err(|e| format!("read: {e}"))?;
                if !data.ends_with(b"\r\n") {
                    return Err("bulk without CRLF".into());
                }
            }
            Ok(())
        }
        b'*' => {
            let len: i64 = body.parse().map_err(|_| format!("bad length {body}"))?;
            (0..len.max(0)).try_for_each(|_| read_reply(reader))
        }
        other => Err(format!("unknown reply type {:?}", other as char)),
    }
}

const COMMANDS: [&str; 10] = [
    "SECKILL.INIT",
    "SECKILL.TRY",
    "SECKILL.INFO",
    "SECKILL.BOUGHT",
    "SECKILL._RESTORE",
    "LOCK.ACQUIRE",
    "LOCK.RELEASE",
    "LOCK.EXTEND",
    "LOCK.INFO",
    "LOCK._RESTORE",
];

fn random_arg(rng: &mut Rng) -> Vec<u8> {
    match rng.below(14) {
        0 => Vec::new(),
        1 => rng.below(5).to_string().into_bytes(),
        2 => format!("-{}", rng.below(1_000)).into_bytes(),
        3 => "9223372036854775807".into(),
        4 => "9223372036854775808".into(),
        5 => "99999999999999999999999999".into(),
        6 => (0..rng.below(40)).map(|_| rng.below(256) as u8).collect(),
        7 => ["LIMIT", "REPLACE", "WAIT", "limit", "wait"][rng.below(5) as usize].into(),
        8 => [
            "str", "list", "hash", "sale:a", "sale:b", "lock:a", "lock:b", "missing",
        ][rng.below(8) as usize]
            .into(),
        9 => format!("user{}", rng.below(50)).into_bytes(),
        10 => "1".into(),
        11 => vec![b'x'; rng.below(5_000) as usize],
        12 => "+1".into(),
        _ => format!("{}.5", rng.below(9)).into_bytes(),
    }
}

fn fuzz_argv(rng: &mut Rng, command: &str) -> Vec<Vec<u8>> {
    if command == "LOCK.ACQUIRE" && rng.below(10) == 0 {
        // Well-formed contention, so that blocking, queueing and unblocking get fuzzed too.
        let token = format!("fuzz{}", rng.below(4));
        return [command, "lock:a", &token, "100000", "WAIT", "0"]
            .iter()
            .map(|a| a.as_bytes().to_vec())
            .collect();
    }
    let mut argv = vec![command.as_bytes().to_vec()];
    for _ in 0..rng.below(7) {
        argv.push(random_arg(rng));
    }
    argv
}

#[test]
fn random_argv_never_crashes_or_hangs_the_server() {
    let per_command = scale(3_000, 100_000);
    let mut rng = Rng::new("fuzz/argv");
    let server = Server::start();
    let mut admin = server.con();
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut admin)
        .unwrap();
    let _: i64 = redis::cmd("RPUSH")
        .arg("list")
        .arg("x")
        .query(&mut admin)
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg("hash")
        .arg("f")
        .arg("v")
        .query(&mut admin)
        .unwrap();
    for key in ["sale:a", "sale:b"] {
        ok(&mut admin, &["SECKILL.INIT", key, "1000", "LIMIT", "3"]);
    }
    let stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    writer.write_all(b"CLIENT ID\r\n").unwrap();
    let mut id_line = String::new();
    reader.read_line(&mut id_line).unwrap();
    let fuzz_client: i64 = id_line.trim_start_matches(':').trim().parse().unwrap();
    // A fuzzed LOCK.ACQUIRE ... WAIT 0 on a held lock would block forever: a watchdog
    // unblocks the fuzzing client, which also exercises CLIENT UNBLOCK on module-blocked clients.
    let stop = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (stop, mut con) = (stop.clone(), server.con());
        std::thread::spawn(move || {
            let mut unblocked = 0;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5)); // the watchdog's period
                unblocked += redis::cmd("CLIENT")
                    .arg("UNBLOCK")
                    .arg(fuzz_client)
                    .query::<i64>(&mut con)
                    .unwrap();
            }
            unblocked
        })
    };
    let started = Instant::now();
    let mut sent = 0;
    let total = per_command * COMMANDS.len();
    while sent < total {
        let mut batch = Vec::new();
        let count = 200.min(total - sent);
        let argvs: Vec<Vec<Vec<u8>>> = (0..count)
            .map(|i| fuzz_argv(&mut rng, COMMANDS[(sent + i) % COMMANDS.len()]))
            .collect();
        for argv in &argvs {
            seckill_harness::encode_command(argv, &mut batch);
        }
        writer.write_all(&batch).unwrap();
        for (i, argv) in argvs.iter().enumerate() {
            read_reply(&mut reader).unwrap_or_else(|e| {
                let shown: Vec<String> = argv.iter().map(|a| seckill::args::printable(a)).collect();
                panic!("invalid reply to command {} ({shown:?}): {e}", sent + i)
            });
        }
        sent += count;
    }
    stop.store(true, Ordering::Relaxed);
    let unblocked = watchdog.join().unwrap();
    let pong: String = redis::cmd("PING").query(&mut admin).unwrap();
    assert_eq!(pong, "PONG");
    for key in ["sale:a", "sale:b"] {
        if let Ok(info) = redis::cmd("SECKILL.INFO")
            .arg(key)
            .query::<Vec<Value>>(&mut admin)
        {
            let n = |i: usize| redis::from_redis_value::<i64>(info[i].clone()).unwrap();
            assert_eq!(n(3) + n(5), n(1), "{key}: remaining + sold == stock");
        }
    }
    println!(
        "[fuzz/argv] {sent} random argv vectors over {} commands in {:.1} s: every reply valid RESP, \
         server alive, {unblocked} blocked ACQUIREs released by CLIENT UNBLOCK",
        COMMANDS.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Redis' DUMP checksum: CRC-64/Jones, reflected, over the payload and its RDB version.
fn crc64_jones(bytes: &[u8]) -> u64 {
    const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &byte in bytes {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
        }
    }
    crc
}

fn with_valid_crc(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crc64_jones(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

#[test]
fn crc64_matches_redis() {
    assert_eq!(crc64_jones(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "s", "5"]);
    let dump: Vec<u8> = redis::cmd("DUMP").arg("s").query(&mut con).unwrap();
    assert_eq!(with_valid_crc(dump[..dump.len() - 8].to_vec()), dump);
}

#[test]
fn restore_of_corrupt_payloads_with_valid_crc_is_refused() {
    let rounds = scale(2_000, 50_000);
    let mut rng = Rng::new("fuzz/restore");
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "s", "100", "LIMIT", "3"]);
    for user in ["alice", "bob", "carol"] {
        int(&mut con, &["SECKILL.TRY", "s", user, "2"]);
    }
    let _: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg("l")
        .arg("token")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let dumps: Vec<Vec<u8>> = ["s", "l"]
        .iter()
        .map(|k| redis::cmd("DUMP").arg(*k).query(&mut con).unwrap())
        .collect();
    let (mut refused, mut accepted) = (0, 0);
    for round in 0..rounds {
        let dump = &dumps[round % 2];
        let mut body = dump[..dump.len() - 8].to_vec();
        let payload_end = body.len() - 2; // the last two bytes are the RDB version
        match rng.below(3) {
            0 => {
                for _ in 0..=rng.below(3) {
                    let at = 1 + rng.below(payload_end as u64 - 1) as usize;
                    body[at] ^= 1 << rng.below(8);
                }
            }
            1 => {
                let cut = 1 + rng.below(payload_end as u64 - 1) as usize;
                body.drain(cut..payload_end);
            }
            _ => {
                let at = 1 + rng.below(payload_end as u64 - 1) as usize;
                body.insert(at, rng.below(256) as u8);
            }
        }
        match redis::cmd("RESTORE")
            .arg("victim")
            .arg(0)
            .arg(with_valid_crc(body))
            .arg("REPLACE")
            .query::<()>(&mut con)
        {
            Err(_) => refused += 1,
            Ok(()) => {
                accepted += 1;
                // A mutation that still decodes must still be a consistent value.
                if let Ok(info) = redis::cmd("SECKILL.INFO")
                    .arg("victim")
                    .query::<Vec<Value>>(&mut con)
                {
                    let n = |i: usize| redis::from_redis_value::<i64>(info[i].clone()).unwrap();
                    // remaining + held + sold == stock + restocked + absorbed - lent
                    assert_eq!(n(3) + n(13) + n(5) + n(27), n(1) + n(21) + n(29));
                }
            }
        }
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert!(
        refused > rounds / 2,
        "most corruptions are refused ({refused} of {rounds})"
    );
    println!(
        "[fuzz/restore] {rounds} corrupt DUMP payloads with valid CRC: {refused} refused with an error, {accepted} decoded to consistent values, server alive"
    );
}
