//! Every input answered like a built-in command: a table of every command and argument, each
//! bad value getting its one documented error and changing nothing (DUMP of every key before
//! and after); random BUYERS cursors; COMMAND INFO flags against the table in docs/citizenship.md.

use redis::Value;
use seckill_harness::{Server, call, command, error, module_commands, ok};

const MAX: &str = "9223372036854775807";
const TWO_POW_63: &str = "9223372036854775808";
const TWO_POW_64: &str = "18446744073709551616";

/// Keys the calls below may touch: a sale with HOLD and LIMIT 2, a plain sale, its stream, a
/// held lock.
const KEYS: [&str; 4] = ["{s}", "{s}:ev", "plain", "l"];

fn setup(con: &mut redis::Connection) {
    ok(
        con,
        &[
            "SECKILL.INIT",
            "{s}",
            "5",
            "LIMIT",
            "2",
            "HOLD",
            "60000",
            "EVENTS",
            "{s}:ev",
        ],
    );
    seckill_harness::int(con, &["SECKILL.TRY", "{s}", "alice"]);
    seckill_harness::int(con, &["SECKILL.TRY", "{s}", "alice", "1", "ID", "a-1"]);
    ok(con, &["SECKILL.INIT", "plain", "5"]);
    seckill_harness::int(con, &["SECKILL.TRY", "plain", "alice"]);
    seckill_harness::int(con, &["LOCK.ACQUIRE", "l", "t", "60000"]);
}

fn dumps(con: &mut redis::Connection) -> Vec<Option<Vec<u8>>> {
    KEYS.iter()
        .map(|key| redis::cmd("DUMP").arg(key).query(con).unwrap())
        .collect()
}

/// An integer argument: the call with `{}` where the value goes, and its error message.
struct IntegerArg {
    call: &'static str,
    message: &'static str,
    /// Values in range must not be listed as bad: 0 (when allowed) and the max.
    zero_ok: bool,
    /// One past the largest value, when it is below 2^63 (a LIMIT, say).
    one_past: Option<&'static str>,
}

const QTY: &str = "ERR qty must be an integer between 1 and 2 (the sale's LIMIT)";

fn integer_args() -> Vec<IntegerArg> {
    let arg = |call, message, zero_ok, one_past| IntegerArg {
        call,
        message,
        zero_ok,
        one_past,
    };
    vec![
        arg(
            "SECKILL.INIT new {}",
            "ERR stock must be an integer between 0 and 9223372036854775807",
            true,
            None,
        ),
        arg(
            "SECKILL.INIT new 5 LIMIT {}",
            "ERR LIMIT must be an integer between 1 and 9223372036854775807",
            false,
            None,
        ),
        arg(
            "SECKILL.INIT new 5 HOLD {}",
            "ERR HOLD ms must be an integer between 0 and 9223372036854775807",
            true,
            None,
        ),
        arg(
            "SECKILL.INIT new 5 START {}",
            "ERR START unix_ms must be an integer between 0 and 9223372036854775807",
            true,
            None,
        ),
        arg(
            "SECKILL.INIT new 5 END {}",
            "ERR END unix_ms must be an integer between 0 and 9223372036854775807",
            true,
            None,
        ),
        arg("SECKILL.TRY {s} bob {}", QTY, false, Some("3")),
        arg("SECKILL.CANCEL {s} alice {}", QTY, false, Some("3")),
        arg(
            "SECKILL.RESTOCK {s} {}",
            "ERR units must be an integer between 1 and 9223372036854775807",
            false,
            None,
        ),
        // One record (alice): cursor 1 is past the last one.
        arg(
            "SECKILL.BUYERS {s} {}",
            "ERR invalid cursor",
            true,
            Some("1"),
        ),
        arg(
            "SECKILL.BUYERS {s} 0 COUNT {}",
            "ERR COUNT must be an integer between 1 and 9223372036854775807",
            false,
            None,
        ),
        arg(
            "SECKILL.LEND {s} t {} TO other",
            "ERR n must be an integer between 1 and 9223372036854775807",
            false,
            None,
        ),
        arg(
            "SECKILL.ABSORB {s} t {} FROM other",
            "ERR n must be an integer between 1 and 9223372036854775807",
            false,
            None,
        ),
        arg(
            "SECKILL.SEAL {s} {}",
            "ERR ms must be an integer between 1 and 9223372036854775807",
            false,
            None,
        ),
        arg(
            "SECKILL.INIT new 5 PARTITION 0 PARTITIONS {} MANIFEST m",
            "ERR PARTITIONS must be an integer between 1 and 16384",
            false,
            Some("16385"),
        ),
        arg(
            "LOCK.ACQUIRE l other {}",
            "ERR ttl_ms must be an integer between 1 and 9223372036854775807",
            false,
            None,
        ),
        arg(
            "LOCK.ACQUIRE l other 100 WAIT {}",
            "ERR WAIT timeout_ms must be an integer between 0 and 9223372036854775807",
            true,
            None,
        ),
        arg(
            "LOCK.EXTEND l t {}",
            "ERR ttl_ms must be an integer between 1 and 9223372036854775807",
            false,
            None,
        ),
    ]
}

/// Every other bad call and its error.
fn other_cases() -> Vec<(&'static str, &'static str)> {
    let arity = |name| -> &'static str {
        Box::leak(format!("ERR wrong number of arguments for '{name}' command").into_boxed_str())
    };
    let mut cases = vec![
        ("SECKILL.TRY {s} ''", "ERR user must not be empty"),
        ("SECKILL.BOUGHT {s} ''", "ERR user must not be empty"),
        ("SECKILL.CONFIRM {s} ''", "ERR user must not be empty"),
        ("SECKILL.CANCEL {s} ''", "ERR user must not be empty"),
        ("SECKILL.CANCEL {s} '' 1", "ERR user must not be empty"),
        ("LOCK.ACQUIRE l '' 100", "ERR token must not be empty"),
        ("LOCK.RELEASE l ''", "ERR token must not be empty"),
        ("LOCK.EXTEND l '' 100", "ERR token must not be empty"),
        (
            "SECKILL.INIT new 5 EVENTS ''",
            "ERR EVENTS stream must not be empty",
        ),
        (
            "SECKILL.LEND {s} '' 1 TO other",
            "ERR transfer id must be 1 to 128 bytes",
        ),
        (
            "SECKILL.SETTLE {s} ''",
            "ERR transfer id must be 1 to 128 bytes",
        ),
        (
            "SECKILL.LEND {s} t 1 TO {s}",
            "ERR a transfer needs two different sale keys",
        ),
        ("SECKILL.LEND {s} t 1 FROM other", "ERR syntax error"),
        ("SECKILL.SETTLE {s}", arity("seckill.settle")),
        ("SECKILL.TRANSFERS {s} x", "ERR unknown option 'x'"),
        (
            "SECKILL.TRANSFERS {s} WITHASKED x",
            arity("seckill.transfers"),
        ),
        ("SECKILL.SEAL {s}", arity("seckill.seal")),
        (
            "SECKILL.SEAL {s} 1000",
            "ERR the sale is not a partition (INIT ... PARTITION i PARTITIONS n MANIFEST key)",
        ),
        (
            "SECKILL.INIT new 5 PARTITION 0",
            "ERR PARTITION, PARTITIONS and MANIFEST go together",
        ),
        (
            "SECKILL.INIT new 5 PARTITION 2 PARTITIONS 2 MANIFEST m",
            "ERR PARTITION must be an integer between 0 and 1 (PARTITIONS - 1)",
        ),
        (
            "SECKILL.INIT new 5 PARTITION 0 PARTITIONS 2 MANIFEST ''",
            "ERR MANIFEST key must not be empty",
        ),
        ("SECKILL.INIT new 5 LIMIT", "ERR LIMIT needs a value"),
        ("SECKILL.INIT new 5 HOLD", "ERR HOLD needs a value"),
        ("SECKILL.INIT new 5 EVENTS", "ERR EVENTS needs a value"),
        ("SECKILL.BUYERS {s} 0 COUNT", "ERR COUNT needs a value"),
        ("LOCK.ACQUIRE l other 100 WAIT", "ERR WAIT needs a value"),
        ("SECKILL.INIT new 5 BOGUS", "ERR unknown option 'BOGUS'"),
        ("SECKILL.INIT new 5 ''", "ERR unknown option ''"),
        ("SECKILL.BUYERS {s} 0 BOGUS", "ERR unknown option 'BOGUS'"),
        (
            "LOCK.ACQUIRE l other 100 BOGUS",
            "ERR unknown option 'BOGUS'",
        ),
        (
            "SECKILL.INIT new 5 START 9 END 9",
            "ERR END must be after START",
        ),
        (
            "SECKILL.INIT new 5 EVENTS new",
            "ERR the EVENTS stream must be another key than the sale",
        ),
        (
            "SECKILL.INIT {s} 5",
            "ERR a sale already exists at this key (use REPLACE to reset it)",
        ),
        (
            "SECKILL.CONFIRM plain alice",
            "ERR the sale has no holds to confirm (it was made without HOLD)",
        ),
        (
            "SECKILL.RESTOCK {s} 9223372036854775807",
            "ERR units would take the sale past 9223372036854775807 units",
        ),
        ("SECKILL.TRY missing alice", "NOSALE no sale at this key"),
        ("SECKILL.INFO missing", "NOSALE no sale at this key"),
        (
            "SECKILL.TRY l alice",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            "LOCK.INFO {s}",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        ("SECKILL.INIT new", arity("seckill.init")),
        ("SECKILL.TRY {s}", arity("seckill.try")),
        ("SECKILL.TRY {s} bob 1 1", "ERR unknown option '1'"),
        ("SECKILL.TRY {s} bob 1 ID", "ERR ID needs a value"),
        (
            "SECKILL.TRY {s} bob ID ''",
            "ERR attempt id must be 1 to 64 bytes",
        ),
        (
            "SECKILL.TRY {s} bob ID xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "ERR attempt id must be 1 to 64 bytes",
        ),
        ("SECKILL.TRY {s} bob ID a ID b", "ERR syntax error"),
        ("SECKILL.CANCEL {s} bob 1 WHO a", "ERR unknown option 'WHO'"),
        (
            "SECKILL.CANCEL {s} alice ID ''",
            "ERR attempt id must be 1 to 64 bytes",
        ),
        (
            "SECKILL.TRY {s} alice 2 ID a-1",
            "ERR attempt id already used with another qty",
        ),
        (
            "SECKILL.CANCEL {s} alice 1 ID a-1",
            "ERR attempt id already used by another command",
        ),
        ("SECKILL.CONFIRM {s}", arity("seckill.confirm")),
        ("SECKILL.CANCEL {s}", arity("seckill.cancel")),
        ("SECKILL.RESTOCK {s}", arity("seckill.restock")),
        ("SECKILL.BUYERS {s}", arity("seckill.buyers")),
        ("SECKILL.INFO {s} x", arity("seckill.info")),
        ("SECKILL.BOUGHT {s}", arity("seckill.bought")),
        ("LOCK.ACQUIRE l t", arity("lock.acquire")),
        ("LOCK.RELEASE l", arity("lock.release")),
        ("LOCK.EXTEND l t", arity("lock.extend")),
        ("LOCK.INFO l x", arity("lock.info")),
    ];
    // Every option given twice: a syntax error, as `SET k v EX 1 EX 2`.
    for repeated in [
        "SECKILL.INIT new 5 LIMIT 2 LIMIT 2",
        "SECKILL.INIT new 5 limit 2 LIMIT 3",
        "SECKILL.INIT new 5 HOLD 10 HOLD 10",
        "SECKILL.INIT new 5 START 1 START 1",
        "SECKILL.INIT new 5 END 9 END 9",
        "SECKILL.INIT new 5 EVENTS e EVENTS e",
        "SECKILL.INIT new 5 REPLACE REPLACE",
        "SECKILL.BUYERS {s} 0 COUNT 1 COUNT 2",
        "LOCK.ACQUIRE l other 100 WAIT 10 WAIT 20",
    ] {
        cases.push((repeated, "ERR syntax error"));
    }
    cases
}

/// Splits a table call into arguments; `''` is the empty string.
fn words(call: &str) -> Vec<String> {
    call.split(' ')
        .map(|w| {
            if w == "''" {
                String::new()
            } else {
                w.to_string()
            }
        })
        .collect()
}

fn error_of(con: &mut redis::Connection, args: &[String]) -> String {
    let raw: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    match call(con, &raw) {
        Ok(reply) => format!("no error, replied {reply:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
            .trim()
            .to_string(),
    }
}

#[test]
fn every_bad_argument_gets_its_documented_error_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.con();
    setup(&mut con);
    let before = dumps(&mut con);
    let mut cases: Vec<(String, Vec<String>, String)> = Vec::new();
    for arg in integer_args() {
        let mut bad: Vec<&str> = vec!["abc", "-1", "1.5", "+1", "01", "", TWO_POW_63, TWO_POW_64];
        if !arg.zero_ok {
            bad.push("0");
        }
        bad.extend(arg.one_past);
        for value in bad {
            let call = arg.call.replace("{}", "\u{0}");
            let args: Vec<String> = words(&call)
                .into_iter()
                .map(|w| if w == "\u{0}" { value.to_string() } else { w })
                .collect();
            cases.push((
                format!("{} <{value}>", arg.call),
                args,
                arg.message.to_string(),
            ));
        }
    }
    for (call, message) in other_cases() {
        cases.push((call.to_string(), words(call), message.to_string()));
    }
    let mut failures = Vec::new();
    for (name, args, expected) in &cases {
        let got = error_of(&mut con, args);
        if &got != expected {
            failures.push(format!("{name}\n  expected: {expected}\n  got:      {got}"));
        }
        let exists: i64 = redis::cmd("EXISTS").arg("new").query(&mut con).unwrap();
        if exists != 0 {
            failures.push(format!("{name}: created a key"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    assert_eq!(dumps(&mut con), before, "a refused call changed a key");
    println!("{} bad calls, each refused as documented", cases.len());
    // The largest value is accepted where the range ends there (a check of the table).
    let page: (String, Vec<Value>) = command(&["SECKILL.BUYERS", "{s}", "0", "COUNT", MAX])
        .query(&mut con)
        .unwrap();
    assert_eq!((page.0.as_str(), page.1.len()), ("0", 3));
}

#[test]
fn random_cursors_get_a_page_or_invalid_cursor() {
    let server = Server::start();
    let mut con = server.con();
    ok(&mut con, &["SECKILL.INIT", "s", "1000"]);
    let buyers = 150u64;
    for i in 0..buyers {
        seckill_harness::int(&mut con, &["SECKILL.TRY", "s", &format!("u{i}")]);
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut pages = 0;
    for round in 0..2_000 {
        // Small cursors, cursors around the record count, and any 64-bit value.
        let cursor = match round % 3 {
            0 => random() % (buyers + 10),
            1 => random() >> (random() % 64),
            _ => random(),
        };
        let count = 1 + random() % 20;
        let reply = command(&[
            "SECKILL.BUYERS",
            "s",
            &cursor.to_string(),
            "COUNT",
            &count.to_string(),
        ])
        .query::<Value>(&mut con);
        match reply {
            Ok(Value::Array(parts)) => {
                pages += 1;
                assert!(cursor < buyers, "cursor {cursor} got a page");
                let next: String = redis::from_redis_value(parts[0].clone()).unwrap();
                let next: u64 = next.parse().unwrap();
                assert!(
                    next == 0 || (next > cursor && next < buyers),
                    "{cursor} -> {next}"
                );
                let Value::Array(items) = &parts[1] else {
                    panic!("rows: {:?}", parts[1]);
                };
                assert!(items.len() as u64 <= 3 * count);
            }
            Ok(other) => panic!("cursor {cursor}: {other:?}"),
            Err(e) => {
                assert_eq!(e.detail(), Some("invalid cursor"), "cursor {cursor}: {e}");
                assert!(cursor >= buyers, "cursor {cursor} refused");
            }
        }
    }
    assert!(pages > 500, "only {pages} pages");
    for text in ["-1", "x", TWO_POW_64, "99999999999999999999999"] {
        let reply = command(&["SECKILL.BUYERS", "s", text]).query::<Value>(&mut con);
        assert_eq!(
            reply.unwrap_err().detail(),
            Some("invalid cursor"),
            "{text}"
        );
    }
}

/// The command flag table of docs/citizenship.md: `| `command` | flags |` rows between markers.
fn documented_flags() -> Vec<(String, Vec<String>)> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/citizenship.md"))
        .unwrap();
    let start = page
        .find("<!-- flags:start -->")
        .expect("flags start marker");
    let end = page.find("<!-- flags:end -->").expect("flags end marker");
    page[start..end]
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let flags = cells
                .get(2)?
                .split_whitespace()
                .map(|f| f.trim_matches('`').to_string())
                .collect();
            Some((name.to_ascii_lowercase(), flags))
        })
        .collect()
}

/// `COMMAND INFO name`'s one entry: name, arity, flags, ...
fn command_info(con: &mut redis::Connection, name: &str) -> Vec<Value> {
    let info: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(con)
        .unwrap();
    match info.into_iter().next() {
        Some(Value::Array(entry)) => entry,
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn command_info_flags_match_the_documented_table() {
    let server = Server::start();
    let mut con = server.con();
    let table = documented_flags();
    assert!(table.len() >= 15, "documented flag table: {table:?}");
    let listed = module_commands(&mut con);
    let mut names: Vec<&String> = table.iter().map(|(n, _)| n).collect();
    names.sort();
    let mut listed_sorted: Vec<&String> = listed.iter().collect();
    listed_sorted.sort();
    assert_eq!(
        names, listed_sorted,
        "every command in the table, and only those"
    );
    for (name, flags) in &table {
        let entry = command_info(&mut con, name);
        let mut got: Vec<String> = redis::from_redis_value(entry[2].clone()).unwrap();
        got.retain(|f| f != "module");
        let mut want = flags.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "COMMAND INFO {name} flags");
    }
}

/// `COMMAND DOCS` describes every public command, and `COMMAND GETKEYS` finds INIT's stream.
#[test]
fn command_docs_describe_every_public_command() {
    let server = Server::start();
    let mut con = server.con();
    let listed = module_commands(&mut con);
    let public: Vec<&String> = listed.iter().filter(|n| !n.contains("._")).collect();
    assert_eq!(public.len(), seckill_harness::PUBLIC_COMMANDS, "{listed:?}");
    for name in public {
        let docs: Vec<Value> = redis::cmd("COMMAND")
            .arg("DOCS")
            .arg(name)
            .query(&mut con)
            .unwrap();
        let text = format!("{docs:?}");
        for field in [
            "summary",
            "since",
            "complexity",
            "arguments",
            "key_spec_index",
        ] {
            assert!(text.contains(field), "{name} has no {field}: {text}");
        }
    }
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("SECKILL.INIT")
        .arg("s")
        .arg("10")
        .arg("LIMIT")
        .arg("2")
        .arg("EVENTS")
        .arg("s:events")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["s", "s:events"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("SECKILL.TRY")
        .arg("s")
        .arg("alice")
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["s"]);
}

/// Every public command's `COMMAND INFO` arity is its real one (not -1), and Redis refuses one
/// word too few (and, for a fixed arity, one too many) with its own error, before the module.
#[test]
fn command_info_carries_each_commands_real_arity() {
    let server = Server::start();
    let mut con = server.con();
    let public: Vec<String> = module_commands(&mut con)
        .into_iter()
        .filter(|n| !n.contains("._"))
        .collect();
    assert!(!public.is_empty());
    for name in &public {
        let entry = command_info(&mut con, name);
        let arity: i64 = redis::from_redis_value(entry[1].clone()).unwrap();
        assert!(arity.abs() >= 2, "{name}: arity {arity}");
        let words = |n: i64| -> Vec<String> {
            std::iter::once(name.clone())
                .chain((1..n).map(|i| format!("a{i}")))
                .collect()
        };
        let wrong = format!("ERR wrong number of arguments for '{name}' command");
        let mut refused = |n: i64| {
            let called = words(n);
            let refs: Vec<&str> = called.iter().map(String::as_str).collect();
            assert_eq!(error(&mut con, &refs), wrong, "{name} with {n} words");
        };
        refused(arity.abs() - 1);
        if arity > 0 {
            refused(arity + 1);
        }
    }
}

/// `seckill.max-user-bytes` (512 by default): a longer user id in TRY is an error and nothing
/// is stored; the cap is a config; a replica with a smaller cap still holds what its master
/// sold (copies of a TRY are not checked again).
#[test]
fn a_user_id_past_max_user_bytes_is_refused_and_nothing_is_stored() {
    let master = Server::start();
    let replica = Server::start();
    seckill_harness::replicate(&replica, &master);
    let mut con = master.con();
    ok(&mut con, &["SECKILL.INIT", "s", "5", "LIMIT", "2"]);
    let long = "u".repeat(513);
    let before = seckill_harness::dump(&mut con, "s");
    assert_eq!(
        error(&mut con, &["SECKILL.TRY", "s", &long]),
        "ERR user id is 513 bytes, longer than seckill.max-user-bytes (512)"
    );
    assert_eq!(
        seckill_harness::dump(&mut con, "s"),
        before,
        "nothing stored"
    );
    let at_cap = "u".repeat(512);
    assert_eq!(
        seckill_harness::int(&mut con, &["SECKILL.TRY", "s", &at_cap]),
        4
    );
    ok(
        &mut replica.con(),
        &["CONFIG", "SET", "seckill.max-user-bytes", "16"],
    );
    ok(
        &mut con,
        &["CONFIG", "SET", "seckill.max-user-bytes", "1024"],
    );
    assert_eq!(
        seckill_harness::int(&mut con, &["SECKILL.TRY", "s", &long]),
        3
    );
    seckill_harness::wait_replicas(&mut con, 1);
    assert_eq!(
        seckill_harness::int(&mut replica.con(), &["SECKILL.BOUGHT", "s", &long]),
        1,
        "the replica holds the master's buyer past its own cap"
    );
}
