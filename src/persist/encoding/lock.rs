//! The lock's encoding.

use super::{DecodeError, Decoded, Reader, put_bytes};
use crate::logic::buyers::put_varint;
use crate::logic::lock::{Holder, Lock};

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
    Lock::from_parts(last_fence, holder).ok_or(DecodeError("lock breaks an invariant"))
}
