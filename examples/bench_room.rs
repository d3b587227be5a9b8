//! `make bench`'s "Waiting room" (#43): the server's time per call (INFO commandstats) of
//! `SECKILL.JOIN`, of a `SECKILL.TRY` refused for not being admitted (-6), and of a purchase
//! on a sale without `QUEUE` beside one with it (an admitted buyer), each from
//! `redis-benchmark -P 16` on one server; and the memory of a waiting user at a million
//! joiners (used_memory before and after); then (#50) `SECKILL.POSITION` beside `POSITION ...
//! WITHETA` with a million waiting, and the memory of a joined user with PRESENCE when half of
//! them left. Rounds interleaved, the median shown. Writes bench/results/room.md.

use seckill_harness::{Server, used_memory};
use std::fmt::Write as _;
use std::process::Command;

const REQUESTS: usize = 200_000;
const ROUNDS: usize = 3;
const JOINERS: usize = 1_000_000;

fn usec_per_call(server: &Server, command: &str) -> f64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.con())
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|line| {
            line.split(',')
                .find_map(|f| f.strip_prefix("usec_per_call="))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn run(server: &Server, args: &[&str]) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut server.con())
        .unwrap();
    let binary = std::env::var("REDIS_BENCHMARK").unwrap_or_else(|_| "redis-benchmark".into());
    let out = Command::new(&binary)
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["-n", &REQUESTS.to_string(), "-c", "16", "-P", "16", "-q"])
        .args(["-r", "100000000000"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {binary}: {e}"));
    assert!(out.status.success(), "{binary} failed");
}

fn init(server: &Server, args: &[&str]) {
    let _: () = redis::cmd("SECKILL.INIT")
        .arg(args)
        .arg("REPLACE")
        .query(&mut server.con())
        .unwrap();
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let server = Server::start();
    let (mut join, mut refused, mut plain, mut admitted) = (vec![], vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        init(&server, &["room", "1000000000", "QUEUE"]);
        run(
            &server,
            &["SECKILL.JOIN", "room", &format!("j{round}:__rand_int__")],
        );
        join.push(usec_per_call(&server, "seckill.join"));
        run(
            &server,
            &["SECKILL.TRY", "room", &format!("b{round}:__rand_int__")],
        );
        refused.push(usec_per_call(&server, "seckill.try"));
        init(&server, &["plain", "1000000000"]);
        run(
            &server,
            &["SECKILL.TRY", "plain", &format!("p{round}:__rand_int__")],
        );
        plain.push(usec_per_call(&server, "seckill.try"));
        // One admitted buyer with a LIMIT as large as the run: every TRY a purchase.
        init(
            &server,
            &["open", "1000000000", "LIMIT", "1000000000", "QUEUE"],
        );
        let mut con = server.con();
        let _: i64 = redis::cmd("SECKILL.JOIN")
            .arg("open")
            .arg("vip")
            .query(&mut con)
            .unwrap();
        let _: i64 = redis::cmd("SECKILL.ADMIT")
            .arg("open")
            .arg(1)
            .query(&mut con)
            .unwrap();
        run(&server, &["SECKILL.TRY", "open", "vip"]);
        admitted.push(usec_per_call(&server, "seckill.try"));
    }
    // Memory: a million joiners of 13-byte ids, piped.
    let mut con = server.con();
    init(&server, &["mem", "10", "QUEUE"]);
    let before = used_memory(&mut con);
    for chunk in 0..(JOINERS / 10_000) {
        let mut pipe = redis::pipe();
        for n in 0..10_000 {
            pipe.cmd("SECKILL.JOIN")
                .arg("mem")
                .arg(format!("user:{:08}", chunk * 10_000 + n))
                .ignore();
        }
        let _: () = pipe.query(&mut con).unwrap();
    }
    let per_user = (used_memory(&mut con) - before) as f64 / JOINERS as f64;
    // POSITION and POSITION WITHETA with the million waiting, on existing users in a random
    // order, piped from here; interleaved.
    let (mut position, mut witheta) = (vec![], vec![]);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..ROUNDS {
        for (flag, into) in [(false, &mut position), (true, &mut witheta)] {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query(&mut con)
                .unwrap();
            for _ in 0..(REQUESTS / 10_000) {
                let mut pipe = redis::pipe();
                for _ in 0..10_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let user = format!("user:{:08}", x % JOINERS as u64);
                    let call = pipe.cmd("SECKILL.POSITION").arg("mem").arg(user);
                    if flag {
                        call.arg("WITHETA");
                    }
                    call.ignore();
                }
                let _: () = pipe.query(&mut con).unwrap();
            }
            into.push(usec_per_call(&server, "seckill.position"));
        }
    }
    let (position, witheta) = (median(position), median(witheta));
    // PRESENCE: a million joiners, then half of them leave (the leavers' places are counted).
    let before = used_memory(&mut con);
    init(&server, &["pres", "10", "QUEUE", "PRESENCE", "600000"]);
    let mut with_presence = Vec::new();
    for leaving in [false, true] {
        for chunk in 0..(JOINERS / 10_000) {
            let mut pipe = redis::pipe();
            for n in (0..10_000).filter(|n| !leaving || n % 2 == 0) {
                let command = if leaving {
                    "SECKILL.LEAVE"
                } else {
                    "SECKILL.JOIN"
                };
                pipe.cmd(command)
                    .arg("pres")
                    .arg(format!("user:{:08}", chunk * 10_000 + n))
                    .ignore();
            }
            let _: () = pipe.query(&mut con).unwrap();
        }
        with_presence.push((used_memory(&mut con) - before) as f64 / JOINERS as f64);
    }
    let (waiting, half_left) = (with_presence[0], with_presence[1]);
    let mut md = String::new();
    writeln!(
        md,
        "# Waiting room\n\nGenerated by `make bench` (examples/bench_room.rs): server time per call \
         (INFO commandstats) under `redis-benchmark -P 16 -c 16`, {REQUESTS} calls per row, \
         {ROUNDS} rounds interleaved, the median shown; memory from used_memory around \
         {JOINERS} JOINs of 13-byte ids. Goal (#43): at most 40 bytes per waiting user.\n\n\
         | row | server us/call |\n| --- | ---: |\n\
         | SECKILL.JOIN (new users) | {:.2} |\n\
         | SECKILL.TRY not admitted (-6) | {:.2} |\n\
         | SECKILL.TRY, sale without QUEUE (new buyers) | {:.2} |\n\
         | SECKILL.TRY, admitted buyer, sale with QUEUE | {:.2} |\n\n\
         Memory per waiting user at {JOINERS} joiners: **{per_user:.1} bytes**.\n\n\
         ## Leave, presence, ETA (#50)\n\n\
         With the {JOINERS} waiting, {REQUESTS} calls on existing users in a random order, piped \
         (server time per call): `SECKILL.POSITION` **{position:.2} us**, `SECKILL.POSITION ... \
         WITHETA` **{witheta:.2} us** ({ratio:.2}x; goal at most 1.2x).\n\n\
         With `PRESENCE` (each place's last join), by used_memory: **{waiting:.1} bytes per \
         waiting user** at {JOINERS} joiners (goal at most 48); once half of them left by \
         `SECKILL.LEAVE` (the leavers' places then counted in a Fenwick tree, 4 bytes a place), \
         {half_left:.1} bytes per user who joined.\n",
        median(join),
        median(refused),
        median(plain),
        median(admitted),
        ratio = witheta / position,
    )
    .unwrap();
    print!("{md}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/results");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("room.md"), md).unwrap();
}
