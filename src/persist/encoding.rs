//! Versioned byte encodings of a sale and a lock. The same bytes go into RDB (and so DUMP,
//! RESTORE, MIGRATE and replica sync) and into the internal restore commands of an AOF rewrite.
//!
//! Every version ever written must keep decoding: bump the version for a new layout, keep the
//! old decoder, and add a fixture under `tests/fixtures/`.

use crate::core::buyers::{get_varint, put_varint};
use crate::core::lock::{Holder, Lock};
use crate::core::sale::Sale;

pub const SALE_VERSION: u32 = 1;
pub const LOCK_VERSION: u32 = 1;

#[derive(Debug, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

type Decoded<T> = Result<T, DecodeError>;

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Decoded<u64> {
        get_varint(self.bytes, &mut self.pos).ok_or(DecodeError("truncated integer"))
    }

    fn bytes(&mut self) -> Decoded<&'a [u8]> {
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

    fn finish(&self) -> Decoded<()> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(DecodeError("trailing bytes"))
        }
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// v1: `stock limit count (len user qty)*`, all varints.
pub fn encode_sale(sale: &Sale) -> Vec<u8> {
    let buyers = sale.buyers();
    let mut out = Vec::with_capacity(16 + buyers.len() * 16);
    put_varint(&mut out, sale.stock());
    put_varint(&mut out, sale.limit());
    put_varint(&mut out, buyers.len() as u64);
    for (user, qty) in buyers.iter() {
        put_bytes(&mut out, user);
        put_varint(&mut out, qty);
    }
    out
}

pub fn decode_sale(bytes: &[u8], version: u32) -> Decoded<Sale> {
    if version != 1 {
        return Err(DecodeError("unknown sale encoding version"));
    }
    let mut reader = Reader { bytes, pos: 0 };
    let stock = reader.varint()?;
    let limit = reader.varint()?;
    let count = reader.varint()?;
    // Every record takes at least 3 bytes: a corrupt count must not drive a huge reservation.
    if count > (bytes.len() / 3) as u64 {
        return Err(DecodeError("buyer count larger than the payload"));
    }
    let mut records = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let user = reader.bytes()?;
        let qty = reader.varint()?;
        records.push((user, qty));
    }
    reader.finish()?;
    Sale::restore(stock, limit, records.len(), records.into_iter())
        .map_err(|_| DecodeError("sale breaks an invariant"))
}

/// v1: `last_fence has_holder [token expires_at_ms]`; a holder's fence is always the last one.
pub fn encode_lock(lock: &Lock) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    put_varint(&mut out, lock.last_fence());
    match lock.stored_holder() {
        None => out.push(0),
        Some(holder) => {
            out.push(1);
            put_bytes(&mut out, &holder.token);
            put_varint(&mut out, holder.expires_at_ms);
        }
    }
    out
}

pub fn decode_lock(bytes: &[u8], version: u32) -> Decoded<Lock> {
    if version != 1 {
        return Err(DecodeError("unknown lock encoding version"));
    }
    let mut reader = Reader { bytes, pos: 0 };
    let last_fence = reader.varint()?;
    let has_holder = reader.bytes.get(reader.pos).copied();
    reader.pos += 1;
    let holder = match has_holder {
        Some(0) => None,
        Some(1) => Some(Holder {
            token: reader.bytes()?.to_vec(),
            fence: last_fence,
            expires_at_ms: reader.varint()?,
        }),
        _ => return Err(DecodeError("bad holder marker")),
    };
    reader.finish()?;
    Lock::restore(last_fence, holder).ok_or(DecodeError("lock breaks an invariant"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sale::TryOutcome;

    /// The sale stored in `tests/fixtures/sale-v1.bin`.
    fn fixture_sale() -> Sale {
        let mut sale = Sale::new(100, 3).unwrap();
        for (user, qty) in [(&b"alice"[..], 1), (b"bob", 3), (b"\x00\xffbin", 2)] {
            assert!(matches!(
                sale.try_buy(user, qty),
                Ok(TryOutcome::Bought { .. })
            ));
        }
        sale
    }

    /// The lock stored in `tests/fixtures/lock-v1.bin`.
    fn fixture_lock() -> Lock {
        let mut lock = Lock::default();
        lock.acquire(b"tok-1", 1_000, 1_700_000_000_000);
        lock.release(b"tok-1", 1_700_000_000_001);
        lock.acquire(b"tok-2", 30_000, 1_700_000_000_002);
        lock
    }

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn sale_v1_fixture_still_decodes() {
        let sale = decode_sale(&fixture("sale-v1.bin"), 1).unwrap();
        let s = sale.summary();
        assert_eq!((s.stock, s.limit, s.sold, s.buyers), (100, 3, 6, 3));
        assert_eq!(sale.bought(b"bob"), 3);
        assert_eq!(sale.bought(b"\x00\xffbin"), 2);
        assert_eq!(
            encode_sale(&sale),
            encode_sale(&fixture_sale()),
            "v1 is the current sale encoding"
        );
    }

    #[test]
    fn lock_v1_fixture_still_decodes() {
        let lock = decode_lock(&fixture("lock-v1.bin"), 1).unwrap();
        assert_eq!(lock.last_fence(), 2);
        let holder = lock.stored_holder().unwrap();
        assert_eq!(holder.token, b"tok-2");
        assert_eq!(holder.expires_at_ms, 1_700_000_030_002);
        assert_eq!(encode_lock(&lock), encode_lock(&fixture_lock()));
    }

    #[test]
    fn round_trips() {
        let sale = fixture_sale();
        let back = decode_sale(&encode_sale(&sale), SALE_VERSION).unwrap();
        assert_eq!(back.summary(), sale.summary());
        let free = Lock::restore(9, None).unwrap();
        assert_eq!(
            decode_lock(&encode_lock(&free), LOCK_VERSION).unwrap(),
            free
        );
    }

    #[test]
    fn every_truncation_and_unknown_version_is_an_error() {
        let sale = encode_sale(&fixture_sale());
        for cut in 0..sale.len() {
            assert!(decode_sale(&sale[..cut], 1).is_err(), "cut at {cut}");
        }
        let lock = encode_lock(&fixture_lock());
        for cut in 0..lock.len() {
            assert!(decode_lock(&lock[..cut], 1).is_err(), "cut at {cut}");
        }
        assert!(decode_sale(&sale, 2).is_err());
        assert!(decode_lock(&lock, 0).is_err());
        let mut trailing = sale.clone();
        trailing.push(0);
        assert_eq!(
            decode_sale(&trailing, 1).err(),
            Some(DecodeError("trailing bytes"))
        );
    }

    #[test]
    fn corrupt_content_is_rejected() {
        // stock 1, limit 1, one buyer holding 2 units.
        assert!(decode_sale(&[1, 1, 1, 1, b'a', 2], 1).is_err());
        // A count far beyond the payload.
        assert_eq!(
            decode_sale(&[1, 1, 0xff, 0xff, 0x03], 1).err(),
            Some(DecodeError("buyer count larger than the payload"))
        );
        // Bad holder marker, and a holder on a lock that never issued a fence.
        assert!(decode_lock(&[1, 7], 1).is_err());
        assert!(decode_lock(&[0, 1, 1, b't', 5], 1).is_err());
    }

    /// Writes the fixtures; run by hand only when a new encoding version is introduced:
    /// `cargo test write_fixtures -- --ignored`, then never touch the old files again.
    #[test]
    #[ignore]
    fn write_fixtures() {
        let dir = format!("{}/tests/fixtures", env!("CARGO_MANIFEST_DIR"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(format!("{dir}/sale-v1.bin"), encode_sale(&fixture_sale())).unwrap();
        std::fs::write(format!("{dir}/lock-v1.bin"), encode_lock(&fixture_lock())).unwrap();
    }
}
