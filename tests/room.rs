//! The waiting room (`QUEUE`, #43) through real servers: fairness of the cohort's shuffle,
//! first come first served after START, admission at a rate and by hand, lapsed windows, a
//! user not admitted never buying, and the same positions on a replica, after DEBUG RELOAD,
//! DUMP/RESTORE and an AOF replay.

use seckill_harness::{Server, error, field, int, ok, replicate, wait_replicas, wait_until};
use std::time::Duration;

/// The server's clock (unix ms): START is set against it, not this process's.
fn server_ms(con: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1000 + micros / 1000
}

fn wait_past(con: &mut redis::Connection, at_ms: u64) {
    wait_until(
        Duration::from_secs(30),
        "the server's clock to pass",
        || server_ms(con) > at_ms,
    );
}

/// JOINs `users` in one pipeline; their replies in order.
fn join_all(con: &mut redis::Connection, key: &str, users: &[String]) -> Vec<i64> {
    let mut pipe = redis::pipe();
    for user in users {
        pipe.cmd("SECKILL.JOIN").arg(key).arg(user);
    }
    pipe.query(con).unwrap()
}

fn positions(con: &mut redis::Connection, key: &str, users: &[String]) -> Vec<Option<i64>> {
    let mut pipe = redis::pipe();
    for user in users {
        pipe.cmd("SECKILL.POSITION").arg(key).arg(user);
    }
    pipe.query(con).unwrap()
}

/// The users of the stream's `admit` entries, in order.
fn admitted_in_order(con: &mut redis::Connection, stream: &str) -> Vec<String> {
    seckill_harness::stream(con, stream)
        .into_iter()
        .filter(|e| e.get("event") == "admit")
        .map(|e| e.get("user").to_string())
        .collect()
}

fn users(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// Spearman's rank correlation of two rankings of the same items (no ties).
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let d2: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

#[test]
fn the_cohort_is_shuffled_at_start_and_later_joiners_are_served_in_arrival_order() {
    // 10 000 users join before START, the first 1 000 of them bots: their admission ranks are
    // a uniform shuffle (the bots' mean rank within 3 sd of the middle, |Spearman| < 0.05).
    const USERS: usize = 10_000;
    const BOTS: usize = 1_000;
    let server = Server::start();
    let mut con = server.con();
    let start = server_ms(&mut con) + 3_000;
    let start_arg = start.to_string();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "{fair}",
            "20000",
            "START",
            &start_arg,
            "EVENTS",
            "{fair}:events",
            "QUEUE",
        ],
    );
    let cohort = users("u", USERS);
    let replies = join_all(&mut con, "{fair}", &cohort);
    assert_eq!(
        replies,
        (1..=USERS as i64).collect::<Vec<_>>(),
        "the cohort's size"
    );
    assert_eq!(
        int(&mut con, &["SECKILL.TRY", "{fair}", "u0"]),
        -3,
        "not started"
    );
    wait_past(&mut con, start);
    assert_eq!(
        int(&mut con, &["SECKILL.TRY", "{fair}", "u0"]),
        -6,
        "started, not admitted"
    );
    let late = users("late", 100);
    let replies = join_all(&mut con, "{fair}", &late);
    assert_eq!(
        replies,
        ((USERS as i64 + 1)..=(USERS as i64 + 100)).collect::<Vec<_>>(),
        "behind the cohort, in arrival order"
    );
    let mut places: Vec<i64> = positions(&mut con, "{fair}", &cohort)
        .into_iter()
        .map(Option::unwrap)
        .collect();
    places.sort_unstable();
    assert_eq!(places, (1..=USERS as i64).collect::<Vec<_>>());
    assert_eq!(
        int(&mut con, &["SECKILL.ADMIT", "{fair}", "20000"]),
        USERS as i64 + 100
    );
    let order = admitted_in_order(&mut con, "{fair}:events");
    assert_eq!(order.len(), USERS + 100);
    assert_eq!(
        &order[USERS..],
        &late[..],
        "the late joiners last, in order"
    );
    let mut rank = vec![0.0; USERS];
    for (r, user) in order[..USERS].iter().enumerate() {
        rank[user[1..].parse::<usize>().unwrap()] = r as f64;
    }
    let bots_mean = rank[..BOTS].iter().sum::<f64>() / BOTS as f64;
    let (n, k) = (USERS as f64, BOTS as f64);
    let middle = (n - 1.0) / 2.0;
    let sd = ((n * n - 1.0) / 12.0 / k * (n - k) / (n - 1.0)).sqrt();
    assert!(
        (bots_mean - middle).abs() < 3.0 * sd,
        "bots' mean rank {bots_mean}, middle {middle}, sd {sd}"
    );
    let joined: Vec<f64> = (0..USERS).map(|i| i as f64).collect();
    let rho = spearman(&joined, &rank);
    assert!(rho.abs() < 0.05, "Spearman {rho}");
    println!("bots' mean rank {bots_mean:.0} (middle {middle}, sd {sd:.0}), Spearman {rho:.4}");
    assert_eq!(
        int(&mut con, &["SECKILL.JOIN", "{fair}", "u0"]),
        0,
        "admitted"
    );
}

#[test]
fn the_rate_admits_its_users_per_period_and_never_past_the_stock() {
    let server = Server::start();
    let mut con = server.con();
    let start = server_ms(&mut con) + 1_000;
    let start_arg = start.to_string();
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "rate",
            "100000",
            "START",
            &start_arg,
            "QUEUE",
            "ADMIT",
            "100",
            "PER",
            "100",
        ],
    );
    join_all(&mut con, "rate", &users("u", 10_000));
    // Nobody is stepping the sale: the module's timer admits. It may run late on a busy
    // machine, so each reading is taken in one EXEC (no timer runs inside it): never ahead of
    // the rate, every admitted user out of the line, and once the timer has run, exactly the
    // rate's count for every period begun since START (a late timer catches up).
    wait_past(&mut con, start + 3_000);
    let mut readings = 0;
    wait_until(
        Duration::from_secs(30),
        "the timer to admit at the rate",
        || {
            let (info, (secs, micros)): (Vec<redis::Value>, (u64, u64)) = redis::pipe()
                .atomic()
                .cmd("SECKILL.INFO")
                .arg("rate")
                .cmd("TIME")
                .query(&mut con)
                .unwrap();
            let now = secs * 1000 + micros / 1000;
            let count = |name: &str| {
                let at = info
                    .iter()
                    .position(|v| *v == redis::Value::BulkString(name.as_bytes().to_vec()))
                    .unwrap();
                redis::from_redis_value::<i64>(info[at + 1].clone()).unwrap()
            };
            let (admitted, waiting) = (count("admitted"), count("waiting"));
            let rate = (((now - start) / 100 + 1) * 100) as i64;
            readings += 1;
            println!(
                "admitted {admitted} by {} ms after START (rate: {rate})",
                now - start
            );
            assert!(
                admitted <= rate,
                "admitted {admitted}, ahead of the rate {rate}"
            );
            assert_eq!(waiting, 10_000 - admitted);
            admitted == rate
        },
    );
    println!("{readings} readings");

    // A stock of 150: the rate stops at 150 admitted who have not bought.
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "small",
            "150",
            "QUEUE",
            "ADMIT",
            "100",
            "PER",
            "50",
        ],
    );
    join_all(&mut con, "small", &users("s", 1_000));
    wait_until(Duration::from_secs(10), "150 admitted", || {
        field(&mut con, &["SECKILL.INFO", "small"], "admitted") == 150
    });
    let later = server_ms(&mut con) + 300;
    wait_past(&mut con, later);
    assert_eq!(
        field(&mut con, &["SECKILL.INFO", "small"], "admitted"),
        150,
        "covered"
    );
    assert_eq!(
        int(&mut con, &["SECKILL.ADMIT", "small", "10"]),
        0,
        "by hand too"
    );
}

#[test]
fn only_admitted_users_buy_and_the_sold_out_room_tells_everyone() {
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "door", "50", "QUEUE"]);
    let queue = users("q", 200);
    assert_eq!(
        join_all(&mut con, "door", &queue),
        (1..=200).collect::<Vec<_>>()
    );
    assert_eq!(
        int(&mut con, &["SECKILL.ADMIT", "door", "80"]),
        50,
        "50 units: 50 admitted"
    );
    // 1 000 bots hammer TRY meanwhile: none of them joined, none is admitted.
    let mut bots = redis::pipe();
    for b in 0..1_000 {
        bots.cmd("SECKILL.TRY").arg("door").arg(format!("bot{b}"));
    }
    let refused: Vec<i64> = bots.query(&mut con).unwrap();
    assert!(refused.iter().all(|&r| r == -6), "{:?}", &refused[..5]);
    assert_eq!(
        int(&mut con, &["SECKILL.TRY", "door", "q50"]),
        -6,
        "waiting, not admitted"
    );
    for user in &queue[..50] {
        assert!(int(&mut con, &["SECKILL.TRY", "door", user]) >= 0, "{user}");
    }
    assert_eq!(field(&mut con, &["SECKILL.INFO", "door"], "sold"), 50);
    let mut scan = redis::cmd("SECKILL.BUYERS");
    scan.arg("door").arg(0).arg("COUNT").arg(1000);
    let (_, rows): (String, Vec<String>) = scan.query(&mut con).unwrap();
    let buyers: Vec<&String> = rows.iter().step_by(3).collect();
    assert_eq!(buyers.len(), 50);
    assert!(
        buyers
            .iter()
            .all(|b| b.starts_with('q') && b[1..].parse::<usize>().unwrap() < 50)
    );
    // Sold out: everyone waiting is told so, the room's memory freed.
    assert_eq!(int(&mut con, &["SECKILL.JOIN", "door", "q199"]), -1);
    assert_eq!(int(&mut con, &["SECKILL.POSITION", "door", "q100"]), -1);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "door"], "waiting"), 0);
    // A restock opens the room again, first come first served.
    int(&mut con, &["SECKILL.RESTOCK", "door", "1"]);
    assert_eq!(int(&mut con, &["SECKILL.JOIN", "door", "again"]), 1);
    assert_eq!(int(&mut con, &["SECKILL.ADMIT", "door", "1"]), 1);
    assert_eq!(int(&mut con, &["SECKILL.TRY", "door", "again"]), 0);
    println!(
        "queue_rejections {}",
        seckill_harness::info_counter(&mut con, "queue_rejections")
    );
}

#[test]
fn a_lapsed_window_passes_its_place_to_the_next_in_line() {
    let server = Server::start();
    let mut con = server.con();
    ok(
        &mut con,
        &["SECKILL.INIT", "lapse", "10", "QUEUE", "WINDOW", "300"],
    );
    join_all(&mut con, "lapse", &users("w", 3));
    assert_eq!(int(&mut con, &["SECKILL.ADMIT", "lapse", "2"]), 2);
    assert!(int(&mut con, &["SECKILL.TRY", "lapse", "w0"]) >= 0);
    assert_eq!(int(&mut con, &["SECKILL.POSITION", "lapse", "w2"]), 1);
    // w1 never buys: when its window ends the timer admits w2 in its place.
    wait_until(Duration::from_secs(10), "w2 admitted in w1's place", || {
        int(&mut con, &["SECKILL.POSITION", "lapse", "w2"]) == 0
    });
    assert_eq!(int(&mut con, &["SECKILL.TRY", "lapse", "w1"]), -6, "lapsed");
    assert!(int(&mut con, &["SECKILL.TRY", "lapse", "w2"]) >= 0);
    // w1 joins again: at the back.
    assert_eq!(int(&mut con, &["SECKILL.JOIN", "lapse", "w1"]), 1);
}

#[test]
fn bad_calls_are_refused() {
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "plain", "10"]);
    for command in [
        &["SECKILL.JOIN", "plain", "u"][..],
        &["SECKILL.POSITION", "plain", "u"],
        &["SECKILL.ADMIT", "plain", "1"],
    ] {
        assert!(
            error(&mut con, command).contains("without QUEUE"),
            "{command:?}"
        );
    }
    ok(&mut con, &["SECKILL.INIT", "room", "10", "QUEUE"]);
    assert!(error(&mut con, &["SECKILL.JOIN", "room", ""]).contains("empty"));
    assert!(error(&mut con, &["SECKILL.ADMIT", "room", "0"]).contains("n must be"));
    assert!(error(&mut con, &["SECKILL.JOIN", "room"]).contains("wrong number"));
    assert!(error(&mut con, &["SECKILL.JOIN", "nosale", "u"]).starts_with("NOSALE"));
    assert!(
        error(
            &mut con,
            &["SECKILL.INIT", "x", "1", "ADMIT", "1", "PER", "1"]
        )
        .contains("QUEUE")
    );
    let nobody: Option<i64> = redis::cmd("SECKILL.POSITION")
        .arg("room")
        .arg("nobody")
        .query(&mut con)
        .unwrap();
    assert_eq!(nobody, None);
}

#[test]
fn a_replica_a_reload_a_restore_and_an_aof_replay_hold_the_same_positions() {
    let master = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    replicate(&replica, &master);
    let mut con = master.con();
    let start = server_ms(&mut con) + 1_500;
    let start_arg = start.to_string();
    // Admitted by hand and with a long window, so nothing moves between the reads.
    ok(
        &mut con,
        &[
            "SECKILL.INIT",
            "same",
            "100",
            "START",
            &start_arg,
            "QUEUE",
            "WINDOW",
            "600000",
        ],
    );
    let all = users("p", 300);
    join_all(&mut con, "same", &all[..250]);
    wait_past(&mut con, start);
    join_all(&mut con, "same", &all[250..]);
    int(&mut con, &["SECKILL.ADMIT", "same", "7"]);
    let bought = all
        .iter()
        .find(|u| int(&mut con, &["SECKILL.POSITION", "same", u]) == 0)
        .unwrap()
        .clone();
    assert!(int(&mut con, &["SECKILL.TRY", "same", &bought]) >= 0);
    wait_replicas(&mut con, 1);
    let seen = positions(&mut con, "same", &all);
    assert_eq!(seen.iter().filter(|p| **p == Some(0)).count(), 7);
    assert_eq!(
        positions(&mut replica.con(), "same", &all),
        seen,
        "the replica"
    );
    let dump: Vec<u8> = redis::cmd("DUMP").arg("same").query(&mut con).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(dump)
        .query(&mut con)
        .unwrap();
    assert_eq!(positions(&mut con, "copy", &all), seen, "DUMP/RESTORE");
    ok(&mut con, &["DEBUG", "RELOAD"]);
    assert_eq!(positions(&mut con, "same", &all), seen, "DEBUG RELOAD");
    let mut master = master;
    master.kill_and_restart();
    let mut con = master.con();
    assert_eq!(positions(&mut con, "same", &all), seen, "AOF replay");
    assert!(
        int(&mut con, &["SECKILL.TRY", "same", &bought]) == -2,
        "bought once"
    );
}
