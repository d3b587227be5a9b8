//! The waiting room's users: one record per user who ever joined, laid out for memory as the
//! buyers table is (see `logic::buyers`): records in one append-only arena, the hash table
//! holding only a record's 4-byte arena offset, which is also the user's handle in the queue.
//!
//! `varint(len) | user | status (1 byte) | place (4 bytes, little-endian)`
//!
//! `place` is the user's index in the room's queue while it waits. A 10-byte user id costs 16
//! arena bytes and one table bucket (4 bytes and a control byte, at most 7/8 full).

use crate::logic::buyers::{allocated, get_varint, put_varint};
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// Where a user stands in the room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// In the queue, at `place`.
    Waiting,
    /// Admitted and within its window: it may buy.
    Admitted,
    /// It bought (a TRY succeeded): it left the room and may buy again up to LIMIT.
    Bought,
    /// Its window lapsed before it bought: its place went to the next in line.
    Lapsed,
    /// It left (`SECKILL.LEAVE`).
    Left,
    /// Its turn came after it stopped joining again (`PRESENCE`).
    Dropped,
}

impl Status {
    pub fn code(self) -> u8 {
        match self {
            Status::Waiting => 0,
            Status::Admitted => 1,
            Status::Bought => 2,
            Status::Lapsed => 3,
            Status::Left => 4,
            Status::Dropped => 5,
        }
    }

    /// Out of the room: it joins again at the back of the line.
    pub fn is_out(self) -> bool {
        matches!(self, Status::Lapsed | Status::Left | Status::Dropped)
    }

    pub fn from_code(code: u8) -> Option<Status> {
        Some(match code {
            0 => Status::Waiting,
            1 => Status::Admitted,
            2 => Status::Bought,
            3 => Status::Lapsed,
            4 => Status::Left,
            5 => Status::Dropped,
            _ => return None,
        })
    }
}

/// A user's handle: its record's arena offset, stable for the table's lifetime.
pub type UserRef = u32;

/// Largest arena a table holds: offsets are 32-bit.
pub const MAX_ARENA: usize = u32::MAX as usize;

/// Makes room for `more` items in `vec`, growing it by an eighth rather than doubling: a big
/// room's arena and queue would otherwise hold up to twice what they use.
pub fn grow_gently<T>(vec: &mut Vec<T>, more: usize) {
    if vec.len() + more > vec.capacity() {
        vec.reserve_exact(more.max(vec.capacity() / 8).max(64));
    }
}

#[derive(Clone, Default)]
pub struct RoomUsers {
    arena: Vec<u8>,
    offsets: HashTable<u32>,
    hasher: DefaultHashBuilder,
    count: u64,
}

/// The user of the record at `start`, and the position of its status byte.
fn header_at(arena: &[u8], start: UserRef) -> (&[u8], usize) {
    let mut pos = start as usize;
    // Only `insert` writes the arena, so every offset names a whole record.
    let len = get_varint(arena, &mut pos).expect("room record header") as usize;
    (&arena[pos..pos + len], pos + len)
}

impl RoomUsers {
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn find(&self, user: &[u8]) -> Option<UserRef> {
        let hash = self.hasher.hash_one(user);
        let arena = &self.arena;
        self.offsets
            .find(hash, |&start| header_at(arena, start).0 == user)
            .copied()
    }

    /// Whether one more user of `len` bytes fits.
    pub fn has_room(&self, len: usize) -> bool {
        self.arena.len() + len + 15 <= MAX_ARENA
    }

    /// Adds a user who never joined; the caller checked [`RoomUsers::has_room`].
    pub fn insert(&mut self, user: &[u8], status: Status, place: u32) -> UserRef {
        debug_assert!(self.find(user).is_none());
        let start = self.arena.len() as u32;
        grow_gently(&mut self.arena, user.len() + 15);
        put_varint(&mut self.arena, user.len() as u64);
        self.arena.extend_from_slice(user);
        self.arena.push(status.code());
        self.arena.extend_from_slice(&place.to_le_bytes());
        let hash = self.hasher.hash_one(user);
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.offsets.insert_unique(hash, start, |&offset| {
            hasher.hash_one(header_at(arena, offset).0)
        });
        self.count += 1;
        start
    }

    pub fn user(&self, at: UserRef) -> &[u8] {
        header_at(&self.arena, at).0
    }

    pub fn status(&self, at: UserRef) -> Status {
        let (_, pos) = header_at(&self.arena, at);
        Status::from_code(self.arena[pos]).expect("only Status codes are written")
    }

    /// Every user's handle, in join order.
    pub fn iter(&self) -> impl Iterator<Item = UserRef> + '_ {
        let mut at = 0usize;
        std::iter::from_fn(move || {
            (at < self.arena.len()).then(|| {
                let this = at as UserRef;
                let (_, status) = header_at(&self.arena, this);
                at = status + 5;
                this
            })
        })
    }

    pub fn place(&self, at: UserRef) -> u32 {
        let (_, pos) = header_at(&self.arena, at);
        u32::from_le_bytes(self.arena[pos + 1..pos + 5].try_into().expect("4 bytes"))
    }

    pub fn set(&mut self, at: UserRef, status: Status, place: u32) {
        let (_, pos) = header_at(&self.arena, at);
        self.arena[pos] = status.code();
        self.arena[pos + 1..pos + 5].copy_from_slice(&place.to_le_bytes());
    }

    pub fn set_status(&mut self, at: UserRef, status: Status) {
        let place = self.place(at);
        self.set(at, status, place);
    }

    /// Bytes held, as the allocator counts them.
    pub fn bytes(&self) -> usize {
        // hashbrown: one u32 bucket and one control byte per slot.
        allocated(self.arena.capacity()) + allocated(self.offsets.capacity() * 5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keeps_its_user_status_and_place() {
        let mut users = RoomUsers::default();
        let a = users.insert(b"alice", Status::Waiting, 7);
        let b = users.insert(b"bob", Status::Admitted, 0);
        assert_eq!(users.find(b"alice"), Some(a));
        assert_eq!(users.find(b"bob"), Some(b));
        assert_eq!(users.find(b"carol"), None);
        assert_eq!(
            (users.user(a), users.status(a), users.place(a)),
            (&b"alice"[..], Status::Waiting, 7)
        );
        users.set(a, Status::Lapsed, u32::MAX);
        users.set_status(b, Status::Bought);
        assert_eq!(
            (users.status(a), users.place(a)),
            (Status::Lapsed, u32::MAX)
        );
        assert_eq!((users.status(b), users.place(b)), (Status::Bought, 0));
        assert_eq!(users.count(), 2);
        for status in [
            Status::Waiting,
            Status::Admitted,
            Status::Bought,
            Status::Lapsed,
            Status::Left,
            Status::Dropped,
        ] {
            assert_eq!(Status::from_code(status.code()), Some(status));
        }
        assert_eq!(Status::from_code(6), None);
        assert_eq!(users.iter().collect::<Vec<_>>(), [a, b]);
    }

    #[test]
    fn the_arena_refuses_a_user_past_its_32_bit_offsets() {
        let users = RoomUsers::default();
        assert!(users.has_room(10));
        assert!(!users.has_room(MAX_ARENA));
    }
}
