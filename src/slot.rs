//! Redis Cluster's key -> hash slot function (CRC16/XMODEM of the hash tag or the whole key,
//! mod 16384): Redis 7.0's module API has no call for it.

const SLOTS: u16 = 16384;

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of a key that is hashed: the first `{...}` with something inside, else the key.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_redis_cluster() {
        // The reference check value of CRC16/XMODEM, and slots CLUSTER KEYSLOT reports.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"{sale}"), key_slot(b"sale"));
        // An empty tag, or no closing brace, hashes the whole key.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") % SLOTS);
        assert_eq!(key_slot(b"a{b}c{d}"), key_slot(b"b"));
    }
}
