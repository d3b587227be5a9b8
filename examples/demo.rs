//! `make demo`: the oversell incident, replayed against a real server with the module.
//!
//! One flash sale of UNITS units and BUYERS concurrent buyers (some of them twice), whose
//! downstream "user service" sometimes stalls past the lock TTL, run four ways on fresh keys:
//! the naive pattern from the incident, the usual patches, SECKILL.TRY, and LOCK.ACQUIRE with
//! fencing tokens checked by the downstream store. Everything in the table is measured from
//! the keys afterwards. `demo --smoke` runs a small version (used by `make test`).

use redis::{Connection, Script};
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

/// The downstream user service: usually 1 ms, for one buyer in 20 longer than the lock TTL.
fn user_service(buyer: usize) {
    let stalls = (buyer.wrapping_mul(2_654_435_761) >> 7).is_multiple_of(20);
    std::thread::sleep(Duration::from_millis(if stalls { STALL_MS } else { 1 }));
}

fn user_of(plan: Plan, buyer: usize) -> String {
    format!("user-{}", buyer % plan.distinct_users)
}

/// What one buyer's attempt did to the downstream store.
#[derive(Default, Clone, Copy)]
struct Attempt {
    stale_write_rejected: bool,
}

struct Row {
    name: &'static str,
    sold: i64,
    oversold: i64,
    duplicates: i64,
    stale_rejected: usize,
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
        elapsed,
    }
}

fn main() {
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
    println!(
        "flash sale: {} units, {} concurrent buyers ({} distinct users), lock TTL {LOCK_TTL_MS} ms, \
         1 in 20 user-service calls stalls {STALL_MS} ms",
        plan.units, plan.buyers, plan.distinct_users
    );
    let patterns: [(&'static str, &'static str, Pattern); 4] = [
        ("1. naive: SET NX EX + GET/SET + DEL", "naive:", naive),
        (
            "2. patched: Lua unlock + HINCRBY + SADD",
            "patched:",
            patched,
        ),
        ("3. module: SECKILL.TRY", "module:", module_try),
        ("4. module: LOCK.ACQUIRE + fencing", "fenced:", fenced),
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
    println!(
        "\nmodule rows: exactly {} sold, 0 oversold, 0 duplicates",
        plan.units
    );
}
