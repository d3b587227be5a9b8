//! The buyers table of a sale: one record per user who ever bought.
//!
//! A flash sale keeps one record per distinct buyer, possibly millions of them, so the table
//! is laid out for memory rather than generality. Every record lives in one append-only arena
//! and the hash table holds only the record's 8-byte arena offset:
//!
//! `varint(len << 1 | gone) | user | final | [held | expires_at] | [order]`
//!
//! `final` and `held` take just the bytes the sale's LIMIT needs: none at all for the default
//! LIMIT 1 without holds (a live record then holds exactly one unit). The hold fields exist
//! only in sales with HOLD, the order number only in sales with an event stream. A 10-byte
//! user id in a plain LIMIT 1 sale costs 11 arena bytes plus one table bucket, against ~61
//! bytes for a member of a Redis SET.
//!
//! Records never move and are never removed: a user whose units all went back to stock is
//! marked gone in place, and buys again into the same record. So the arena's order is the
//! same on a master and its replicas (encodings and digests match), and a scan by record
//! number visits every buyer present for the whole scan exactly once.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// Records between two points of the scan index.
const CHECKPOINT_EVERY: u64 = 64;

/// Which optional fields the records of one table carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The largest quantity a record holds (the sale's LIMIT).
    pub limit: u64,
    /// Records carry a held quantity and its expiry (sales with HOLD).
    pub holds: bool,
    /// Records carry an order number (sales with an event stream).
    pub orders: bool,
}

/// A user's units in one sale.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuyerRecord {
    /// Units bought for good (without HOLD at once, with HOLD once confirmed).
    pub final_qty: u64,
    /// Units taken by a hold that has not been confirmed.
    pub held_qty: u64,
    /// When the hold expires (unix ms); meaningful while `held_qty > 0`.
    pub expires_at_ms: u64,
    /// The user's current order (0 in sales without an event stream).
    pub order: u64,
}

impl BuyerRecord {
    pub fn units(&self) -> u64 {
        self.final_qty + self.held_qty
    }
}

/// Where a record lives in the arena; stable for the table's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId(u64);

impl RecordId {
    /// A record id out of nothing, for tests of tables keyed by record.
    #[cfg(test)]
    pub fn for_tests(n: u64) -> RecordId {
        RecordId(n)
    }
}

/// Largest arena offset a record may start at (about 200 million buyers of 20-byte ids).
pub const MAX_ARENA: u64 = u32::MAX as u64;

#[derive(Clone)]
pub struct Buyers {
    arena: Vec<u8>,
    /// Arena offsets of the records, as u32: 4 bytes a bucket instead of 8, the table being
    /// half a large sale's memory. The arena therefore holds at most [`MAX_ARENA`] bytes.
    offsets: HashTable<u32>,
    hasher: DefaultHashBuilder,
    layout: Layout,
    qty_width: usize,
    /// Records ever created, gone ones included.
    records: u64,
    /// Records that hold at least one unit.
    live: u64,
    /// Arena offset of every `CHECKPOINT_EVERY`-th record, for resuming a scan.
    checkpoints: Vec<u64>,
    /// [`MAX_ARENA`], lower in tests.
    arena_limit: u64,
}

/// What the allocator hands out for a request of `bytes`: a large request is rounded up to
/// its size class, four of them per doubling (jemalloc's, which Redis uses), which for a big
/// sale's two allocations is up to a fifth more than asked, and is what `used_memory` counts.
pub fn allocated(bytes: usize) -> usize {
    const LARGE: usize = 16 * 1024;
    if bytes <= LARGE {
        return bytes;
    }
    let spacing = 1usize << (usize::BITS - 1 - bytes.leading_zeros() - 2);
    bytes.div_ceil(spacing) * spacing
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

/// The header of the record at `start`: (user, gone, position of the first field, position
/// of the byte holding the gone bit).
fn header_at(arena: &[u8], start: u64) -> (&[u8], bool, usize) {
    let mut pos = start as usize;
    // The arena is written only by `insert`, so every offset in the table names a whole record.
    let header = get_varint(arena, &mut pos).expect("arena record header");
    let len = (header >> 1) as usize;
    (&arena[pos..pos + len], header & 1 == 1, pos + len)
}

fn width_for(limit: u64) -> usize {
    match limit {
        0 | 1 => 0,
        2..=0xff => 1,
        0x100..=0xffff => 2,
        0x1_0000..=0xffff_ffff => 4,
        _ => 8,
    }
}

impl Buyers {
    pub fn new(layout: Layout) -> Buyers {
        let mut qty_width = width_for(layout.limit);
        if layout.holds {
            // A user may hold units with none final, so a quantity of 0 must be storable.
            qty_width = qty_width.max(1);
        }
        Buyers {
            arena: Vec::new(),
            offsets: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            layout,
            qty_width,
            records: 0,
            live: 0,
            checkpoints: Vec::new(),
            arena_limit: MAX_ARENA,
        }
    }

    /// Lowers the arena's limit, to test a full table without 4 GiB of ids.
    #[cfg(test)]
    pub fn limit_arena(&mut self, bytes: u64) {
        self.arena_limit = bytes;
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn fields_len(&self) -> usize {
        let mut len = self.qty_width;
        if self.layout.holds {
            len += self.qty_width + 8;
        }
        if self.layout.orders {
            len += 8;
        }
        len
    }

    fn read_uint(&self, pos: usize, width: usize) -> u64 {
        let mut raw = [0u8; 8];
        raw[..width].copy_from_slice(&self.arena[pos..pos + width]);
        u64::from_le_bytes(raw)
    }

    fn write_uint(&mut self, pos: usize, width: usize, value: u64) {
        debug_assert!(width == 8 || value < 1 << (8 * width));
        self.arena[pos..pos + width].copy_from_slice(&value.to_le_bytes()[..width]);
    }

    fn decode_fields(&self, gone: bool, mut pos: usize) -> BuyerRecord {
        let final_qty = if self.qty_width == 0 {
            u64::from(!gone)
        } else {
            self.read_uint(pos, self.qty_width)
        };
        let mut record = BuyerRecord {
            final_qty,
            ..BuyerRecord::default()
        };
        pos += self.qty_width;
        if self.layout.holds {
            record.held_qty = self.read_uint(pos, self.qty_width);
            record.expires_at_ms = self.read_uint(pos + self.qty_width, 8);
            pos += self.qty_width + 8;
        }
        if self.layout.orders {
            record.order = self.read_uint(pos, 8);
        }
        record
    }

    fn encode_fields(&mut self, mut pos: usize, record: &BuyerRecord) {
        let width = self.qty_width;
        if width > 0 {
            self.write_uint(pos, width, record.final_qty);
        }
        pos += width;
        if self.layout.holds {
            self.write_uint(pos, width, record.held_qty);
            self.write_uint(pos + width, 8, record.expires_at_ms);
            pos += width + 8;
        }
        if self.layout.orders {
            self.write_uint(pos, 8, record.order);
        }
    }

    /// Records that hold at least one unit.
    pub fn len(&self) -> usize {
        self.live as usize
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Records ever created, including those of users whose units all went back.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The record of `user`, if they ever bought.
    pub fn find(&self, user: &[u8]) -> Option<(RecordId, BuyerRecord)> {
        let hash = self.hasher.hash_one(user);
        let arena = &self.arena;
        let &start = self
            .offsets
            .find(hash, |&start| header_at(arena, u64::from(start)).0 == user)?;
        let record_id = RecordId(u64::from(start));
        Some((record_id, self.record(record_id).1))
    }

    /// The user and units of the record `record_id`.
    pub fn record(&self, record_id: RecordId) -> (&[u8], BuyerRecord) {
        let (user, gone, fields) = header_at(&self.arena, record_id.0);
        (user, self.decode_fields(gone, fields))
    }

    /// Rewrites the record `record_id` in place; a record left with no units is marked gone.
    /// The caller keeps every quantity within the LIMIT the table was made for.
    pub fn set(&mut self, record_id: RecordId, record: &BuyerRecord) {
        let start = record_id.0 as usize;
        let (_, was_gone, fields) = header_at(&self.arena, record_id.0);
        let gone = record.units() == 0;
        debug_assert!(self.qty_width > 0 || record.final_qty <= 1);
        if gone != was_gone {
            // Bit 0 of a varint's first byte is bit 0 of its value: flipping it keeps the length.
            self.arena[start] ^= 1;
            if gone {
                self.live -= 1;
            } else {
                self.live += 1;
            }
        }
        self.encode_fields(fields, record);
    }

    /// Whether one more record fits (the arena's offsets are 32-bit).
    pub fn has_room(&self) -> bool {
        self.arena.len() as u64 <= self.arena_limit
    }

    /// Creates the record of a user who never bought; the caller checked [`Buyers::has_room`].
    pub fn insert(&mut self, user: &[u8], record: &BuyerRecord) -> RecordId {
        debug_assert!(self.find(user).is_none());
        let hash = self.hasher.hash_one(user);
        let start = self.append(user, record);
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.offsets.insert_unique(hash, start as u32, |&offset| {
            hasher.hash_one(header_at(arena, u64::from(offset)).0)
        });
        RecordId(start)
    }

    /// Starts loading records (a payload, which must not list anyone twice) into this empty
    /// table: see [`Loader`].
    pub fn loader(&mut self, records: usize) -> Loader<'_> {
        self.loader_in_batches(records, LOAD_BATCH)
    }

    fn loader_in_batches(&mut self, records: usize, batch: usize) -> Loader<'_> {
        debug_assert_eq!(self.records, 0);
        Loader {
            buyers: self,
            pending: Vec::with_capacity(records.min(batch)),
            grouped: Vec::new(),
            batch,
        }
    }

    /// Writes a record at the arena's end and returns its offset.
    fn append(&mut self, user: &[u8], record: &BuyerRecord) -> u64 {
        assert!(self.has_room(), "the buyer arena is full");
        let needed = 10 + user.len() + self.fields_len();
        if self.arena.capacity() - self.arena.len() < needed {
            // Grow by about an eighth instead of doubling (the arena is most of a large sale's
            // memory, and copying it on growth costs less than leaving half of it unused), to
            // a size the allocator hands out exactly, so none of it is rounding.
            let wanted = self.arena.len() + needed.max(self.arena.len() / 8).max(4096);
            self.arena
                .reserve_exact(allocated(wanted) - self.arena.len());
        }
        let start = self.arena.len() as u64;
        if self.records.is_multiple_of(CHECKPOINT_EVERY) {
            self.checkpoints.push(start);
        }
        self.records += 1;
        let gone = record.units() == 0;
        put_varint(&mut self.arena, (user.len() as u64) << 1 | u64::from(gone));
        self.arena.extend_from_slice(user);
        let fields = self.arena.len();
        self.arena.resize(fields + self.fields_len(), 0);
        self.encode_fields(fields, record);
        if !gone {
            self.live += 1;
        }
        start
    }

    /// Every record from record number `first` on, gone ones included, in creation order.
    pub fn iter_from(
        &self,
        first: u64,
    ) -> impl Iterator<Item = (RecordId, &[u8], BuyerRecord)> + '_ {
        let mut pos = self
            .checkpoints
            .get((first / CHECKPOINT_EVERY) as usize)
            .map_or(self.arena.len(), |&offset| offset as usize);
        let mut skip = first % CHECKPOINT_EVERY;
        let fields_len = self.fields_len();
        std::iter::from_fn(move || {
            loop {
                if pos >= self.arena.len() {
                    return None;
                }
                let record_id = RecordId(pos as u64);
                let (user, gone, fields) = header_at(&self.arena, record_id.0);
                pos = fields + fields_len;
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                return Some((record_id, user, self.decode_fields(gone, fields)));
            }
        })
    }

    /// Every record, gone ones included, in creation order.
    pub fn iter(&self) -> impl Iterator<Item = (RecordId, &[u8], BuyerRecord)> + '_ {
        self.iter_from(0)
    }

    /// Bytes of heap this table owns, for MEMORY USAGE.
    pub fn heap_bytes(&self) -> usize {
        allocated(self.arena.capacity())
            + allocated(self.offsets.allocation_size())
            + allocated(self.checkpoints.capacity() * 8)
    }

    /// Gives back what [`Buyers::reserve`] over-estimated.
    pub fn shrink_to_fit(&mut self) {
        self.arena.shrink_to_fit();
    }

    /// Pre-sizes for `count` records whose ids take `user_bytes` in total (used when loading).
    pub fn reserve(&mut self, count: usize, user_bytes: usize) {
        self.arena
            .reserve_exact(user_bytes + count * (self.fields_len() + 2));
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.offsets.reserve(count, |&offset| {
            hasher.hash_one(header_at(arena, u64::from(offset)).0)
        });
    }
}

/// Records whose table buckets a [`Loader`] adds in one go.
const LOAD_BATCH: usize = 1 << 20;

/// A batch goes into the table in 2^this groups (for a table of 10 M buyers, ~20 KiB each).
const LOAD_GROUP_BITS: u32 = 12;

/// Loads records in creation order. Each goes to the arena's end at once, but its table bucket
/// waits for a batch: a batch goes into the table in bucket order, so that the inserts of a
/// big sale walk its table (most of which no cache holds) front to back instead of jumping
/// to a random bucket for every record.
pub struct Loader<'b> {
    buyers: &'b mut Buyers,
    /// (hash, arena offset) of the records not in the table yet.
    pending: Vec<(u64, u32)>,
    /// The same, grouped by table slice.
    grouped: Vec<(u64, u32)>,
    batch: usize,
}

impl Loader<'_> {
    pub fn has_room(&self) -> bool {
        self.buyers.has_room()
    }

    /// Appends the record of `user` and returns its id; `None` if the table already has
    /// `user` (then the payload is corrupt, and the table with it).
    pub fn push(&mut self, user: &[u8], record: &BuyerRecord) -> Option<RecordId> {
        let hash = self.buyers.hasher.hash_one(user);
        let start = self.buyers.append(user, record);
        self.pending.push((hash, start as u32));
        if self.pending.len() >= self.batch && !self.flush() {
            return None;
        }
        Some(RecordId(start))
    }

    /// Puts the pending records into the table: `false` if one of them was there already.
    fn flush(&mut self) -> bool {
        let buyers = &mut *self.buyers;
        let (arena, hasher) = (&buyers.arena, &buyers.hasher);
        buyers.offsets.reserve(self.pending.len(), |&offset| {
            hasher.hash_one(header_at(arena, u64::from(offset)).0)
        });
        // The table probes from bucket `hash & mask` (for a table of `mask + 1` buckets):
        // group the batch by the top bits of that, so each group's inserts stay within a
        // slice of the table small enough for the cache (a counting sort, two passes).
        let buckets = (buyers.offsets.capacity() / 7 * 8).next_power_of_two() as u64;
        let shift = (buckets.trailing_zeros()).saturating_sub(LOAD_GROUP_BITS);
        let group = |hash: u64| ((hash & (buckets - 1)) >> shift) as usize;
        let mut starts = vec![0usize; (1 << LOAD_GROUP_BITS) + 1];
        for &(hash, _) in &self.pending {
            starts[group(hash) + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        self.grouped.clear();
        self.grouped.resize(self.pending.len(), (0, 0));
        for &(hash, start) in &self.pending {
            let at = &mut starts[group(hash)];
            self.grouped[*at] = (hash, start);
            *at += 1;
        }
        self.pending.clear();
        for &(hash, start) in &self.grouped {
            let user = header_at(arena, u64::from(start)).0;
            match buyers.offsets.entry(
                hash,
                |&offset| header_at(arena, u64::from(offset)).0 == user,
                |&offset| hasher.hash_one(header_at(arena, u64::from(offset)).0),
            ) {
                hashbrown::hash_table::Entry::Occupied(_) => return false,
                hashbrown::hash_table::Entry::Vacant(vacant) => {
                    vacant.insert(start);
                }
            }
        }
        true
    }

    /// Puts the last records into the table: `false` if any user came twice.
    pub fn finish(mut self) -> bool {
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_allocations_round_to_four_classes_per_doubling() {
        assert_eq!(allocated(100), 100);
        assert_eq!(allocated(16 * 1024), 16 * 1024);
        assert_eq!(allocated(1 << 20), 1 << 20);
        assert_eq!(allocated((1 << 20) + 1), (1 << 20) + (1 << 18));
        assert_eq!(allocated(10_485_776), 12 << 20);
    }

    #[test]
    fn a_loader_finds_every_record_and_a_user_listed_twice_in_any_batch() {
        let load = |users: &[String]| {
            let mut buyers = Buyers::new(PLAIN);
            let mut loader = buyers.loader_in_batches(users.len(), 16);
            let pushed = users
                .iter()
                .all(|user| loader.push(user.as_bytes(), &final_units(1)).is_some());
            (pushed && loader.finish()).then_some(buyers)
        };
        let users: Vec<String> = (0..100).map(|i| format!("user:{i}")).collect();
        let buyers = load(&users).expect("distinct users load");
        assert_eq!((buyers.len(), buyers.records()), (100, 100));
        for user in &users {
            assert_eq!(buyers.find(user.as_bytes()).unwrap().1, final_units(1));
        }
        assert!(buyers.find(b"user:100").is_none());
        // Twice within one batch, in two batches, and in the last, partial one.
        for (first, again) in [(3, 5), (3, 40), (90, 99)] {
            let mut twice = users.clone();
            twice[again] = users[first].clone();
            assert!(load(&twice).is_none(), "user {first} again at {again}");
        }
    }

    const PLAIN: Layout = Layout {
        limit: 1,
        holds: false,
        orders: false,
    };

    fn final_units(qty: u64) -> BuyerRecord {
        BuyerRecord {
            final_qty: qty,
            ..BuyerRecord::default()
        }
    }

    /// Units of `user` (0 when they never bought or all went back).
    fn units(buyers: &Buyers, user: &[u8]) -> u64 {
        buyers.find(user).map_or(0, |(_, record)| record.units())
    }

    fn all(buyers: &Buyers) -> Vec<(Vec<u8>, BuyerRecord)> {
        buyers.iter().map(|(_, u, e)| (u.to_vec(), e)).collect()
    }

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
    fn insert_find_set_and_order() {
        let mut buyers = Buyers::new(Layout { limit: 10, ..PLAIN });
        assert!(buyers.is_empty());
        assert_eq!(units(&buyers, b"alice"), 0);
        let alice = buyers.insert(b"alice", &final_units(1));
        buyers.insert(b"bob", &final_units(2));
        buyers.set(alice, &final_units(4));
        buyers.insert(b"", &final_units(1));
        assert_eq!(units(&buyers, b"alice"), 4);
        assert_eq!(units(&buyers, b"bob"), 2);
        assert_eq!(units(&buyers, b""), 1);
        assert_eq!(units(&buyers, b"carol"), 0);
        assert_eq!((buyers.len(), buyers.records()), (3, 3));
        assert_eq!(
            all(&buyers),
            vec![
                (b"alice".to_vec(), final_units(4)),
                (b"bob".to_vec(), final_units(2)),
                (b"".to_vec(), final_units(1))
            ]
        );
    }

    #[test]
    fn a_record_left_empty_is_gone_and_comes_back_in_place() {
        let mut buyers = Buyers::new(PLAIN);
        let alice = buyers.insert(b"alice", &final_units(1));
        buyers.insert(b"bob", &final_units(1));
        buyers.set(alice, &BuyerRecord::default());
        assert_eq!((buyers.len(), buyers.records()), (1, 2));
        assert_eq!(units(&buyers, b"alice"), 0);
        assert_eq!(buyers.find(b"alice").map(|(s, _)| s), Some(alice));
        buyers.set(alice, &final_units(1));
        assert_eq!((buyers.len(), buyers.records()), (2, 2));
        assert_eq!(buyers.iter().next().map(|(s, _, _)| s), Some(alice));
    }

    #[test]
    fn hold_and_order_fields_round_trip() {
        let mut buyers = Buyers::new(Layout {
            limit: 1,
            holds: true,
            orders: true,
        });
        let held = BuyerRecord {
            final_qty: 0,
            held_qty: 1,
            expires_at_ms: 1_700_000_000_123,
            order: 42,
        };
        let record_id = buyers.insert(b"u", &held);
        assert_eq!(buyers.record(record_id), (&b"u"[..], held));
        let confirmed = BuyerRecord {
            final_qty: 1,
            held_qty: 0,
            ..held
        };
        buyers.set(record_id, &confirmed);
        assert_eq!(buyers.find(b"u"), Some((record_id, confirmed)));
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
            let mut buyers = Buyers::new(Layout { limit, ..PLAIN });
            assert_eq!(buyers.qty_width, width, "limit {limit}");
            buyers.insert(b"first", &final_units(1));
            buyers.insert(b"top", &final_units(top.min(limit)));
            buyers.insert(b"after", &final_units(1));
            let units: Vec<u64> = buyers.iter().map(|(_, _, e)| e.final_qty).collect();
            assert_eq!(units, vec![1, top.min(limit), 1]);
        }
        let mut one = Buyers::new(PLAIN);
        one.insert(b"0123456789", &final_units(1));
        assert_eq!(one.arena.len(), 11, "LIMIT 1 stores no quantity");
        let held = Buyers::new(Layout {
            holds: true,
            ..PLAIN
        });
        assert_eq!(held.qty_width, 1, "a held record needs a storable 0");
    }

    #[test]
    fn iter_from_resumes_at_any_record_number() {
        let mut buyers = Buyers::new(PLAIN);
        for i in 0..300u32 {
            buyers.insert(format!("u{i}").as_bytes(), &final_units(1));
        }
        for first in [0u64, 1, 63, 64, 65, 128, 299, 300, 1000] {
            let users: Vec<Vec<u8>> = buyers
                .iter_from(first)
                .map(|(_, u, _)| u.to_vec())
                .collect();
            let expected: Vec<Vec<u8>> = (first.min(300)..300)
                .map(|i| format!("u{i}").into_bytes())
                .collect();
            assert_eq!(users, expected, "from {first}");
        }
    }

    #[test]
    fn survives_growth_with_binary_and_long_ids() {
        let mut buyers = Buyers::new(Layout { limit: 3, ..PLAIN });
        buyers.reserve(4, 40);
        let id = |i: u32| {
            let mut id = i.to_le_bytes().to_vec();
            if i.is_multiple_of(7) {
                id.extend(std::iter::repeat_n(0xffu8, 200));
            }
            id
        };
        for i in 0..20_000u32 {
            buyers.insert(&id(i), &final_units(u64::from(i % 3 + 1)));
        }
        assert_eq!(buyers.len(), 20_000);
        for i in (0..20_000u32).step_by(997) {
            assert_eq!(units(&buyers, &id(i)), u64::from(i % 3 + 1));
        }
        assert!(buyers.heap_bytes() > 0);
        let cloned = buyers.clone();
        assert_eq!(units(&cloned, &1u32.to_le_bytes()), 2);
    }
}
