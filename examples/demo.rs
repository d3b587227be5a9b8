//! `make demo`: the oversell incident, replayed against a real server with the module.
//!
//! One flash sale of UNITS units and BUYERS concurrent buyers (some of them twice), whose
//! downstream "user service" sometimes stalls past the lock TTL, run four ways on fresh keys:
//! the naive pattern from the incident, the usual patches, SECKILL.TRY, LOCK.ACQUIRE with
//! fencing tokens checked by the downstream store, and the client library's `Lock` (watchdog,
//! `check()`, fence), whose stalling holders are whole processes frozen with SIGSTOP past the
//! TTL. Everything in the table is measured from the keys afterwards. `demo --smoke` runs a
//! small version (used by `make test`).

use redis::{Connection, Script};
use seckill_client::{Lock, LockGuard, LockOptions};
use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const LOCK_TTL_MS: u64 = 100;
const STALL_MS: u64 = LOCK_TTL_MS + 50;

#[derive(Clone, Copy)]
struct Plan {
    units: i64,
    buyers: usize,
    distinct_users: usize,
}

/// One buyer in 20 meets a stall longer than the lock TTL.
fn stalls(buyer: usize) -> bool {
    (buyer.wrapping_mul(2_654_435_761) >> 7).is_multiple_of(20)
}

/// The downstream user service: usually 1 ms, for one buyer in 20 longer than the lock TTL.
fn user_service(buyer: usize) {
    std::thread::sleep(Duration::from_millis(if stalls(buyer) {
        STALL_MS
    } else {
        1
    }));
}

fn user_of(plan: Plan, buyer: usize) -> String {
    format!("user-{}", buyer % plan.distinct_users)
}

/// What one buyer's attempt did to the downstream store.
#[derive(Default, Clone, Copy)]
struct Attempt {
    stale_write_rejected: bool,
    /// The holder was frozen past its lease (pattern 5) ...
    frozen: bool,
    /// ... and its own `check()` stopped it before it wrote.
    stopped_by_check: bool,
}

struct Row {
    name: &'static str,
    sold: i64,
    oversold: i64,
    duplicates: i64,
    stale_rejected: usize,
    frozen: usize,
    stopped_by_check: usize,
    frozen_wrote: usize,
    elapsed: Duration,
}

/// Lock pollers retry every 10 ms, as the incident's clients did.
fn retry_pause() {
    std::thread::sleep(Duration::from_millis(10));
}

/// Both client-side patterns skip the lock once the stock reads as gone.
fn looks_sold_out(con: &mut Connection, key: String, field: Option<&str>) -> bool {
    let stock: Option<i64> = match field {
        None => redis::cmd("GET").arg(key).query(con).unwrap(),
        Some(field) => redis::cmd("HGET").arg(key).arg(field).query(con).unwrap(),
    };
    stock.unwrap_or(0) <= 0
}

/// Pattern 1: The incident: SET NX EX lock, GET/compare/SET stock, plain DEL unlock.
fn naive(con: &mut Connection, plan: Plan, buyer: usize, p: &str) -> Attempt {
    let user = user_of(plan, buyer);
    loop {
        let locked: Option<String> = redis::cmd("SET")
            .arg(format!("{p}lock"))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_TTL_MS)
            .query(con)
            .unwrap();
        if locked.is_none() {
            retry_pause();
            continue;
        }
        let stock: i64 = redis::cmd("GET")
            .arg(format!("{p}stock"))
            .query(con)
            .unwrap();
        let bought: bool = redis::cmd("SISMEMBER")
            .arg(format!("{p}buyers"))
            .arg(&user)
            .query(con)
            .unwrap();
        if stock > 0 && !bought {
            user_service(buyer);
            let _: () = redis::cmd("SET")
                .arg(format!("{p}stock"))
                .arg(stock - 1)
                .query(con)
                .unwrap();
            let _: i64 = redis::cmd("SADD")
                .arg(format!("{p}buyers"))
                .arg(&user)
                .query(con)
                .unwrap();
            let _: i64 = redis::cmd("RPUSH")
                .arg(format!("{p}orders"))
                .arg(&user)
                .query(con)
                .unwrap();
        }
        let _: i64 = redis::cmd("DEL")
            .arg(format!("{p}lock"))
            .query(con)
            .unwrap();
        return Attempt::default();
    }
}

const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// Pattern 2: The usual patches: a token with a Lua compare-and-delete unlock, `HINCRBY -1` with a
/// check for a negative result, and dedup with a SET of buyers in the client.
fn patched(con: &mut Connection, plan: Plan, buyer: usize, p: &str) -> Attempt {
    let user = user_of(plan, buyer);
    let token = format!("{}-{buyer}", std::process::id());
    let unlock = Script::new(COMPARE_AND_DELETE);
    loop {
        if looks_sold_out(con, format!("{p}units"), Some("units")) {
            return Attempt::default();
        }
        let locked: Option<String> = redis::cmd("SET")
            .arg(format!("{p}lock"))
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_TTL_MS)
            .query(con)
            .unwrap();
        if locked.is_none() {
            retry_pause();
            continue;
        }
        let first: i64 = redis::cmd("SADD")
            .arg(format!("{p}buyers"))
            .arg(&user)
            .query(con)
            .unwrap();
        if first == 1 {
            user_service(buyer);
            let left: i64 = redis::cmd("HINCRBY")
                .arg(format!("{p}units"))
                .arg("units")
                .arg(-1)
                .query(con)
                .unwrap();
            if left < 0 {
                let _: i64 = redis::cmd("HINCRBY")
                    .arg(format!("{p}units"))
                    .arg("units")
                    .arg(1)
                    .query(con)
                    .unwrap();
                let _: i64 = redis::cmd("SREM")
                    .arg(format!("{p}buyers"))
                    .arg(&user)
                    .query(con)
                    .unwrap();
            } else {
                let _: i64 = redis::cmd("RPUSH")
                    .arg(format!("{p}orders"))
                    .arg(&user)
                    .query(con)
                    .unwrap();
            }
        }
        let _: i64 = unlock
            .key(format!("{p}lock"))
            .arg(&token)
            .invoke(con)
            .unwrap();
        return Attempt::default();
    }
}

/// Pattern 3: The module: one SECKILL.TRY.
fn module_try(con: &mut Connection, plan: Plan, buyer: usize, p: &str) -> Attempt {
    let user = user_of(plan, buyer);
    user_service(buyer);
    let left: i64 = redis::cmd("SECKILL.TRY")
        .arg(format!("{p}sale"))
        .arg(&user)
        .query(con)
        .unwrap();
    if left >= 0 {
        let _: i64 = redis::cmd("RPUSH")
            .arg(format!("{p}orders"))
            .arg(&user)
            .query(con)
            .unwrap();
    }
    Attempt::default()
}

/// The downstream store's side of fencing: the highest fence seen wins, on reads and writes.
const FENCED_READ: &str = "\
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < seen then return -1 end
redis.call('SET', KEYS[1], ARGV[1])
return tonumber(redis.call('GET', KEYS[2]))";

const FENCED_WRITE: &str = "\
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < seen then return 0 end
if redis.call('SISMEMBER', KEYS[3], ARGV[2]) == 1 then return 2 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[3])
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('RPUSH', KEYS[4], ARGV[2])
return 1";

/// Pattern 4: LOCK.ACQUIRE ... WAIT with fencing tokens; the store refuses a stalled holder's write.
fn fenced(con: &mut Connection, plan: Plan, buyer: usize, p: &str) -> Attempt {
    let user = user_of(plan, buyer);
    let token = format!("{}-{buyer}", std::process::id());
    let (read, write) = (Script::new(FENCED_READ), Script::new(FENCED_WRITE));
    let mut attempt = Attempt::default();
    loop {
        let fence: Option<i64> = redis::cmd("LOCK.ACQUIRE")
            .arg(format!("{p}lock"))
            .arg(&token)
            .arg(LOCK_TTL_MS)
            .arg("WAIT")
            .arg(10_000)
            .query(con)
            .unwrap();
        let Some(fence) = fence else { continue };
        let stock: i64 = read
            .key(format!("{p}fence"))
            .key(format!("{p}stock"))
            .arg(fence)
            .invoke(con)
            .unwrap();
        if stock > 0 {
            user_service(buyer);
            let wrote: i64 = write
                .key(format!("{p}fence"))
                .key(format!("{p}stock"))
                .key(format!("{p}buyers"))
                .key(format!("{p}orders"))
                .arg(fence)
                .arg(&user)
                .arg(stock - 1)
                .invoke(con)
                .unwrap();
            attempt.stale_write_rejected = wrote == 0;
        } else if stock < 0 {
            attempt.stale_write_rejected = true;
        }
        let _: i64 = redis::cmd("LOCK.RELEASE")
            .arg(format!("{p}lock"))
            .arg(&token)
            .query(con)
            .unwrap();
        return attempt;
    }
}

/// Pattern 5's lock: the library's, with the demo's TTL (no replicas on the demo's server).
fn library_lock(port: u16, p: &str) -> Lock {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let options = LockOptions {
        ttl_ms: LOCK_TTL_MS,
        replicas: Some(0),
        ..LockOptions::default()
    };
    Lock::with_options(client, &format!("{p}lock"), options).unwrap()
}

/// One purchase under the library's lock: the fenced read, the user service, `check()` right
/// before the write, the fenced write. `pause` runs between the read and the check: where a
/// holder meets its stall.
fn library_purchase(
    con: &mut Connection,
    guard: &LockGuard,
    user: &str,
    p: &str,
    pause: impl FnOnce(),
) -> Attempt {
    let fence = guard.fence() as i64;
    let stock: i64 = Script::new(FENCED_READ)
        .key(format!("{p}fence"))
        .key(format!("{p}stock"))
        .arg(fence)
        .invoke(con)
        .unwrap();
    if stock < 0 {
        return Attempt {
            stale_write_rejected: true,
            ..Attempt::default()
        };
    }
    if stock == 0 {
        return Attempt::default();
    }
    pause();
    if guard.check().is_err() {
        return Attempt {
            stale_write_rejected: true,
            stopped_by_check: true,
            ..Attempt::default()
        };
    }
    let wrote: i64 = Script::new(FENCED_WRITE)
        .key(format!("{p}fence"))
        .key(format!("{p}stock"))
        .key(format!("{p}buyers"))
        .key(format!("{p}orders"))
        .arg(fence)
        .arg(user)
        .arg(stock - 1)
        .invoke(con)
        .unwrap();
    Attempt {
        stale_write_rejected: wrote == 0,
        ..Attempt::default()
    }
}

/// Pattern 5: the client library's `Lock`. A buyer that meets a stall is a process of its own
/// (this binary, `--frozen-buyer`), frozen with SIGSTOP while it holds the lock, for longer than
/// the TTL: its watchdog cannot renew, the lock goes on to the next waiter, and on waking the
/// holder's `check()` (or else the store's fence) must stop its write.
static SERVER_PORT: std::sync::OnceLock<u16> = std::sync::OnceLock::new();

fn library(con: &mut Connection, plan: Plan, buyer: usize, p: &str) -> Attempt {
    let port = *SERVER_PORT.get().expect("set by main");
    let user = user_of(plan, buyer);
    if !stalls(buyer) {
        // The buyers that will freeze queue first (their processes start meanwhile): else the
        // sale could sell out before any of them holds the lock.
        std::thread::sleep(Duration::from_millis(50));
        let guard = library_lock(port, p).hold(60_000).unwrap();
        return library_purchase(con, &guard, &user, p, || user_service(buyer));
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--frozen-buyer", &port.to_string(), p, &user])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn a frozen buyer");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let mut attempt = Attempt::default();
    if line.trim() == "held" {
        let pid = child.id() as i32;
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        std::thread::sleep(Duration::from_millis(STALL_MS)); // the freeze itself
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
        line.clear();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        attempt = match line.trim() {
            "stopped" => Attempt {
                stale_write_rejected: true,
                stopped_by_check: true,
                ..attempt
            },
            "refused" => Attempt {
                stale_write_rejected: true,
                ..attempt
            },
            _ => attempt,
        };
        attempt.frozen = true;
    }
    child.wait().unwrap();
    attempt
}

/// `demo --frozen-buyer port prefix user`: pattern 5's stalling buyer. Says "held" once it has
/// the lock and stock to buy, waits for a line (the parent freezes it meanwhile), then buys and
/// says how it ended: "stopped" (check), "refused" (fence), "wrote".
fn frozen_buyer(args: &[String]) {
    let (port, p, user) = (args[0].parse().unwrap(), &args[1], &args[2]);
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let guard = library_lock(port, p).hold(60_000).unwrap();
    let attempt = library_purchase(&mut con, &guard, user, p, || {
        println!("held");
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).unwrap();
    });
    let said = match (attempt.stopped_by_check, attempt.stale_write_rejected) {
        (true, _) => "stopped",
        (false, true) => "refused",
        (false, false) => "wrote",
    };
    println!("{said}");
}

type Pattern = fn(&mut Connection, Plan, usize, &str) -> Attempt;

fn run(
    server: &seckill_harness::Server,
    plan: Plan,
    name: &'static str,
    prefix: &'static str,
    pattern: Pattern,
) -> Row {
    let mut setup = server.con();
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}stock"))
        .arg(plan.units)
        .query(&mut setup)
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg(format!("{prefix}units"))
        .arg("units")
        .arg(plan.units)
        .query(&mut setup)
        .unwrap();
    let _: () = redis::cmd("SECKILL.INIT")
        .arg(format!("{prefix}sale"))
        .arg(plan.units)
        .query(&mut setup)
        .unwrap();

    let barrier = Arc::new(Barrier::new(plan.buyers));
    let started = Instant::now();
    let threads: Vec<_> = (0..plan.buyers)
        .map(|buyer| {
            let barrier = barrier.clone();
            let mut con = server.con();
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    barrier.wait();
                    pattern(&mut con, plan, buyer, prefix)
                })
                .expect("spawn buyer")
        })
        .collect();
    let attempts: Vec<Attempt> = threads
        .into_iter()
        .map(|t| t.join().expect("buyer"))
        .collect();
    let elapsed = started.elapsed();

    let orders: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{prefix}orders"))
        .arg(0)
        .arg(-1)
        .query(&mut setup)
        .unwrap();
    let distinct: HashSet<&String> = orders.iter().collect();
    let sold = orders.len() as i64;
    Row {
        name,
        sold,
        oversold: (sold - plan.units).max(0),
        duplicates: sold - distinct.len() as i64,
        stale_rejected: attempts.iter().filter(|a| a.stale_write_rejected).count(),
        frozen: attempts.iter().filter(|a| a.frozen).count(),
        stopped_by_check: attempts.iter().filter(|a| a.stopped_by_check).count(),
        frozen_wrote: attempts
            .iter()
            .filter(|a| a.frozen && !a.stale_write_rejected)
            .count(),
        elapsed,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--frozen-buyer") {
        return frozen_buyer(&args[2..]);
    }
    let smoke = std::env::args().any(|a| a == "--smoke");
    let plan = if smoke {
        Plan {
            units: 20,
            buyers: 200,
            distinct_users: 180,
        }
    } else {
        Plan {
            units: 100,
            buyers: 1_000,
            distinct_users: 900,
        }
    };
    let server = seckill_harness::Server::start_with(&["--maxclients", "10000"]);
    SERVER_PORT.set(server.port).unwrap();
    println!(
        "flash sale: {} units, {} concurrent buyers ({} distinct users), lock TTL {LOCK_TTL_MS} ms, \
         1 in 20 user-service calls stalls {STALL_MS} ms",
        plan.units, plan.buyers, plan.distinct_users
    );
    let patterns: [(&'static str, &'static str, Pattern); 5] = [
        ("1. naive: SET NX EX + GET/SET + DEL", "naive:", naive),
        (
            "2. patched: Lua unlock + HINCRBY + SADD",
            "patched:",
            patched,
        ),
        ("3. module: SECKILL.TRY", "module:", module_try),
        ("4. module: LOCK.ACQUIRE + fencing", "fenced:", fenced),
        (
            "5. library: Lock (watchdog, check, fence)",
            "library:",
            library,
        ),
    ];
    let rows: Vec<Row> = patterns
        .into_iter()
        .map(|(name, prefix, pattern)| run(&server, plan, name, prefix, pattern))
        .collect();

    println!("\n| pattern | sold | oversold | duplicate buyers | rejected stale writes | time |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.2} s |",
            r.name,
            r.sold,
            r.oversold,
            r.duplicates,
            r.stale_rejected,
            r.elapsed.as_secs_f64()
        );
    }
    let exact = |r: &Row| r.sold == plan.units && r.oversold == 0 && r.duplicates == 0;
    if !rows[2..].iter().all(exact) {
        eprintln!(
            "FAIL: a module row did not sell exactly {} units to distinct buyers",
            plan.units
        );
        std::process::exit(1);
    }
    let library = &rows[4];
    println!(
        "\nrow 5: {} holders frozen (SIGSTOP) {STALL_MS} ms past a {LOCK_TTL_MS} ms lease: {} stopped \
         by check(), {} refused by the fence, {} wrote",
        library.frozen,
        library.stopped_by_check,
        library.frozen - library.stopped_by_check - library.frozen_wrote,
        library.frozen_wrote
    );
    if library.frozen == 0 || library.frozen_wrote > 0 {
        eprintln!("FAIL: a frozen holder's write went through (or none was frozen)");
        std::process::exit(1);
    }
    println!(
        "\nmodule rows: exactly {} sold, 0 oversold, 0 duplicates",
        plan.units
    );
}
