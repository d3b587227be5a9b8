//! What `COMMAND DOCS` and `COMMAND INFO` say of each command (summary, since, complexity,
//! arguments, key specs), set through `RM_SetCommandInfo`; the `seckill` ACL category on
//! servers that have one (Redis 7.2+, Valkey 8+); and `RM_CreateCommand`. Every string is a
//! static C literal, so nothing here is allocated or freed; Redis copies what it keeps.

use redis_module::{Context, raw};
use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr::{null, null_mut};

#[derive(Clone, Copy)]
pub enum Kind {
    Key,
    Text,
    Integer,
    UnixTime,
    Token,
    Block,
}

/// One argument as `COMMAND DOCS` lists it.
#[derive(Clone, Copy)]
pub struct Arg {
    pub name: &'static CStr,
    pub kind: Kind,
    pub token: Option<&'static CStr>,
    pub optional: bool,
    pub subargs: &'static [Arg],
}

pub const fn arg(name: &'static CStr, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        subargs: &[],
    }
}

/// `TOKEN value`.
pub const fn tokened(token: &'static CStr, name: &'static CStr, kind: Kind) -> Arg {
    Arg {
        token: Some(token),
        ..arg(name, kind)
    }
}

/// `TOKEN value`, optional.
pub const fn option(token: &'static CStr, name: &'static CStr, kind: Kind) -> Arg {
    optional(tokened(token, name, kind))
}

/// A bare optional word.
pub const fn flag(token: &'static CStr) -> Arg {
    option(token, token, Kind::Token)
}

pub const fn optional(mut a: Arg) -> Arg {
    a.optional = true;
    a
}

/// The key at argv[1], which every command has.
pub const KEY: Arg = arg(c"key", Kind::Key);

/// How a command touches its keys.
#[derive(Clone, Copy)]
pub enum Access {
    Read,
    /// Changes a value in place (also creates it, as INIT and ACQUIRE do).
    Write,
}

/// What `COMMAND DOCS` and `COMMAND INFO` say of a public command.
pub struct Doc {
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub since: &'static CStr,
    /// How it touches the key at argv[1].
    pub access: Access,
    /// A second key, found after this keyword, that the command creates or appends to (INIT's
    /// EVENTS stream): ACL key patterns and cluster slot checks then cover it too.
    pub inserts_after: Option<&'static CStr>,
    pub args: &'static [Arg],
}

/// A command's C entry point, as `RM_CreateCommand` takes it.
pub type EntryPoint =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Creates command `name` with `flags`, its one key at argv[1].
pub fn create_command(
    ctx: &Context,
    name: &CStr,
    flags: &CStr,
    entry: EntryPoint,
) -> Result<(), String> {
    let created = unsafe {
        raw::RedisModule_CreateCommand.expect("CreateCommand")(
            ctx.ctx,
            name.as_ptr(),
            Some(entry),
            flags.as_ptr(),
            1,
            1,
            1,
        )
    };
    if created == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(format!("cannot register {name:?}"))
    }
}

fn arg_type(kind: Kind) -> raw::RedisModuleCommandArgType {
    match kind {
        Kind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
        Kind::Text => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
        Kind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
        Kind::UnixTime => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
        Kind::Token => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
        Kind::Block => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
    }
}

/// `args` as Redis reads them: null-terminated arrays, sub-arguments owned by `keep`.
pub fn raw_args(
    args: &[Arg],
    key_index: &mut c_int,
    keep: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut out: Vec<raw::RedisModuleCommandArg> = Vec::with_capacity(args.len() + 1);
    for a in args {
        let key_spec_index = if matches!(a.kind, Kind::Key) {
            *key_index += 1;
            *key_index - 1
        } else {
            -1
        };
        let subargs = if a.subargs.is_empty() {
            null_mut()
        } else {
            raw_args(a.subargs, key_index, keep)
        };
        out.push(raw::RedisModuleCommandArg {
            name: a.name.as_ptr(),
            type_: arg_type(a.kind),
            key_spec_index,
            token: a.token.map_or(null(), CStr::as_ptr),
            summary: null(),
            since: null(),
            flags: if a.optional {
                raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
            } else {
                0
            },
            deprecated_since: null(),
            subargs,
            display_text: null(),
        });
    }
    // SAFETY: an all-zero argument is the array's terminator.
    out.push(unsafe { std::mem::zeroed() });
    let ptr = out.as_mut_ptr();
    keep.push(out);
    ptr
}

/// Redis's arity for a command taking `args`: the words it needs at least, its name included;
/// negative when optional arguments may follow.
pub fn arity(args: &[Arg]) -> c_int {
    /// The words `args` need, and whether more may follow.
    fn needed(args: &[Arg]) -> (c_int, bool) {
        let mut words = 0;
        let mut more = false;
        for a in args {
            if a.optional {
                more = true;
                continue;
            }
            let (inner, inner_more) = match a.kind {
                Kind::Block => needed(a.subargs),
                Kind::Token => (0, false),
                _ => (1, false),
            };
            words += inner + c_int::from(a.token.is_some());
            more |= inner_more;
        }
        (words, more)
    }
    let (words, more) = needed(args);
    if more { -(words + 1) } else { words + 1 }
}

/// The key at argv[1], or the one after the keyword `keyword` (searched from argv[2]).
fn key_spec(flags: u32, keyword: Option<&'static CStr>) -> raw::RedisModuleCommandKeySpec {
    // SAFETY: all-zero is a valid key spec (no notes, invalid search); every field used is set.
    let mut spec: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    spec.flags = u64::from(flags);
    match keyword {
        None => {
            spec.begin_search_type =
                raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
            spec.bs.index.pos = 1;
        }
        Some(keyword) => {
            spec.begin_search_type =
                raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_KEYWORD;
            spec.bs.keyword.keyword = keyword.as_ptr();
            spec.bs.keyword.startfrom = 2;
        }
    }
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    spec.fk.range.lastkey = 0;
    spec.fk.range.keystep = 1;
    spec.fk.range.limit = 0;
    spec
}

fn key_flags(access: Access) -> u32 {
    match access {
        Access::Read => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        Access::Write => {
            raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_UPDATE
        }
    }
}

const CATEGORY: &CStr = c"seckill";

/// Adds the `seckill` ACL category where the server has the API; must run before the
/// commands are created. Returns whether it did.
pub fn add_acl_category(ctx: &Context) -> bool {
    let Some(add) = (unsafe { raw::RedisModule_AddACLCategory }) else {
        return false;
    };
    (unsafe { add(ctx.ctx, CATEGORY.as_ptr()) }) == raw::REDISMODULE_OK as c_int
}

/// Documents every public command and, with `category`, puts it in the `seckill` ACL category
/// (the internal commands stay out: `+@seckill` must not grant them). Servers without
/// `RM_SetCommandInfo` keep the legacy key range.
pub fn describe<'a>(
    ctx: &Context,
    category: bool,
    docs: impl Iterator<Item = (&'static CStr, &'a Doc)> + Clone,
) -> Result<(), String> {
    let get = unsafe { raw::RedisModule_GetCommand }.ok_or("no RM_GetCommand")?;
    let Some(set_info) = (unsafe { raw::RedisModule_SetCommandInfo }) else {
        return Ok(());
    };
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    for (name, doc) in docs.clone() {
        let command = unsafe { get(ctx.ctx, name.as_ptr()) };
        if command.is_null() {
            return Err(format!("{name:?} is not registered"));
        }
        let mut specs = vec![key_spec(key_flags(doc.access), None)];
        if let Some(keyword) = doc.inserts_after {
            specs.push(key_spec(
                raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INSERT,
                Some(keyword),
            ));
        }
        // SAFETY: the all-zero spec terminates the array.
        specs.push(unsafe { std::mem::zeroed() });
        let mut keep = Vec::new();
        let mut key_index = 0;
        let args = raw_args(doc.args, &mut key_index, &mut keep);
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: doc.summary.as_ptr(),
            complexity: doc.complexity.as_ptr(),
            since: doc.since.as_ptr(),
            history: null_mut(),
            tips: null(),
            // Redis then refuses a wrong count itself, with its own message, before the handler.
            arity: arity(doc.args),
            key_specs: specs.as_mut_ptr(),
            args,
        };
        if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot describe {name:?}"));
        }
    }
    if category {
        let set = unsafe { raw::RedisModule_SetCommandACLCategories }
            .ok_or("no RM_SetCommandACLCategories")?;
        for (name, _) in docs {
            let command = unsafe { get(ctx.ctx, name.as_ptr()) };
            if command.is_null()
                || unsafe { set(command, CATEGORY.as_ptr()) } != raw::REDISMODULE_OK as c_int
            {
                return Err(format!("cannot put {name:?} in the seckill ACL category"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arity_counts_required_words_and_goes_negative_with_options() {
        assert_eq!(arity(&[KEY]), 2);
        assert_eq!(arity(&[KEY, arg(c"user", Kind::Text)]), 3);
        assert_eq!(
            arity(&[
                KEY,
                arg(c"cursor", Kind::Integer),
                option(c"COUNT", c"n", Kind::Integer)
            ]),
            -3
        );
        assert_eq!(arity(&[KEY, flag(c"REPLACE")]), -2);
        // A required TOKEN value is two words; a required block counts what it needs.
        assert_eq!(arity(&[KEY, tokened(c"WAIT", c"ms", Kind::Integer)]), 4);
        const PAIR: [Arg; 2] = [arg(c"a", Kind::Integer), optional(arg(c"b", Kind::Integer))];
        let block = Arg {
            subargs: &PAIR,
            ..tokened(c"RANGE", c"range", Kind::Block)
        };
        assert_eq!(arity(&[KEY, block]), -4);
        assert_eq!(arity(&[KEY, optional(block)]), -2);
    }
}
