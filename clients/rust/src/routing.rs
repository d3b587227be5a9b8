//! Which sale key a user buys in, the same in every client library; and in a cluster, which
//! slot a command's key is in, which master serves a slot, and which node a redirect names.

use redis::{Arg, Cmd, Value};

/// The partition a user always buys in: FNV-1a (64-bit) of the user id's bytes, modulo the
/// number of partitions. Every client library computes the same (`clients/partition-hash.txt`).
pub fn partition_of(user: &[u8], partitions: u32) -> u32 {
    (fnv1a64(user) % u64::from(partitions.max(1))) as u32
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

pub(crate) fn partition_key(name: &str, index: impl std::fmt::Display) -> String {
    format!("{{{name}/{index}}}")
}

/// The node a MOVED or ASK names, of a command or of any command of a pipeline:
/// `MOVED <slot> <host>:<port>`.
pub(crate) fn redirect(e: &redis::RedisError) -> Option<(String, u16)> {
    let errors = e.clone().into_server_errors()?;
    let (_, error) = errors
        .iter()
        .find(|(_, error)| matches!(error.code(), "MOVED" | "ASK"))?;
    redirect_address(error.details()?)
}

/// The node of a MOVED or ASK error's details, `<slot> <host>:<port>`.
pub(crate) fn redirect_address(details: &str) -> Option<(String, u16)> {
    let (host, port) = details.split_ascii_whitespace().nth(1)?.rsplit_once(':')?;
    Some((host.to_string(), port.parse().ok()?))
}

/// A key's hash slot (CRC16/XMODEM of its hash tag, or of the key without one, mod 16384).
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let len = key[open + 1..].iter().position(|&b| b == b'}')?;
            (len > 0).then(|| &key[open + 1..open + 1 + len])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag) % 16384
}

/// One range of `CLUSTER SLOTS`: its first and last slot, its master's and its replicas'
/// `host:port`.
pub(crate) struct SlotRange {
    pub first: u16,
    pub last: u16,
    pub master: String,
    pub replicas: Vec<String>,
}

/// `CLUSTER SLOTS`' ranges (a range whose master does not parse is left out, a replica
/// that does not parse too).
pub(crate) fn slot_ranges(reply: &Value) -> Vec<SlotRange> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let text = |value: &Value| -> Option<String> { redis::from_redis_value_ref(value).ok() };
    let number = |value: &Value| -> Option<u16> { redis::from_redis_value_ref(value).ok() };
    let address = |node: &Value| -> Option<String> {
        let Value::Array(node) = node else {
            return None;
        };
        Some(format!(
            "{}:{}",
            text(node.first()?)?,
            number(node.get(1)?)?
        ))
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(items) = range else {
                return None;
            };
            Some(SlotRange {
                first: number(items.first()?)?,
                last: number(items.get(1)?)?,
                master: address(items.get(2)?)?,
                replicas: items.iter().skip(3).filter_map(address).collect(),
            })
        })
        .collect()
}

/// The key a command is routed by: the first one, where the command keeps it. `None` for a
/// command without one (`WAIT`, `INFO`, `CLUSTER ...`, `EVAL` with no keys), which any node
/// (or, for `WAIT`, the one of the command before it) may answer.
pub(crate) fn command_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut capitals = [0; NAME_ROOM];
    let name = capitalized(command_name(cmd)?, &mut capitals);
    let position = match name {
        b"WAIT" | b"WAITAOF" | b"INFO" | b"PING" | b"ECHO" | b"CLUSTER" | b"ROLE" | b"ASKING"
        | b"READONLY" | b"READWRITE" | b"HELLO" | b"AUTH" | b"CLIENT" | b"COMMAND" | b"CONFIG"
        | b"MODULE" | b"SCRIPT" | b"FUNCTION" | b"TIME" | b"DBSIZE" | b"DEBUG" | b"SELECT"
        | b"LASTSAVE" | b"MULTI" | b"EXEC" | b"DISCARD" => return None,
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let keys: u64 = command_number(cmd, 2)?;
            if keys == 0 {
                return None;
            }
            3
        }
        b"XREAD" | b"XREADGROUP" => {
            1 + command_args_iter(cmd).position(|arg| arg.eq_ignore_ascii_case(b"STREAMS"))?
        }
        b"XGROUP" | b"XINFO" | b"OBJECT" | b"MEMORY" => 2,
        _ => 1,
    };
    command_args_iter(cmd).nth(position)
}

/// A command's arguments, its name first, as [`command_args_iter`] gives them (for tests).
#[cfg(test)]
pub(crate) fn command_args(cmd: &Cmd) -> Vec<&[u8]> {
    command_args_iter(cmd).collect()
}

/// A command's arguments, its name first, without a copy (every call routes by them, so none
/// allocates: `make bench`, "Durability").
pub(crate) fn command_args_iter(cmd: &Cmd) -> impl Iterator<Item = &[u8]> {
    cmd.args_iter().filter_map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    })
}

/// A command's name (its first argument).
pub(crate) fn command_name(cmd: &Cmd) -> Option<&[u8]> {
    command_args_iter(cmd).next()
}

/// The command's argument at `at`, read as a number.
pub(crate) fn command_number<T: std::str::FromStr>(cmd: &Cmd, at: usize) -> Option<T> {
    let arg = command_args_iter(cmd).nth(at)?;
    std::str::from_utf8(arg).ok()?.parse().ok()
}

/// Room for the longest command name matched by name here.
pub(crate) const NAME_ROOM: usize = 16;

/// `name` in capitals, written in `room`: empty for a name longer than the room (none of the
/// names matched).
pub(crate) fn capitalized<'r>(name: &[u8], room: &'r mut [u8; NAME_ROOM]) -> &'r [u8] {
    let Some(capitals) = room.get_mut(..name.len()) else {
        return &[];
    };
    capitals.copy_from_slice(name);
    capitals.make_ascii_uppercase();
    capitals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_routed_by_their_first_key() {
        assert_eq!(key_slot(b"{sale/0}"), key_slot(b"sale/0"));
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"{}x"), key_slot(b"{}x"), "an empty tag is no tag");
        assert_ne!(key_slot(b"{}a"), key_slot(b"{}b"));
        let key = |cmd: &mut Cmd| command_key(cmd).map(<[u8]>::to_vec);
        let some = |k: &str| Some(k.as_bytes().to_vec());
        assert_eq!(
            key(redis::cmd("seckill.try").arg("{s/1}").arg("u")),
            some("{s/1}")
        );
        assert_eq!(key(redis::cmd("WAIT").arg(1).arg(100)), None);
        assert_eq!(key(redis::cmd("INFO").arg("seckill")), None);
        assert_eq!(key(redis::cmd("CLUSTER").arg("SLOTS")), None);
        assert_eq!(key(redis::cmd("EVAL").arg("s").arg(0)), None);
        assert_eq!(key(redis::cmd("EVAL").arg("s").arg(1).arg("k")), some("k"));
        assert_eq!(
            key(redis::cmd("EVAL").arg("s").arg("x")),
            None,
            "not a count"
        );
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP").arg("g").arg("c").arg("COUNT").arg(5);
        assert_eq!(key(read.arg("streams").arg("ev").arg(">")), some("ev"));
        assert_eq!(key(&mut redis::cmd("XREAD")), None, "no STREAMS");
        assert_eq!(
            key(redis::cmd("XGROUP").arg("CREATE").arg("ev")),
            some("ev")
        );
        assert_eq!(key(&mut redis::cmd("GET")), None, "no key given");
        assert_eq!(key(&mut Cmd::new()), None, "no command");
        let mut long = redis::cmd("SECKILL.A_NAME_LONGER_THAN_ROOM");
        assert_eq!(
            key(long.arg("k")),
            some("k"),
            "a long name keeps its key first"
        );
        assert_eq!(key(redis::cmd("waitaof").arg(1).arg(1).arg(0)), None);
    }

    #[test]
    fn names_are_capitalized_in_their_room() {
        let mut room = [0; NAME_ROOM];
        assert_eq!(capitalized(b"WaitAof", &mut room), b"WAITAOF");
        assert_eq!(capitalized(b"", &mut room), b"");
        assert_eq!(
            capitalized(&[b'a'; NAME_ROOM], &mut room),
            [b'A'; NAME_ROOM]
        );
        assert_eq!(
            capitalized(&[b'a'; NAME_ROOM + 1], &mut room),
            b"",
            "no room"
        );
    }

    #[test]
    fn a_redirect_names_its_node() {
        let node = Some(("127.0.0.1".to_string(), 7000));
        assert_eq!(redirect_address("3999 127.0.0.1:7000"), node);
        assert_eq!(
            redirect_address("3999 ::1:7000"),
            Some(("::1".to_string(), 7000))
        );
        assert_eq!(redirect_address("3999"), None);
        assert_eq!(redirect_address("3999 127.0.0.1"), None);
        assert_eq!(redirect_address("3999 127.0.0.1:port"), None);
        let error = |reply: &[u8]| {
            let value = redis::parse_redis_value(reply).unwrap();
            value.extract_error().unwrap_err()
        };
        assert_eq!(redirect(&error(b"-MOVED 3999 127.0.0.1:7000\r\n")), node);
        assert_eq!(redirect(&error(b"-ASK 3999 127.0.0.1:7000\r\n")), node);
        assert_eq!(redirect(&error(b"-TRYAGAIN busy\r\n")), None);
    }

    #[test]
    fn users_hash_to_stable_partitions() {
        // FNV-1a 64's published test vectors, then the table the Python package checks too.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        let table = include_str!("../../partition-hash.txt");
        let mut checked = 0;
        for line in table
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let mut cells = line.split_whitespace();
            let (user, partitions, want) = (
                cells.next().unwrap(),
                cells.next().unwrap().parse().unwrap(),
                cells.next().unwrap().parse::<u32>().unwrap(),
            );
            assert_eq!(partition_of(user.as_bytes(), partitions), want, "{line}");
            checked += 1;
        }
        assert!(checked >= 10);
    }
}
