//! The buyers table of a sale: user id -> units bought.
//!
//! A flash sale records one entry per distinct buyer, possibly millions of them, so the table
//! is laid out for memory rather than generality. Every record lives in one append-only arena
//! (`varint(len) | user bytes | qty`) in insertion order, and the hash table holds only the
//! record's 8-byte arena offset. `qty` takes just the bytes the sale's LIMIT needs, none at all
//! for the default LIMIT 1 (a recorded buyer holds exactly one unit). A 10-byte user id then
//! costs 11 arena bytes plus one table slot, against ~61 bytes for a member of a Redis SET.
//! Insertion order is kept, so encodings and digests match on a master and its replicas.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

#[derive(Clone)]
pub struct Buyers {
    arena: Vec<u8>,
    offsets: HashTable<u64>,
    hasher: DefaultHashBuilder,
    total_units: u64,
    /// Little-endian bytes of each record's qty: 0, 1, 2, 4 or 8.
    qty_width: usize,
}

impl Default for Buyers {
    /// A table for any quantity up to u64::MAX.
    fn default() -> Buyers {
        Buyers::for_limit(u64::MAX)
    }
}

/// Appends `value` as an LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads an LEB128 varint at `*pos`, advancing it; `None` when truncated or over 64 bits.
pub fn get_varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*pos)?;
        *pos += 1;
        let bits = u64::from(byte & 0x7f);
        if shift == 63 && bits > 1 {
            return None;
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Decodes the record at `start` into (user, position of its qty field).
fn record_at(arena: &[u8], start: u64) -> (&[u8], usize) {
    let mut pos = start as usize;
    // The arena is written only by `insert`, so every offset in the table names a whole record.
    let len = get_varint(arena, &mut pos).expect("arena record header") as usize;
    (&arena[pos..pos + len], pos + len)
}

impl Buyers {
    /// A table whose buyers never hold more than `limit` units.
    pub fn for_limit(limit: u64) -> Buyers {
        let qty_width = match limit {
            0 | 1 => 0,
            2..=0xff => 1,
            0x100..=0xffff => 2,
            0x1_0000..=0xffff_ffff => 4,
            _ => 8,
        };
        Buyers {
            arena: Vec::new(),
            offsets: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            total_units: 0,
            qty_width,
        }
    }

    fn qty_at(&self, qty_pos: usize) -> u64 {
        if self.qty_width == 0 {
            return 1;
        }
        let mut raw = [0u8; 8];
        raw[..self.qty_width].copy_from_slice(&self.arena[qty_pos..qty_pos + self.qty_width]);
        u64::from_le_bytes(raw)
    }

    fn put_qty(&mut self, qty_pos: usize, qty: u64) {
        let width = self.qty_width;
        self.arena[qty_pos..qty_pos + width].copy_from_slice(&qty.to_le_bytes()[..width]);
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Sum of the units held by all buyers.
    pub fn total_units(&self) -> u64 {
        self.total_units
    }

    fn find(&self, user: &[u8]) -> Option<usize> {
        let hash = self.hasher.hash_one(user);
        let arena = &self.arena;
        self.offsets
            .find(hash, |&start| record_at(arena, start).0 == user)
            .map(|&start| record_at(arena, start).1)
    }

    /// Units held by `user` (0 when the user never bought).
    pub fn get(&self, user: &[u8]) -> u64 {
        self.find(user).map_or(0, |pos| self.qty_at(pos))
    }

    /// Adds `qty` units to `user`, creating the record on first purchase. The caller keeps
    /// every buyer within the limit the table was made for.
    pub fn add(&mut self, user: &[u8], qty: u64) {
        self.total_units += qty;
        if let Some(pos) = self.find(user) {
            let held = self.qty_at(pos) + qty;
            debug_assert!(self.qty_width == 8 || held < 1 << (8 * self.qty_width));
            self.put_qty(pos, held);
            return;
        }
        debug_assert!(self.qty_width == 8 || qty < 1 << (8 * self.qty_width).max(1));
        self.insert_new(user, qty);
    }

    fn insert_new(&mut self, user: &[u8], qty: u64) {
        let needed = 10 + user.len() + self.qty_width;
        if self.arena.capacity() - self.arena.len() < needed {
            // Grow by half instead of doubling: the arena is most of a large sale's memory.
            let extra = needed.max(self.arena.len() / 2).max(256);
            self.arena.reserve_exact(extra);
        }
        let start = self.arena.len() as u64;
        put_varint(&mut self.arena, user.len() as u64);
        self.arena.extend_from_slice(user);
        self.arena
            .extend_from_slice(&qty.to_le_bytes()[..self.qty_width]);

        let hash = self.hasher.hash_one(user);
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.offsets.insert_unique(hash, start, |&offset| {
            hasher.hash_one(record_at(arena, offset).0)
        });
    }

    /// Every (user, qty) in the order the users first bought.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            if pos >= self.arena.len() {
                return None;
            }
            let (user, qty_pos) = record_at(&self.arena, pos as u64);
            pos = qty_pos + self.qty_width;
            Some((user, self.qty_at(qty_pos)))
        })
    }

    /// Bytes of heap this table owns, for MEMORY USAGE.
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity() + self.offsets.allocation_size()
    }

    /// Pre-sizes for `count` buyers whose ids take `user_bytes` in total (used when loading).
    pub fn reserve(&mut self, count: usize, user_bytes: usize) {
        self.arena
            .reserve_exact(user_bytes + count * (self.qty_width + 2));
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.offsets
            .reserve(count, |&offset| hasher.hash_one(record_at(arena, offset).0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trips_edges() {
        for value in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            let mut pos = 0;
            assert_eq!(get_varint(&out, &mut pos), Some(value));
            assert_eq!(pos, out.len());
        }
    }

    #[test]
    fn varint_rejects_truncated_and_overlong() {
        let mut pos = 0;
        assert_eq!(get_varint(&[0x80], &mut pos), None);
        let mut pos = 0;
        assert_eq!(get_varint(&[], &mut pos), None);
        let overlong = [0xff; 10];
        let mut pos = 0;
        assert_eq!(get_varint(&overlong, &mut pos), None);
        let mut too_big = vec![0xff; 9];
        too_big.push(0x02);
        let mut pos = 0;
        assert_eq!(get_varint(&too_big, &mut pos), None);
    }

    #[test]
    fn add_get_and_order() {
        let mut buyers = Buyers::default();
        assert!(buyers.is_empty());
        assert_eq!(buyers.get(b"alice"), 0);
        buyers.add(b"alice", 1);
        buyers.add(b"bob", 2);
        buyers.add(b"alice", 3);
        buyers.add(b"", 1);
        assert_eq!(buyers.get(b"alice"), 4);
        assert_eq!(buyers.get(b"bob"), 2);
        assert_eq!(buyers.get(b""), 1);
        assert_eq!(buyers.get(b"carol"), 0);
        assert_eq!(buyers.len(), 3);
        assert_eq!(buyers.total_units(), 7);
        let all: Vec<_> = buyers.iter().map(|(u, q)| (u.to_vec(), q)).collect();
        assert_eq!(
            all,
            vec![
                (b"alice".to_vec(), 4),
                (b"bob".to_vec(), 2),
                (b"".to_vec(), 1)
            ]
        );
    }

    #[test]
    fn quantities_use_the_width_the_limit_needs() {
        for (limit, width, top) in [
            (1, 0, 1),
            (2, 1, 2),
            (255, 1, 255),
            (256, 2, 65_535),
            (65_536, 4, u32::MAX as u64),
            (u32::MAX as u64 + 1, 8, u64::MAX / 2),
        ] {
            let mut buyers = Buyers::for_limit(limit);
            assert_eq!(buyers.qty_width, width, "limit {limit}");
            buyers.add(b"first", 1);
            buyers.add(b"top", top.min(limit));
            buyers.add(b"after", 1);
            assert_eq!(buyers.get(b"first"), 1);
            assert_eq!(buyers.get(b"top"), top.min(limit));
            assert_eq!(buyers.get(b"after"), 1);
            let all: Vec<u64> = buyers.iter().map(|(_, q)| q).collect();
            assert_eq!(all, vec![1, top.min(limit), 1]);
        }
        let mut one = Buyers::for_limit(1);
        one.add(b"0123456789", 1);
        assert_eq!(one.arena.len(), 11, "LIMIT 1 stores no quantity");
    }

    #[test]
    fn survives_growth_with_binary_and_long_ids() {
        let mut buyers = Buyers::default();
        buyers.reserve(4, 40);
        for i in 0..20_000u32 {
            let mut id = i.to_le_bytes().to_vec();
            if i % 7 == 0 {
                id.extend(std::iter::repeat_n(0xffu8, 200));
            }
            buyers.add(&id, u64::from(i % 3 + 1));
        }
        assert_eq!(buyers.len(), 20_000);
        for i in (0..20_000u32).step_by(997) {
            let mut id = i.to_le_bytes().to_vec();
            if i % 7 == 0 {
                id.extend(std::iter::repeat_n(0xffu8, 200));
            }
            assert_eq!(buyers.get(&id), u64::from(i % 3 + 1));
        }
        assert!(buyers.heap_bytes() > 0);
        let cloned = buyers.clone();
        assert_eq!(cloned.get(&1u32.to_le_bytes()), 2);
    }
}
