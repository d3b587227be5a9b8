//! One reply shape per protocol (docs/any-client.md, "Reply shapes"): every command of every
//! transcript runs on a fresh server under RESP2 and on another under RESP3, and each RESP3
//! reply, flattened as Redis's convention has it (a map -> key, value, ...; a boolean -> 0 or
//! 1), equals the RESP2 reply. The commands are checked from the server's own list (`COMMAND
//! LIST FILTERBY MODULE seckill`): each must appear in some transcript, so a new command comes
//! with one. Module 0.7 answered SECKILL.BUYERS under RESP3 with one map per buyer, which a
//! client that flattens maps read as another shape than the documented one.

use redis::Value;
use seckill_harness::transcript::{files, parse, words};
use seckill_harness::{Server, error_text, module_commands};
use std::collections::BTreeSet;

/// A RESP3 reply as RESP2 carries it.
fn flattened(value: Value) -> Value {
    match value {
        Value::Map(pairs) => Value::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [flattened(k), flattened(v)])
                .collect(),
        ),
        Value::Array(items) | Value::Set(items) => {
            Value::Array(items.into_iter().map(flattened).collect())
        }
        Value::Boolean(b) => Value::Int(i64::from(b)),
        Value::Attribute { data, .. } => flattened(*data),
        Value::VerbatimString { text, .. } => Value::BulkString(text.into_bytes()),
        other => other,
    }
}

/// Every step of `text` on `con`: each reply, or its error's text.
fn replies(con: &mut redis::Connection, text: &str) -> Vec<(usize, String, Result<Value, String>)> {
    parse(text)
        .into_iter()
        .map(|step| {
            let mut cmd = redis::Cmd::new();
            for word in words(&step.command) {
                cmd.arg(word);
            }
            let reply = cmd.query::<Value>(con).map_err(|e| error_text(&e));
            (step.line, step.command, reply)
        })
        .collect()
}

fn connect(server: &Server, resp3: bool) -> redis::Connection {
    let url = if resp3 {
        format!("{}?protocol=resp3", server.url())
    } else {
        server.url()
    };
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

#[test]
fn every_resp3_reply_flattened_is_the_resp2_reply() {
    let mut used = BTreeSet::new();
    let mut differences = Vec::new();
    for file in files() {
        let text = std::fs::read_to_string(&file).unwrap();
        // Both servers take the same commands in the same order: the same state, the same
        // replies, but for the protocol.
        let two = Server::start_with(&["fences", "counter"]);
        let three = Server::start_with(&["fences", "counter"]);
        let resp2 = replies(&mut connect(&two, false), &text);
        let resp3 = replies(&mut connect(&three, true), &text);
        for ((line, command, two), (_, _, three)) in resp2.into_iter().zip(resp3) {
            used.insert(command.split_whitespace().next().unwrap().to_lowercase());
            let three = three.map(flattened);
            if two != three {
                differences.push(format!(
                    "{}:{line}: > {command}\n  RESP2: {two:?}\n  RESP3: {three:?}",
                    file.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(differences.is_empty(), "\n{}", differences.join("\n"));
    let server = Server::start();
    let listed = module_commands(&mut server.con());
    let missing: Vec<&String> = listed.iter().filter(|c| !used.contains(*c)).collect();
    assert!(
        missing.is_empty(),
        "commands no transcript calls: {missing:?}"
    );
}
