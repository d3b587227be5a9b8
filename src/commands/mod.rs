//! The thin command layer: parse (`crate::args`), call the core, reply, replicate.

pub mod lock;
pub mod sale;
pub mod stream;
pub mod timer;

use crate::args::{self, ArgError};
use crate::chunks::{Collected, Staging};
use crate::persist::encoding::DecodeError;
use redis_module::native_types::RedisType;
use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue, raw};
use std::borrow::Cow;
use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::os::raw::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

impl From<ArgError> for RedisError {
    fn from(err: ArgError) -> RedisError {
        match err {
            ArgError::Arity => RedisError::WrongArity,
            ArgError::Invalid(message) => RedisError::String(message),
        }
    }
}

/// A command body: the key and the arguments after it.
pub type Handler = fn(&Context, &RedisString, &Args) -> RedisResult;

/// The arguments after the key: byte slices borrowed from argv (what the parsers read), and
/// argv's own strings, which replication can reference instead of copying.
pub struct Args<'a> {
    bytes: &'a [&'a [u8]],
    strings: &'a [*mut raw::RedisModuleString],
}

impl<'a> Args<'a> {
    /// Arguments that are not a client's argv (a timer's change, a replayed command's tail).
    pub fn bytes(bytes: &'a [&'a [u8]]) -> Args<'a> {
        Args {
            bytes,
            strings: &[],
        }
    }

    /// argv's string for argument `index`, if these are a client's arguments.
    pub fn string(&self, index: usize) -> Option<*mut raw::RedisModuleString> {
        self.strings.get(index).copied()
    }
}

impl<'a> std::ops::Deref for Args<'a> {
    type Target = [&'a [u8]];

    fn deref(&self) -> &Self::Target {
        self.bytes
    }
}

/// Most arguments any valid call has after its key; longer calls take a heap-allocated list.
const INLINE_ARGS: usize = 8;

/// The bytes of a module string.
///
/// # Safety
/// `arg` must be a valid module string that outlives the returned slice.
pub unsafe fn string_bytes<'a>(arg: *mut raw::RedisModuleString) -> &'a [u8] {
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
                    *slot = unsafe { string_bytes(*arg) };
                }
                &inline[..rest.len()]
            } else {
                heap = rest
                    .iter()
                    .map(|arg| unsafe { string_bytes(*arg) })
                    .collect();
                &heap
            };
            let args = Args {
                bytes: rest,
                strings: &argv[2..],
            };
            catch_unwind(AssertUnwindSafe(|| handler(&ctx, &key, &args))).unwrap_or_else(|panic| {
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

/// Module strings for one call (replication arguments, stream fields), in order, each released
/// when dropped; up to 16 allocate nothing on the Rust side.
pub struct TempStrings {
    ctx: *mut raw::RedisModuleCtx,
    inline: [*mut raw::RedisModuleString; 16],
    len: usize,
    /// All of them, once there are more than `inline` holds.
    spilled: Vec<*mut raw::RedisModuleString>,
}

impl TempStrings {
    pub fn new(ctx: &Context) -> TempStrings {
        TempStrings {
            ctx: ctx.ctx,
            inline: [std::ptr::null_mut(); 16],
            len: 0,
            spilled: Vec::new(),
        }
    }

    /// Takes ownership of `string`, returning it.
    pub fn keep(&mut self, string: *mut raw::RedisModuleString) -> *mut raw::RedisModuleString {
        if self.spilled.is_empty() && self.len < self.inline.len() {
            self.inline[self.len] = string;
            self.len += 1;
        } else {
            if self.spilled.is_empty() {
                self.spilled.extend_from_slice(&self.inline[..self.len]);
            }
            self.spilled.push(string);
        }
        string
    }

    /// Another reference to a string someone else owns (e.g. the command's key).
    ///
    /// # Safety
    /// `string` must be a valid module string.
    pub unsafe fn retain(
        &mut self,
        string: *mut raw::RedisModuleString,
    ) -> *mut raw::RedisModuleString {
        unsafe { raw::RedisModule_RetainString.expect("RetainString")(self.ctx, string) };
        self.keep(string)
    }

    pub fn bytes(&mut self, bytes: &[u8]) -> *mut raw::RedisModuleString {
        self.keep(unsafe {
            raw::RedisModule_CreateString.expect("CreateString")(
                self.ctx,
                bytes.as_ptr().cast(),
                bytes.len(),
            )
        })
    }

    pub fn int(&mut self, n: u64) -> *mut raw::RedisModuleString {
        self.keep(unsafe {
            raw::RedisModule_CreateStringFromLongLong.expect("CreateStringFromLongLong")(
                self.ctx,
                n as std::os::raw::c_longlong,
            )
        })
    }

    /// Every string kept, in order.
    pub fn all(&self) -> &[*mut raw::RedisModuleString] {
        if self.spilled.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spilled
        }
    }
}

impl Drop for TempStrings {
    fn drop(&mut self) {
        for string in self.all() {
            unsafe { raw::RedisModule_FreeString.expect("FreeString")(self.ctx, *string) };
        }
    }
}

/// `RM_Replicate(command, argv...)` for module strings the caller holds (Redis takes its own
/// references): no argument copied, no C string built per call.
pub fn replicate_strings(ctx: &Context, command: &CStr, argv: &[*mut raw::RedisModuleString]) {
    unsafe {
        raw::RedisModule_Replicate.expect("Replicate")(
            ctx.ctx,
            command.as_ptr(),
            c"v".as_ptr(),
            argv.as_ptr(),
            argv.len(),
        )
    };
}

/// Module strings for a fixed set of words, made once (on first use, on the main thread) and
/// shared by every call: entries and replicated commands reference them instead of copying.
pub struct Words<const N: usize> {
    words: [&'static str; N],
    made: std::sync::OnceLock<Made<N>>,
}

struct Made<const N: usize>([*mut raw::RedisModuleString; N]);

// Made once and never changed or freed: only the pointers are shared.
unsafe impl<const N: usize> Send for Made<N> {}
unsafe impl<const N: usize> Sync for Made<N> {}

impl<const N: usize> Words<N> {
    pub const fn new(words: [&'static str; N]) -> Words<N> {
        Words {
            words,
            made: std::sync::OnceLock::new(),
        }
    }

    fn made(&self) -> &[*mut raw::RedisModuleString; N] {
        &self
            .made
            .get_or_init(|| {
                Made(self.words.map(|word| unsafe {
                    // No context: a string that lives as long as the module.
                    raw::RedisModule_CreateString.expect("CreateString")(
                        std::ptr::null_mut(),
                        word.as_ptr().cast(),
                        word.len(),
                    )
                }))
            })
            .0
    }

    /// Word number `index` as text.
    pub fn word(&self, index: usize) -> &'static str {
        self.words[index]
    }

    /// The string of word number `index`, borrowed.
    pub fn get(&self, index: usize) -> *mut raw::RedisModuleString {
        self.made()[index]
    }

    /// The string of `word`, borrowed, if it is one of these.
    pub fn find(&self, word: &[u8]) -> Option<*mut raw::RedisModuleString> {
        let at = self.words.iter().position(|w| w.as_bytes() == word)?;
        Some(self.get(at))
    }
}

/// Replicates a value as its internal restore command (`SECKILL._RESTORE` / `LOCK._RESTORE`
/// `key version payload`), the effect rather than the command.
pub fn replicate_restore(
    ctx: &Context,
    command: &CStr,
    key_name: &RedisString,
    version: u32,
    payload: &[u8],
) {
    let mut argv = TempStrings::new(ctx);
    // SAFETY: the key is a live string of the caller's for the whole call.
    unsafe { argv.retain(key_name.inner) };
    argv.int(u64::from(version));
    argv.bytes(payload);
    replicate_strings(ctx, command, argv.all());
}

/// Tells Redis that a key changed as a user sees it: WATCH aborts, client-side caches are
/// invalidated. The module asks Redis not to do it for every key it opened to write
/// (`NO_IMPLICIT_SIGNAL_MODIFIED`), because most calls open their key to write and then
/// change nothing: a sold-out TRY, a contended LOCK.ACQUIRE, a replica's hold recheck.
///
/// # Safety
/// `key` must be a valid module string.
pub unsafe fn signal_modified(ctx: &Context, key: *mut raw::RedisModuleString) {
    unsafe { raw::RedisModule_SignalModifiedKey.expect("SignalModifiedKey")(ctx.ctx, key) };
}

/// A keyspace notification with a static event name.
///
/// # Safety
/// `key` must be a valid module string.
pub unsafe fn notify(
    ctx: &Context,
    class: raw::NotifyEvent,
    event: &CStr,
    key: *mut raw::RedisModuleString,
) {
    unsafe {
        raw::RedisModule_NotifyKeyspaceEvent.expect("NotifyKeyspaceEvent")(
            ctx.ctx,
            class.bits(),
            event.as_ptr(),
            key,
        )
    };
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

pub fn is_resp3(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::FLAGS_RESP3)
}

/// Named fields, as INFO-like built-ins reply: a map in this order under RESP3, a flat
/// `[name, value, ...]` array under RESP2 (where Redis itself turns a boolean into 0 or 1).
/// Under RESP3 the map is written at once (the crate's maps hash or sort their keys), and the
/// caller replies `NoReply` for it.
pub fn fields_reply(ctx: &Context, fields: Vec<(&str, RedisValue)>) -> RedisValue {
    if !is_resp3(ctx) {
        return RedisValue::Array(
            fields
                .into_iter()
                .flat_map(|(name, value)| [RedisValue::BulkString(name.to_string()), value])
                .collect(),
        );
    }
    raw::reply_with_map(ctx.ctx, fields.len() as std::os::raw::c_long);
    for (name, value) in fields {
        ctx.reply(Ok(RedisValue::BulkString(name.to_string())));
        ctx.reply(Ok(value));
    }
    RedisValue::NoReply
}

/// Starts an array reply of `len` elements, each written by a later reply.
pub fn start_array(ctx: &Context, len: usize) {
    raw::reply_with_array(ctx.ctx, len as std::os::raw::c_long);
}

pub fn int(value: u64) -> RedisValue {
    RedisValue::Integer(value as i64)
}

/// Where a key lives, to find it again from a timer or a blocked client's callback. The
/// database is held by a name that follows its data through SWAPDB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    data_id: i32,
    pub key: Vec<u8>,
}

impl Home {
    pub fn new(db: i32, key: &[u8]) -> Home {
        Home {
            data_id: databases::data_in(db),
            key: key.to_vec(),
        }
    }

    pub fn of(ctx: &Context, key_name: &RedisString) -> Home {
        Home::new(selected_db(ctx), key_name.as_slice())
    }

    /// The database that holds the key's data now.
    pub fn db(&self) -> i32 {
        databases::db_of(self.data_id)
    }
}

/// Which database holds which data: SWAPDB exchanges two databases' contents, and whatever
/// waits on a key there (a timer, a blocked client) must look for it in the other one.
pub mod databases {
    use std::sync::Mutex;

    /// `DB_OF[data]` is the database holding the data first seen in database `data`; past the
    /// end, each database still holds its own.
    static DB_OF: Mutex<Vec<i32>> = Mutex::new(Vec::new());

    fn with<R>(f: impl FnOnce(&mut Vec<i32>) -> R) -> R {
        f(&mut DB_OF
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// The name of the data database `db` holds now.
    pub fn data_in(db: i32) -> i32 {
        with(|map| map.iter().position(|&d| d == db).map_or(db, |i| i as i32))
    }

    pub fn db_of(data: i32) -> i32 {
        with(|map| map.get(data as usize).copied().unwrap_or(data))
    }

    /// SWAPDB `a` `b` happened.
    pub fn swapped(a: i32, b: i32) {
        let (data_a, data_b) = (data_in(a), data_in(b));
        with(|map| {
            let needed = (data_a.max(data_b) + 1) as usize;
            if map.len() < needed {
                let start = map.len() as i32;
                map.extend(start..needed as i32);
            }
            map.swap(data_a as usize, data_b as usize);
        });
    }

    #[cfg(test)]
    pub fn reset() {
        with(Vec::clear);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn data_follows_swaps() {
            reset();
            assert_eq!((data_in(3), db_of(3)), (3, 3));
            swapped(0, 5);
            assert_eq!((db_of(0), db_of(5)), (5, 0));
            assert_eq!((data_in(5), data_in(0)), (0, 5));
            swapped(5, 2);
            // The data first in 0 went to 5, then to 2; 2's went to 5.
            assert_eq!((db_of(0), db_of(2), db_of(5)), (2, 5, 0));
            assert_eq!(db_of(9), 9);
            swapped(2, 2);
            assert_eq!(db_of(0), 2);
            reset();
        }
    }
}

pub fn selected_db(ctx: &Context) -> i32 {
    unsafe { raw::RedisModule_GetSelectedDb.expect("GetSelectedDb")(ctx.ctx) }
}

/// Runs `f` with `db` selected, restoring the context's database afterwards.
pub fn in_db<R>(ctx: &Context, db: i32, f: impl FnOnce() -> R) -> R {
    let select = |id: i32| unsafe { raw::RedisModule_SelectDb.expect("SelectDb")(ctx.ctx, id) };
    let previous = selected_db(ctx);
    if previous != db {
        select(db);
    }
    let out = f();
    if previous != db {
        select(previous);
    }
    out
}

/// Longest single timer: Redis adds the delay to its microsecond clock, and a deadline near
/// i64::MAX ms would overflow there and fire at once, forever. A timer that fires early just
/// arms the next one.
const LONGEST_TIMER_MS: u64 = 24 * 60 * 60 * 1000;

/// The delay of a timer due at `due_at_ms`, at least 1 ms and at most a day.
pub fn timer_delay(due_at_ms: u64, now_ms: u64) -> Duration {
    Duration::from_millis(due_at_ms.saturating_sub(now_ms).clamp(1, LONGEST_TIMER_MS))
}

static DETACHED: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Keeps a context that outlives any command, for work that starts where Redis gives none
/// (arming a timer while a value loads).
pub fn keep_detached_context(ctx: &Context) {
    let detached = unsafe {
        raw::RedisModule_GetDetachedThreadSafeContext.expect("GetDetachedThreadSafeContext")(
            ctx.ctx,
        )
    };
    DETACHED.store(detached, Ordering::Relaxed);
}

/// The context kept by [`keep_detached_context`]; main thread only.
pub fn detached_context() -> Option<Context> {
    let ctx = DETACHED.load(Ordering::Relaxed);
    (!ctx.is_null()).then(|| Context::new(ctx))
}
