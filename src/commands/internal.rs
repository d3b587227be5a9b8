//! What the internal commands (`SECKILL._RESTORE`, `SECKILL._REPLAY`, `LOCK._RESTORE`) share:
//! only the replication link and AOF loading may send them, and a restore's payload may come
//! in chunks.

use crate::args;
use crate::persist::chunks::{Collected, Staging};
use crate::persist::encoding::DecodeError;
use redis_module::{Context, ContextFlags, RedisError, RedisString};
use std::borrow::Cow;

/// Internal commands state a sale or a lock outright, with no rule checked: only a master's
/// replication stream and AOF loading may send them, or any client allowed to write a key
/// could forge stock, buyers or a lock's holder and fence.
pub fn internal_only(ctx: &Context, command: &str) -> Result<(), RedisError> {
    if ctx
        .get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
    {
        return Ok(());
    }
    Err(RedisError::String(format!(
        "ERR {command} is internal: only the replication link and AOF loading may call it"
    )))
}

static STAGING: std::sync::Mutex<Staging> = std::sync::Mutex::new(Staging { current: None });

/// The value an internal restore command (`SECKILL._RESTORE`, `LOCK._RESTORE`) carries,
/// decoded: from its payload, or from the chunks of a big one once the last has come (`None`
/// before that). A payload that does not decode changes nothing and is logged, since nobody
/// reads the reply while an AOF loads or a master streams.
pub fn restored_value<T>(
    ctx: &Context,
    key_name: &RedisString,
    command: &str,
    what: &str,
    rest: &[&[u8]],
    decode: impl FnOnce(&[u8], u32) -> Result<T, DecodeError>,
) -> Result<Option<T>, RedisError> {
    internal_only(ctx, command)?;
    let refuse = |message: String| {
        ctx.log_warning(&format!(
            "seckill: {key_name}: {message}; key left unchanged"
        ));
        RedisError::String(message)
    };
    let (payload, version) = match args::restore(rest)? {
        args::Restore::Whole { version, payload } => (Cow::Borrowed(payload), version),
        args::Restore::Chunk(chunk) => {
            let mut staging = STAGING
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match staging.push(key_name.as_slice(), chunk) {
                Ok(Collected::Partial) => return Ok(None),
                Ok(Collected::Whole(bytes)) => (Cow::Owned(bytes), chunk.version),
                Err(e) => return Err(refuse(format!("ERR bad {what} payload chunk: {e}"))),
            }
        }
    };
    decode(&payload, version)
        .map(Some)
        .map_err(|e| refuse(format!("ERR bad {what} payload: {}", e.0)))
}
