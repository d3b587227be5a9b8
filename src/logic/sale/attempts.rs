//! Attempt ids: purchases applied exactly once through client retries. A client that sends
//! `TRY` or `CANCEL` with `ID attempt` and gets no answer (a timeout, a dropped connection, a
//! failover) sends the same command again with the same id; the sale recognizes the repeat,
//! changes nothing and answers as a success.
//!
//! The window, exactly. A sale keeps, per buyer, the last TRY or CANCEL that buyer sent with
//! an id and that changed the sale (and a CANCEL with an id that found the buyer). Repeated
//! with that id and the same `qty`:
//! - a TRY replies the units left now (>= 0), whatever the stock and window say by then, as
//!   long as the buyer still owns at least the units it bought;
//! - a CANCEL replies the units the first one returned.
//!
//! Outside that window the command runs as a new one: once the buyer sent another TRY or
//! CANCEL with another id, once the units bought went back (a CANCEL, an expired hold), when
//! the first call was refused (it changed nothing, so its repeat is judged afresh), and after
//! `INIT ... REPLACE`. The same id with another `qty`, or a TRY's id on a CANCEL (or the
//! reverse), is an error that changes nothing.
//!
//! An id costs a buyer that sends one 16 bytes of digest plus its counts in a table beside the
//! buyers; a sale whose buyers send none keeps the table empty and pays nothing.

use crate::logic::buyers::RecordId;

/// Longest attempt id: ids are client-chosen (a UUID, a random 128-bit value), not payloads.
pub const MAX_ATTEMPT_ID: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptKind {
    Try,
    Cancel,
}

/// A buyer's last call with an attempt id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub kind: AttemptKind,
    /// The id's FNV-1a 128 digest: 16 bytes whatever its length, the same on every server.
    pub digest: [u64; 2],
    /// The `qty` the call asked for; 0 for a CANCEL without one (all the buyer owns).
    pub asked: u64,
    /// TRY: the units bought; CANCEL: the units returned.
    pub units: u64,
}

/// How a call with an attempt id stands against the buyer's last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// Not the buyer's last attempt: run it.
    New,
    /// The buyer's last attempt again: answer with these units and change nothing (TRY: the
    /// units it bought, CANCEL: the units it returned).
    Of(u64),
    /// The same id for another call.
    Conflict(&'static str),
}

/// FNV-1a with the 128-bit parameters: deterministic on every server and build, so a replica,
/// an AOF replay and a restart hold the digests the master computed.
pub fn digest(id: &[u8]) -> [u64; 2] {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let mut hash = OFFSET;
    for &byte in id {
        hash ^= u128::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    [(hash >> 64) as u64, hash as u64]
}

impl Attempt {
    /// How a call of `kind` asking `asked` with id digest `digest` stands against this one.
    pub fn repeat(&self, kind: AttemptKind, digest: [u64; 2], asked: u64) -> Repeat {
        if self.digest != digest {
            return Repeat::New;
        }
        if self.kind != kind {
            return Repeat::Conflict("attempt id already used by another command");
        }
        if self.asked != asked {
            return Repeat::Conflict("attempt id already used with another qty");
        }
        Repeat::Of(self.units)
    }
}

/// The last attempt of every buyer that sent one, by buyer record.
#[derive(Clone, Debug, Default)]
pub struct Attempts {
    by_record: hashbrown::HashMap<RecordId, Attempt>,
}

impl Attempts {
    pub fn get(&self, record_id: RecordId) -> Option<&Attempt> {
        self.by_record.get(&record_id)
    }

    pub fn set(&mut self, record_id: RecordId, attempt: Attempt) {
        self.by_record.insert(record_id, attempt);
    }

    pub fn len(&self) -> usize {
        self.by_record.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_record.is_empty()
    }

    /// Every attempt in buyer-record order (creation order), so an encoding is the same on
    /// every server whatever the table's iteration order.
    pub fn in_record_order(&self) -> Vec<(RecordId, Attempt)> {
        let mut all: Vec<_> = self.by_record.iter().map(|(id, a)| (*id, *a)).collect();
        all.sort_unstable_by_key(|(id, _)| *id);
        all
    }

    /// Heap bytes, for MEMORY USAGE: buckets of key and value plus one control byte each.
    pub fn heap_bytes(&self) -> usize {
        if self.by_record.capacity() == 0 {
            return 0;
        }
        // A table of capacity c has c * 8 / 7 buckets (a power of two), each a key, a value
        // and a control byte.
        let buckets = (self.by_record.capacity() * 8)
            .div_ceil(7)
            .next_power_of_two();
        buckets * (std::mem::size_of::<(RecordId, Attempt)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_fnv1a_128() {
        // Published FNV-1a 128 vectors.
        let hex = |d: [u64; 2]| format!("{:016x}{:016x}", d[0], d[1]);
        assert_eq!(hex(digest(b"")), "6c62272e07bb014262b821756295c58d");
        assert_eq!(hex(digest(b"a")), "d228cb696f1a8caf78912b704e4a8964");
        assert_ne!(digest(b"attempt-1"), digest(b"attempt-2"));
    }

    #[test]
    fn only_the_same_call_with_the_same_id_is_a_repeat() {
        let bought = Attempt {
            kind: AttemptKind::Try,
            digest: digest(b"a1"),
            asked: 2,
            units: 2,
        };
        assert_eq!(
            bought.repeat(AttemptKind::Try, digest(b"a1"), 2),
            Repeat::Of(2)
        );
        assert_eq!(
            bought.repeat(AttemptKind::Try, digest(b"a2"), 2),
            Repeat::New
        );
        assert_eq!(
            bought.repeat(AttemptKind::Try, digest(b"a1"), 1),
            Repeat::Conflict("attempt id already used with another qty")
        );
        assert_eq!(
            bought.repeat(AttemptKind::Cancel, digest(b"a1"), 2),
            Repeat::Conflict("attempt id already used by another command")
        );
    }

    #[test]
    fn the_table_lists_in_record_order_and_costs_nothing_empty() {
        let mut attempts = Attempts::default();
        assert_eq!((attempts.heap_bytes(), attempts.is_empty()), (0, true));
        let a = |units| Attempt {
            kind: AttemptKind::Cancel,
            digest: [units, units],
            asked: 0,
            units,
        };
        for n in [5u64, 1, 3] {
            attempts.set(RecordId::for_tests(n), a(n));
        }
        attempts.set(RecordId::for_tests(1), a(9));
        let listed: Vec<u64> = attempts
            .in_record_order()
            .iter()
            .map(|(_, a)| a.units)
            .collect();
        assert_eq!(listed, vec![9, 3, 5]);
        assert_eq!(attempts.len(), 3);
        assert_eq!(attempts.get(RecordId::for_tests(3)), Some(&a(3)));
        assert!(attempts.heap_bytes() >= 3 * 40);
    }
}
