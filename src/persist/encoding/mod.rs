//! Versioned byte encodings of a sale and a lock. The same bytes go into RDB (and so DUMP,
//! RESTORE, MIGRATE and replica sync) and into the internal restore commands of an AOF rewrite.
//!
//! Every version ever written must keep decoding: bump the version for a new layout, keep the
//! old decoder, and add a fixture under `tests/fixtures/`.
//!
//! `sale.rs` writes the current sale layout and reads v2 to v9 (one layout grown field by
//! field); `sale_v1.rs` reads module 0.1's; `lock.rs` the lock's.

mod lock;
mod sale;
mod sale_v1;

pub use lock::{decode_lock, encode_lock};
pub use sale::{decode_sale, encode_sale};

use crate::logic::buyers::{get_varint, put_varint};

pub const SALE_VERSION: u32 = 10;
pub const LOCK_VERSION: u32 = 1;

#[derive(Debug, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

pub(crate) type Decoded<T> = Result<T, DecodeError>;

pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn varint(&mut self) -> Decoded<u64> {
        get_varint(self.bytes, &mut self.pos).ok_or(DecodeError("truncated integer"))
    }

    pub(crate) fn bytes(&mut self) -> Decoded<&'a [u8]> {
        let len = self.varint()?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.pos.checked_add(len))
            .filter(|&end| end <= self.bytes.len())
            .ok_or(DecodeError("truncated string"))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn finish(&self) -> Decoded<()> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(DecodeError("trailing bytes"))
        }
    }
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod timing;
