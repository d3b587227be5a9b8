//! The thin command layer: parse (`crate::args`), call the core, reply, replicate. This file
//! is the entry point every command goes through.

pub mod internal;
pub mod lock;
pub mod sale;

use crate::args::ArgError;
use crate::context::command_info::{Doc, create_command};
use crate::context::strings::string_bytes;
use redis_module::{Context, RedisError, RedisResult, RedisString, raw};
use std::ffi::CStr;
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

/// A command body: the key and the arguments after it.
pub type Handler = fn(&Context, &RedisString, &Args) -> RedisResult;

/// One command: its name, flags and handler, side by side with what `COMMAND DOCS` says of it.
/// Each is declared beside its handler; [`ALL`] lists them.
pub struct Command {
    pub name: &'static CStr,
    /// `RM_CreateCommand`'s flags.
    pub flags: &'static CStr,
    pub handler: Handler,
    /// `None` for the internal commands: no docs, and out of the `seckill` ACL category
    /// (`+@seckill` must not grant them).
    pub doc: Option<Doc>,
}

macro_rules! command_table {
    ($($command:path),* $(,)?) => {
        /// Every command the module registers, in order.
        pub const ALL: &[&Command] = &[$(&$command),*];

        /// Creates every command. Each gets a C entry point of its own that calls [`dispatch`]
        /// with its handler directly, so no call looks anything up.
        pub fn register(ctx: &Context) -> Result<(), String> {
            $({
                extern "C" fn entry(
                    ctx: *mut raw::RedisModuleCtx,
                    argv: *mut *mut raw::RedisModuleString,
                    argc: c_int,
                ) -> c_int {
                    unsafe { dispatch(ctx, argv, argc, $command.handler) }
                }
                create_command(ctx, $command.name, $command.flags, entry)?;
            })*
            Ok(())
        }
    };
}

command_table![
    sale::INIT,
    sale::TRY,
    sale::INFO,
    sale::BOUGHT,
    sale::CONFIRM,
    sale::CANCEL,
    sale::RESTOCK,
    sale::BUYERS,
    sale::LEND,
    sale::ABSORB,
    sale::SETTLE,
    sale::TRANSFERS,
    sale::SEAL,
    sale::JOIN,
    sale::POSITION,
    sale::ADMIT,
    sale::LEAVE,
    sale::RESTORE,
    sale::REPLAY,
    lock::ACQUIRE,
    lock::RELEASE,
    lock::EXTEND,
    lock::INFO,
    lock::RESTORE,
];

/// The public commands with their docs.
pub fn documented() -> impl Iterator<Item = (&'static CStr, &'static Doc)> + Clone {
    ALL.iter()
        .filter_map(|command| command.doc.as_ref().map(|doc| (command.name, doc)))
}

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
                for (record_id, arg) in inline.iter_mut().zip(rest) {
                    *record_id = unsafe { string_bytes(*arg) };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::command_info::{Kind, raw_args};

    #[test]
    fn every_command_once_and_every_argument_tree_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for command in ALL {
            assert!(seen.insert(command.name), "{:?} twice", command.name);
            let internal = command.name.to_bytes().contains(&b'_');
            assert_eq!(command.doc.is_none(), internal, "{:?}", command.name);
        }
        for (name, doc) in documented() {
            assert!(matches!(doc.args.first().map(|a| a.kind), Some(Kind::Key)));
            let mut keep = Vec::new();
            let mut keys = 0;
            raw_args(doc.args, &mut keys, &mut keep);
            let want = 1 + i32::from(doc.inserts_after.is_some());
            assert_eq!(keys, want, "{name:?}: one key spec per key argument");
            for a in doc.args {
                assert!(
                    !matches!(a.kind, Kind::Block) || !a.subargs.is_empty(),
                    "{:?}",
                    a.name
                );
            }
        }
    }
}
