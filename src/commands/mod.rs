//! The thin command layer: parse (`crate::args`), call the core, reply, replicate.

pub mod lock;
pub mod sale;

use crate::args::ArgError;
use redis_module::native_types::RedisType;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue, raw};
use std::panic::{AssertUnwindSafe, catch_unwind};

impl From<ArgError> for RedisError {
    fn from(err: ArgError) -> RedisError {
        match err {
            ArgError::Arity => RedisError::WrongArity,
            ArgError::Invalid(message) => RedisError::String(message),
        }
    }
}

/// The argument bytes after the command name and the key, and the key.
pub fn split_key(args: &[RedisString]) -> Result<(&RedisString, Vec<&[u8]>), RedisError> {
    match args {
        [_, key, rest @ ..] => Ok((key, rest.iter().map(RedisString::as_slice).collect())),
        _ => Err(RedisError::WrongArity),
    }
}

/// Runs a command body so that a panic becomes an error reply instead of aborting Redis.
pub fn guarded(
    ctx: &Context,
    args: Vec<RedisString>,
    body: fn(&Context, &[RedisString]) -> RedisResult,
) -> RedisResult {
    catch_unwind(AssertUnwindSafe(|| body(ctx, &args))).unwrap_or_else(|panic| {
        let detail = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        ctx.log_warning(&format!("seckill: command failed internally: {detail}"));
        Err(RedisError::String(format!(
            "ERR seckill internal error: {detail}"
        )))
    })
}

/// The server clock in unix milliseconds.
pub fn now_ms() -> u64 {
    let ms = unsafe { raw::RedisModule_Milliseconds.expect("RedisModule_Milliseconds")() };
    ms.max(0) as u64
}

/// `Some(value)` if the key holds a value of `ty`, `None` if it is empty, WRONGTYPE otherwise.
pub fn writable_value<'k, T>(
    key: &'k redis_module::key::RedisKeyWritable,
    ty: &RedisType,
) -> Result<Option<&'k mut T>, RedisError> {
    key.get_value::<T>(ty).map_err(|_| RedisError::WrongType)
}

/// Read-only twin of [`writable_value`].
pub fn readable_value<'k, T>(
    key: &'k redis_module::key::RedisKey,
    ty: &RedisType,
) -> Result<Option<&'k T>, RedisError> {
    key.get_value::<T>(ty).map_err(|_| RedisError::WrongType)
}

/// A flat `[name, value, ...]` array, as INFO-style commands reply.
pub fn field_array(fields: Vec<(&str, RedisValue)>) -> RedisValue {
    RedisValue::Array(
        fields
            .into_iter()
            .flat_map(|(name, value)| [RedisValue::BulkString(name.to_string()), value])
            .collect(),
    )
}

pub fn int(value: u64) -> RedisValue {
    RedisValue::Integer(value as i64)
}
