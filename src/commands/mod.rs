//! The thin command layer: parse (`crate::args`), call the core, reply, replicate.

pub mod lock;
pub mod sale;

use crate::args::ArgError;
use redis_module::native_types::RedisType;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue, raw};
use std::mem::ManuallyDrop;
use std::os::raw::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

impl From<ArgError> for RedisError {
    fn from(err: ArgError) -> RedisError {
        match err {
            ArgError::Arity => RedisError::WrongArity,
            ArgError::Invalid(message) => RedisError::String(message),
        }
    }
}

/// A command body: the key and the arguments after it, as byte slices borrowed from argv.
pub type Handler = fn(&Context, &RedisString, &[&[u8]]) -> RedisResult;

/// Most arguments any valid call has after its key; longer calls take a heap-allocated list.
const INLINE_ARGS: usize = 8;

fn arg_bytes<'a>(arg: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    let ptr = unsafe { raw::RedisModule_StringPtrLen.expect("StringPtrLen")(arg, &mut len) };
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// The entry point of every command: borrows argv without copying or retaining it (the hot
/// path of SECKILL.TRY allocates nothing here), runs the body so that a panic becomes an error
/// reply instead of aborting Redis, and replies.
///
/// # Safety
/// `raw_ctx`, `argv` and `argc` must be the arguments Redis passed to a command callback.
pub unsafe fn dispatch(
    raw_ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    let ctx = Context::new(raw_ctx);
    let argv = unsafe { std::slice::from_raw_parts(argv, argc.max(0) as usize) };
    let result = match argv {
        [_, key, rest @ ..] => {
            // argv belongs to Redis for the whole call: wrap the key without taking ownership.
            let key = ManuallyDrop::new(RedisString::from_redis_module_string(raw_ctx, *key));
            let mut inline: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
            let heap: Vec<&[u8]>;
            let rest: &[&[u8]] = if rest.len() <= INLINE_ARGS {
                for (slot, arg) in inline.iter_mut().zip(rest) {
                    *slot = arg_bytes(*arg);
                }
                &inline[..rest.len()]
            } else {
                heap = rest.iter().map(|arg| arg_bytes(*arg)).collect();
                &heap
            };
            catch_unwind(AssertUnwindSafe(|| handler(&ctx, &key, rest))).unwrap_or_else(|panic| {
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
        _ => Err(RedisError::WrongArity),
    };
    // The crate turns error text into a C string: a NUL in it would panic outside the guard.
    let result = result.map_err(|e| match e {
        RedisError::String(text) if text.contains('\0') => {
            RedisError::String(text.replace('\0', "\\x00"))
        }
        other => other,
    });
    ctx.reply(result) as c_int
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
