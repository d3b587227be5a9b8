//! Which sale key a user buys in, the same in every client library; and which node a
//! cluster's redirect names.

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

#[cfg(test)]
mod tests {
    use super::*;

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
