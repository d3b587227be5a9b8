//! Encodings: the bytes a sale or a lock is stored as (RDB, DUMP, AOF rewrite, replica sync),
//! every version ever written, and the pieces a big payload is cut into. Pure: no Redis types.

pub mod chunks;
pub mod encoding;
