//! Identifiers a sale derives instead of storing: stream entry IDs and order UUIDs.

use super::Sale;

/// The ID a stream entry takes at `now_ms` after an entry with ID `last`, as a stream's own
/// `*` gives it: `now-0`, or one past `last` within its ms when the clock has not moved past
/// it. `None` past the largest ID.
pub fn next_entry_id(last: (u64, u64), now_ms: u64) -> Option<(u64, u64)> {
    let (ms, seq) = last;
    if now_ms > ms {
        Some((now_ms, 0))
    } else if let Some(seq) = seq.checked_add(1) {
        Some((ms, seq))
    } else {
        Some((ms.checked_add(1)?, 0))
    }
}

/// A bijection on 62-bit integers, so distinct order numbers give distinct UUIDs.
fn scramble62(mut x: u64) -> u64 {
    const MASK: u64 = (1 << 62) - 1;
    x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) & MASK;
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9) & MASK;
    x ^ (x >> 32)
}

impl Sale {
    /// The UUID of order number `order`: version 8 (RFC 9562), derived from the sale's random
    /// seed so it costs no storage and replays identically; unique within the sale.
    /// The order's UUID in its 36-character text form, written without allocating: it is
    /// formatted for every purchase of a sale with a stream.
    pub fn order_uuid(&self, order: u64) -> [u8; 36] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let seed = self.totals.seed;
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&seed[..8]);
        let tail = u64::from_be_bytes(seed[8..].try_into().expect("8 bytes"));
        let low = (scramble62(order) ^ tail) & ((1 << 62) - 1) | (0b10 << 62);
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        bytes[6] = (bytes[6] & 0x0f) | 0x80;
        let mut text = [b'-'; 36];
        let mut at = 0;
        for (i, byte) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                at += 1;
            }
            text[at] = HEX[usize::from(byte >> 4)];
            text[at + 1] = HEX[usize::from(byte & 0x0f)];
            at += 2;
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::sale::fixtures::*;
    use crate::logic::sale::*;

    #[test]
    fn the_next_entry_id_follows_the_last_as_a_streams_own_does() {
        assert_eq!(next_entry_id((0, 0), T0), Some((T0, 0)));
        assert_eq!(next_entry_id((T0, 4), T0), Some((T0, 5)), "same ms");
        assert_eq!(
            next_entry_id((T0, 4), T0 - 9),
            Some((T0, 5)),
            "clock went back"
        );
        assert_eq!(next_entry_id((T0, 4), T0 + 1), Some((T0 + 1, 0)));
        assert_eq!(next_entry_id((T0, u64::MAX), T0), Some((T0 + 1, 0)));
        assert_eq!(next_entry_id((u64::MAX, u64::MAX), T0), None);
    }

    #[test]
    fn order_uuids_are_well_formed_distinct_and_seeded() {
        let sale = held(1, 1, 1);
        let text = |n| String::from_utf8(sale.order_uuid(n).to_vec()).unwrap();
        let uuid = text(1);
        assert_eq!(uuid.len(), 36);
        assert_eq!(
            [8, 13, 18, 23].map(|i| &uuid[i..=i]),
            ["-"; 4],
            "8-4-4-4-12 groups"
        );
        assert!(
            uuid.chars()
                .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(&uuid[14..15], "8", "version 8");
        assert!(
            matches!(&uuid[19..20], "8" | "9" | "a" | "b"),
            "RFC variant"
        );
        let all: std::collections::HashSet<String> = (1..10_000).map(text).collect();
        assert_eq!(all.len(), 9_999);
        assert_eq!(uuid[..18], text(2)[..18], "the first 8 bytes name the sale");
        let other = Sale::new(config(1, 1), [8; 16]).unwrap();
        assert_ne!(other.order_uuid(1), sale.order_uuid(1));
    }

    #[test]
    fn order_uuid_text_is_the_one_0_3_wrote() {
        // Module 0.3 formatted the bytes with `format!`: streams written then must not change.
        let sale = Sale::new(config(1, 1), *b"0123456789abcdef").unwrap();
        for order in (1..2_000).chain([u64::MAX / 3, u64::MAX]) {
            let seed = *b"0123456789abcdef";
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&seed[..8]);
            let tail = u64::from_be_bytes(seed[8..].try_into().unwrap());
            let low = (scramble62(order) ^ tail) & ((1 << 62) - 1) | (0b10 << 62);
            bytes[8..].copy_from_slice(&low.to_be_bytes());
            bytes[6] = (bytes[6] & 0x0f) | 0x80;
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let reference = format!(
                "{}-{}-{}-{}-{}",
                &hex[..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..]
            );
            assert_eq!(sale.order_uuid(order), reference.as_bytes());
        }
    }
}
