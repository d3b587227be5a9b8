//! The sale as a Redis citizen, against a real server: MULTI/EXEC and Lua, WATCH (aborted by
//! changes, not by refusals), ACL rules on commands and keys, keyspace notifications, and the
//! internal commands taken only from replication and the AOF (docs/citizenship.md).

use redis::Value;
use seckill_harness::{
    Server, call, error, field, fields, info_counter, int, ok, replicate, wait_replicas, wait_until,
};
use std::time::Duration;

#[test]
fn works_in_multi_and_lua() {
    let server = Server::start();
    let mut con = server.con();
    let replies: (String, i64, i64) = redis::pipe()
        .atomic()
        .cmd("SECKILL.INIT")
        .arg("m")
        .arg(2)
        .cmd("SECKILL.TRY")
        .arg("m")
        .arg("a")
        .cmd("SECKILL.TRY")
        .arg("m")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(replies, ("OK".to_string(), 1, -2));
    let script = "return {redis.call('SECKILL.TRY', KEYS[1], ARGV[1]), \
                  redis.call('SECKILL.BOUGHT', KEYS[1], ARGV[1])}";
    let reply: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("m")
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, vec![0, 1]);
    let reply: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("m")
        .arg("c")
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, vec![-1, 0]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("SECKILL.TRY")
        .arg("m")
        .arg("u")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, vec!["m"]);
}

/// Whether `watcher`'s transaction on `key`, WATCHed before `meanwhile` ran on another
/// connection, still executes (false: EXEC answered nil because the key changed).
fn watch_survives(watcher: &mut redis::Connection, key: &str, meanwhile: impl FnOnce()) -> bool {
    ok(watcher, &["WATCH", key]);
    meanwhile();
    let reply: Value = redis::pipe()
        .atomic()
        .cmd("EXISTS")
        .arg(key)
        .query(watcher)
        .unwrap();
    reply != Value::Nil
}

#[test]
fn watch_is_aborted_by_changes_and_not_by_refusals() {
    let master = Server::start();
    let replica = Server::start();
    replicate(&replica, &master);
    let mut con = master.con();
    let mut watcher = master.con();
    ok(
        &mut con,
        &["SECKILL.INIT", "w", "2", "HOLD", "600000", "EVENTS", "w:ev"],
    );
    let try_as = |con: &mut redis::Connection, user: &str, expected: i64| {
        assert_eq!(int(con, &["SECKILL.TRY", "w", user]), expected);
    };
    let confirm = |user: &str, expected: i64| {
        assert_eq!(
            int(&mut master.con(), &["SECKILL.CONFIRM", "w", user]),
            expected
        );
    };
    assert!(!watch_survives(&mut watcher, "w", || {
        try_as(&mut master.con(), "alice", 1)
    }));
    // Over LIMIT, sold out, confirmed already: the sale and its stream stay as they were.
    assert!(watch_survives(&mut watcher, "w", || {
        try_as(&mut master.con(), "alice", -2)
    }));
    assert!(!watch_survives(&mut watcher, "w:ev", || {
        try_as(&mut master.con(), "bob", 0)
    }));
    for key in ["w", "w:ev"] {
        assert!(watch_survives(&mut watcher, key, || {
            try_as(&mut master.con(), "carol", -1)
        }));
    }
    assert!(!watch_survives(&mut watcher, "w:ev", || confirm(
        "alice", 1
    )));
    assert!(watch_survives(&mut watcher, "w", || confirm("alice", 0)));
    assert!(!watch_survives(&mut watcher, "w", || {
        ok(
            &mut master.con(),
            &["SECKILL.INIT", "w", "5", "HOLD", "500", "REPLACE"],
        )
    }));

    // A hold that the timer expires is a change too: WATCHed while it is still held.
    try_as(&mut con, "carol", 4);
    let expiries = info_counter(&mut con, "expiries");
    assert!(!watch_survives(&mut watcher, "w", || {
        assert_eq!(
            field(&mut master.con(), &["SECKILL.INFO", "w"], "held"),
            1,
            "the hold of 500 ms expired before WATCH"
        );
        // INFO counts the hold as expired from its deadline on; the counter moves when the
        // timer has put it back.
        wait_until(Duration::from_secs(10), "the timer to expire it", || {
            info_counter(&mut master.con(), "expiries") > expiries
        })
    }));

    // On the replica, the master's changes reach WATCH as well.
    let mut on_replica = replica.con();
    wait_until(Duration::from_secs(10), "the replica to expire it", || {
        field(&mut on_replica, &["SECKILL.INFO", "w"], "held") == 0
    });
    assert!(!watch_survives(&mut on_replica, "w", || {
        try_as(&mut con, "dave", 4);
        wait_replicas(&mut con, 1);
    }));

    // Locks: a contended ACQUIRE or a RELEASE with another token change nothing.
    assert!(int(&mut con, &["LOCK.ACQUIRE", "lk", "first", "60000"]) > 0);
    assert!(watch_survives(&mut watcher, "lk", || {
        let refused: Value = redis::cmd("LOCK.ACQUIRE")
            .arg("lk")
            .arg("second")
            .arg("60000")
            .query(&mut master.con())
            .unwrap();
        assert_eq!(refused, Value::Nil);
    }));
    assert!(watch_survives(&mut watcher, "lk", || {
        assert_eq!(int(&mut master.con(), &["LOCK.RELEASE", "lk", "second"]), 0)
    }));
    assert!(!watch_survives(&mut watcher, "lk", || {
        assert_eq!(
            int(&mut master.con(), &["LOCK.EXTEND", "lk", "first", "120000"]),
            1
        )
    }));
    assert!(!watch_survives(&mut watcher, "lk", || {
        assert_eq!(int(&mut master.con(), &["LOCK.RELEASE", "lk", "first"]), 1)
    }));

    // Client-side caching: a refusal sends no invalidation, a purchase does. Invalidations
    // and the marker reach the subscriber in order, so the first message after a refusal
    // is the marker unless the refusal invalidated the key.
    let mut subscriber = master.con();
    let subscriber_id = int(&mut subscriber, &["CLIENT", "ID"]).to_string();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe("__redis__:invalidate").unwrap();
    pubsub.subscribe("marker").unwrap();
    ok(
        &mut watcher,
        &["CLIENT", "TRACKING", "on", "REDIRECT", &subscriber_id],
    );
    let next_message = |pubsub: &mut redis::PubSub| {
        let message = pubsub.get_message().unwrap();
        let payload = match message.get_channel_name() {
            "marker" => vec![message.get_payload::<String>().unwrap()],
            _ => message.get_payload::<Vec<String>>().unwrap(),
        };
        (message.get_channel_name().to_string(), payload)
    };
    let mut cache_and_then = |act: &dyn Fn()| {
        field(&mut watcher, &["SECKILL.INFO", "w"], "remaining");
        act();
        int(&mut master.con(), &["PUBLISH", "marker", "after"]);
    };
    cache_and_then(&|| try_as(&mut master.con(), "dave", -2));
    assert_eq!(
        next_message(&mut pubsub),
        ("marker".to_string(), vec!["after".to_string()])
    );
    cache_and_then(&|| try_as(&mut master.con(), "erin", 3));
    assert_eq!(
        next_message(&mut pubsub),
        ("__redis__:invalidate".to_string(), vec!["w".to_string()])
    );
}

#[test]
fn acl_rules_apply_to_commands_and_keys() {
    let server = Server::start();
    let mut admin = server.con();
    ok(&mut admin, &["SECKILL.INIT", "sale:1", "5"]);
    ok(&mut admin, &["SECKILL.INIT", "other:1", "5"]);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("shop")
        .arg("on")
        .arg(">pw")
        .arg("~sale:*")
        .arg("+seckill.try")
        .arg("+seckill.info")
        .query(&mut admin)
        .unwrap();
    let mut shop = redis::Client::open(format!("redis://shop:pw@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(int(&mut shop, &["SECKILL.TRY", "sale:1", "alice"]), 4);
    assert_eq!(field(&mut shop, &["SECKILL.INFO", "sale:1"], "sold"), 1);
    for args in [
        &["SECKILL.INIT", "sale:2", "5"][..],
        &["SECKILL.TRY", "other:1", "alice"],
        &["SECKILL.BOUGHT", "sale:1", "alice"],
    ] {
        assert!(error(&mut shop, args).starts_with("NOPERM"), "{args:?}");
    }
    assert_eq!(field(&mut admin, &["SECKILL.INFO", "other:1"], "sold"), 0);

    // INIT declares its EVENTS stream as a key: a user confined to `sale:*` cannot point a
    // sale's events at a key outside it.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("ops")
        .arg("on")
        .arg(">pw")
        .arg("~sale:*")
        .arg("+@all")
        .query(&mut admin)
        .unwrap();
    let mut ops = redis::Client::open(format!("redis://ops:pw@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(
        error(
            &mut ops,
            &["SECKILL.INIT", "sale:3", "5", "EVENTS", "other:events"]
        )
        .starts_with("NOPERM")
    );
    ok(
        &mut ops,
        &["SECKILL.INIT", "sale:3", "5", "EVENTS", "sale:3:events"],
    );

    // Where the server has module ACL categories (Redis 7.2+, Valkey 8+), one rule grants the
    // public commands, and not the internal ones.
    let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut admin).unwrap();
    if !categories.iter().any(|c| c == "seckill") {
        println!("skipped: this server has no module ACL categories");
        return;
    }
    let mut in_category: Vec<String> = redis::cmd("ACL")
        .arg("CAT")
        .arg("seckill")
        .query(&mut admin)
        .unwrap();
    in_category.sort();
    let mut public: Vec<String> = seckill_harness::module_commands(&mut admin)
        .into_iter()
        .filter(|name| !name.contains("._"))
        .collect();
    public.sort();
    assert_eq!(in_category, public, "every public command, no internal one");
    assert_eq!(
        in_category.len(),
        seckill_harness::PUBLIC_COMMANDS,
        "{in_category:?}"
    );
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("buyer")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@seckill")
        .query(&mut admin)
        .unwrap();
    let mut buyer = redis::Client::open(format!("redis://buyer:pw@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(int(&mut buyer, &["SECKILL.TRY", "sale:1", "bob"]), 3);
    assert!(error(&mut buyer, &["SET", "x", "1"]).starts_with("NOPERM"));
    assert!(error(&mut buyer, &["SECKILL._RESTORE", "x", "1", "p"]).starts_with("NOPERM"));
}

#[test]
fn writes_publish_keyspace_notifications() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut subscriber = server.con();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__keyevent@0__:*").unwrap();
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "s", "5"]);
    int(&mut con, &["SECKILL.TRY", "s", "alice"]);
    int(&mut con, &["SECKILL.TRY", "s", "alice"]); // a rejection changes nothing: no event
    let _: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg("l")
        .arg("t")
        .arg(1000)
        .query(&mut con)
        .unwrap();
    ok(&mut con, &["SECKILL.INIT", "t", "0"]);
    int(&mut con, &["SECKILL.LEND", "s", "x", "2", "TO", "t"]);
    int(&mut con, &["SECKILL.ABSORB", "t", "x", "2", "FROM", "s"]);
    let mut events = Vec::new();
    for _ in 0..6 {
        let msg = pubsub.get_message().unwrap();
        let key: String = msg.get_payload().unwrap();
        events.push((msg.get_channel_name().to_string(), key));
    }
    assert_eq!(
        events,
        vec![
            ("__keyevent@0__:seckill.init".to_string(), "s".to_string()),
            ("__keyevent@0__:seckill.try".to_string(), "s".to_string()),
            ("__keyevent@0__:lock.change".to_string(), "l".to_string()),
            ("__keyevent@0__:seckill.init".to_string(), "t".to_string()),
            ("__keyevent@0__:seckill.lend".to_string(), "s".to_string()),
            ("__keyevent@0__:seckill.absorb".to_string(), "t".to_string()),
        ]
    );
}

fn argv(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.to_vec()).collect()
}

fn internal_error(con: &mut redis::Connection, args: &[&[u8]]) -> String {
    seckill_harness::error_text(&call(con, args).unwrap_err())
}

/// A client allowed to write keys must not state a sale or a lock outright: the internal
/// commands answer only the replication link (every replication test here goes through them)
/// and AOF loading.
#[test]
fn internal_commands_only_from_replication_and_aof() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "s", "10", "LIMIT", "2"]);
    assert!(int(&mut con, &["LOCK.ACQUIRE", "l", "holder", "60000"]) > 0);
    let sale_before = fields(&mut con, &["SECKILL.INFO", "s"]);
    let lock_state = |con: &mut redis::Connection| {
        let mut state = fields(con, &["LOCK.INFO", "l"]);
        state.retain(|(name, _)| name != "ttl");
        state
    };
    let lock_before = lock_state(&mut con);
    let now = seckill_harness::server_now_ms(&mut con).to_string();
    let forged: [&[&[u8]]; 5] = [
        &[
            b"SECKILL._REPLAY",
            b"s",
            now.as_bytes(),
            b"RESTOCK",
            b"1000",
        ],
        &[
            b"SECKILL._REPLAY",
            b"s",
            now.as_bytes(),
            b"TRY",
            b"mallory",
            b"2",
        ],
        &[b"SECKILL._RESTORE", b"s", b"1", b"garbage"],
        &[b"SECKILL._RESTORE", b"new", b"1", b""],
        &[b"LOCK._RESTORE", b"l", b"1", b"garbage"],
    ];
    for args in forged {
        let name = String::from_utf8_lossy(args[0]).to_string();
        let err = internal_error(&mut con, args);
        assert_eq!(
            err,
            format!(
                "ERR {name} is internal: only the replication link and AOF loading may call it"
            ),
        );
        // Arity and payload are not even looked at.
        assert!(internal_error(&mut con, &args[..1]).contains("wrong number of arguments"));
        assert!(internal_error(&mut con, &args[..2]).contains("is internal"));
    }
    // Nor inside MULTI or a script, which run the command on the client's behalf.
    let in_multi: redis::RedisResult<Vec<redis::Value>> = redis::pipe()
        .atomic()
        .cmd("SECKILL._REPLAY")
        .arg("s")
        .arg(&now)
        .arg("RESTOCK")
        .arg(5)
        .query(&mut con);
    let err = in_multi.unwrap_err();
    assert!(err.to_string().contains("is internal"), "{err:?}");
    let in_script: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
        .arg("return redis.call('LOCK._RESTORE', KEYS[1], '1', ARGV[1])")
        .arg(1)
        .arg("l")
        .arg("garbage")
        .query(&mut con);
    assert!(seckill_harness::error_text(&in_script.unwrap_err()).contains("is internal"));
    assert_eq!(
        fields(&mut con, &["SECKILL.INFO", "s"]),
        sale_before,
        "the sale is unchanged"
    );
    assert_eq!(lock_state(&mut con), lock_before, "the lock is unchanged");
    assert_eq!(int(&mut con, &["EXISTS", "new"]), 0);

    // AOF loading runs them: a change as a master made it, and corrupt payloads refused one
    // by one (logged, key untouched) without stopping the load.
    server.crash_and_append_to_aof(&[
        argv(&[
            b"SECKILL._REPLAY",
            b"s",
            now.as_bytes(),
            b"TRY",
            b"bob",
            b"2",
        ]),
        argv(&[b"SECKILL._RESTORE", b"s", b"1", b"garbage"]),
        argv(&[b"SECKILL._RESTORE", b"bad", b"1", b"\x0a\x01\x05\x01a\x02"]),
        argv(&[b"SECKILL._RESTORE", b"bad", b"99", b"\x00\x01\x00"]),
        argv(&[b"LOCK._RESTORE", b"l", b"1", b"\x01"]),
        argv(&[
            b"SECKILL._REPLAY",
            b"s",
            now.as_bytes(),
            b"TRY",
            b"carol",
            b"1",
        ]),
    ]);
    let mut con = server.con();
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "s", "bob"]), 2);
    assert_eq!(int(&mut con, &["SECKILL.BOUGHT", "s", "carol"]), 1);
    assert_eq!(field(&mut con, &["SECKILL.INFO", "s"], "remaining"), 7);
    assert_eq!(int(&mut con, &["EXISTS", "bad"]), 0);
    assert_eq!(
        lock_state(&mut con),
        lock_before,
        "a corrupt lock payload changes nothing"
    );
    let log = server.log();
    let refused: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("key left unchanged"))
        .collect();
    assert_eq!(refused.len(), 4, "{log}");
    for (line, what) in refused.iter().zip([
        "s: ERR bad sale payload",
        "bad: ERR bad sale payload",
        "bad: ERR bad sale payload: unknown sale encoding version",
        "l: ERR bad lock payload",
    ]) {
        assert!(line.contains(what), "{line}");
    }
}
