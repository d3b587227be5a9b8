//! What `COMMAND DOCS` and `COMMAND INFO` say of each command (summary, since, complexity,
//! arguments, key specs), set through `RM_SetCommandInfo`, and the `seckill` ACL category on
//! servers that have one (Redis 7.2+, Valkey 8+). Every string is a static C literal, so
//! nothing here is allocated or freed; Redis copies what it keeps.

use redis_module::{Context, raw};
use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr::{null, null_mut};

#[derive(Clone, Copy)]
enum Kind {
    Key,
    Text,
    Integer,
    UnixTime,
    Token,
    Block,
}

/// One argument as `COMMAND DOCS` lists it.
#[derive(Clone, Copy)]
struct Arg {
    name: &'static CStr,
    kind: Kind,
    token: Option<&'static CStr>,
    optional: bool,
    subargs: &'static [Arg],
}

const fn arg(name: &'static CStr, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        subargs: &[],
    }
}

/// `TOKEN value`.
const fn tokened(token: &'static CStr, name: &'static CStr, kind: Kind) -> Arg {
    Arg {
        token: Some(token),
        ..arg(name, kind)
    }
}

/// `TOKEN value`, optional.
const fn option(token: &'static CStr, name: &'static CStr, kind: Kind) -> Arg {
    optional(tokened(token, name, kind))
}

/// A bare optional word.
const fn flag(token: &'static CStr) -> Arg {
    option(token, token, Kind::Token)
}

const fn optional(mut a: Arg) -> Arg {
    a.optional = true;
    a
}

const KEY: Arg = arg(c"key", Kind::Key);
const USER: Arg = arg(c"user", Kind::Text);
const QTY: Arg = optional(arg(c"qty", Kind::Integer));
const TRANSFER_ID: Arg = arg(c"id", Kind::Text);
const UNITS: Arg = arg(c"n", Kind::Integer);

/// How a command touches its keys.
#[derive(Clone, Copy)]
enum Access {
    Read,
    /// Changes a value in place (also creates it, as INIT and ACQUIRE do).
    Write,
}

struct Doc {
    name: &'static CStr,
    summary: &'static CStr,
    complexity: &'static CStr,
    since: &'static CStr,
    access: Access,
    args: &'static [Arg],
}

const DOCS: &[Doc] = &[
    Doc {
        name: c"seckill.init",
        summary: c"Creates (or with REPLACE resets) a flash sale of `stock` units with a per-user LIMIT, optional holds awaiting confirmation, a sale window and an event stream.",
        complexity: c"O(1), O(N) with REPLACE where N is the old sale's buyers",
        since: c"0.1.0",
        access: Access::Write,
        args: &[
            KEY,
            arg(c"stock", Kind::Integer),
            option(c"LIMIT", c"limit", Kind::Integer),
            option(c"HOLD", c"hold_ms", Kind::Integer),
            option(c"START", c"start_unix_ms", Kind::UnixTime),
            option(c"END", c"end_unix_ms", Kind::UnixTime),
            Arg {
                name: c"events",
                kind: Kind::Block,
                token: None,
                optional: true,
                subargs: &[
                    // Key spec 1: the stream, found after the EVENTS keyword.
                    tokened(c"EVENTS", c"stream", Kind::Key),
                    option(c"MAXLEN", c"maxlen", Kind::Integer),
                ],
            },
            Arg {
                name: c"partition",
                kind: Kind::Block,
                token: None,
                optional: true,
                subargs: &[
                    tokened(c"PARTITION", c"index", Kind::Integer),
                    tokened(c"PARTITIONS", c"count", Kind::Integer),
                    tokened(c"MANIFEST", c"manifest", Kind::Text),
                ],
            },
            flag(c"REPLACE"),
        ],
    },
    Doc {
        name: c"seckill.try",
        summary: c"Buys `qty` units (default 1) for `user` in one atomic step: checks sold out, window and LIMIT, takes the stock, records the buyer. Replies the units left, or -1 sold out, -2 over limit, -3 not started, -4 ended, -5 (a partition only) drained but not sealed.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Write,
        args: &[KEY, USER, QTY],
    },
    Doc {
        name: c"seckill.info",
        summary: c"Returns a sale's totals and settings.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Read,
        args: &[KEY],
    },
    Doc {
        name: c"seckill.bought",
        summary: c"Returns the units `user` owns in a sale (held or final).",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Read,
        args: &[KEY, USER],
    },
    Doc {
        name: c"seckill.confirm",
        summary: c"Makes a user's held units final. Replies 1, or 0 if nothing was held.",
        complexity: c"O(1)",
        since: c"0.2.0",
        access: Access::Write,
        args: &[KEY, USER],
    },
    Doc {
        name: c"seckill.cancel",
        summary: c"Returns `qty` of a user's units (all without qty) to stock. Replies the units returned.",
        complexity: c"O(1)",
        since: c"0.2.0",
        access: Access::Write,
        args: &[KEY, USER, QTY],
    },
    Doc {
        name: c"seckill.restock",
        summary: c"Adds units to a sale's stock. Replies the units left.",
        complexity: c"O(1)",
        since: c"0.2.0",
        access: Access::Write,
        args: &[KEY, UNITS],
    },
    Doc {
        name: c"seckill.buyers",
        summary: c"Iterates over a sale's buyers: a cursor, then user, units and state of each.",
        complexity: c"O(COUNT)",
        since: c"0.2.0",
        access: Access::Read,
        args: &[
            KEY,
            arg(c"cursor", Kind::Integer),
            option(c"COUNT", c"count", Kind::Integer),
        ],
    },
    Doc {
        name: c"seckill.lend",
        summary: c"Moves `n` units of remaining stock out of this sale as transfer `id` to sale `dst` (repeating it changes nothing). Replies the units lent.",
        complexity: c"O(log T) where T is the pending transfers",
        since: c"0.3.0",
        access: Access::Write,
        args: &[
            KEY,
            TRANSFER_ID,
            UNITS,
            tokened(c"TO", c"dst", Kind::Text),
        ],
    },
    Doc {
        name: c"seckill.absorb",
        summary: c"Adds the `n` units of transfer `id` from sale `src` to this sale's remaining stock, once. Replies 1, or 0 if already absorbed.",
        complexity: c"O(log T) where T is the transfers",
        since: c"0.3.0",
        access: Access::Write,
        args: &[
            KEY,
            TRANSFER_ID,
            UNITS,
            tokened(c"FROM", c"src", Kind::Text),
        ],
    },
    Doc {
        name: c"seckill.settle",
        summary: c"Marks a lent transfer as delivered. Replies 1, or 0 if it already was.",
        complexity: c"O(log T) where T is the transfers",
        since: c"0.3.0",
        access: Access::Write,
        args: &[KEY, TRANSFER_ID],
    },
    Doc {
        name: c"seckill.transfers",
        summary: c"Lists a sale's lent transfers not yet settled: id, units, peer, age in ms.",
        complexity: c"O(T) where T is the pending transfers",
        since: c"0.3.0",
        access: Access::Read,
        args: &[KEY],
    },
    Doc {
        name: c"seckill.seal",
        summary: c"Marks a drained partition sold out for `ms`, or until stock comes back. Replies 1, or 0 if it has stock.",
        complexity: c"O(1)",
        since: c"0.5.0",
        access: Access::Write,
        args: &[KEY, arg(c"ms", Kind::Integer)],
    },
    Doc {
        name: c"lock.acquire",
        summary: c"Takes the lock for `token` for `ttl_ms` (or renews it for its holder), waiting up to WAIT ms in the server. Replies the fencing token, or nil.",
        complexity: c"O(1), O(W) in waiters to queue",
        since: c"0.1.0",
        access: Access::Write,
        args: &[
            KEY,
            arg(c"token", Kind::Text),
            arg(c"ttl_ms", Kind::Integer),
            option(c"WAIT", c"timeout_ms", Kind::Integer),
        ],
    },
    Doc {
        name: c"lock.release",
        summary: c"Releases the lock if `token` holds it, handing it to the first waiter. Replies 1, or 0 if another holds it.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Write,
        args: &[KEY, arg(c"token", Kind::Text)],
    },
    Doc {
        name: c"lock.extend",
        summary: c"Sets a new TTL if `token` holds the lock. Replies 1, or 0.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Write,
        args: &[KEY, arg(c"token", Kind::Text), arg(c"ttl_ms", Kind::Integer)],
    },
    Doc {
        name: c"lock.info",
        summary: c"Returns a lock's owner, TTL, last fence and waiters.",
        complexity: c"O(1)",
        since: c"0.1.0",
        access: Access::Read,
        args: &[KEY],
    },
];

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
fn raw_args(
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
pub fn describe(ctx: &Context, category: bool) -> Result<(), String> {
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
    for doc in DOCS {
        let command = unsafe { get(ctx.ctx, doc.name.as_ptr()) };
        if command.is_null() {
            return Err(format!("{:?} is not registered", doc.name));
        }
        let mut specs = vec![key_spec(key_flags(doc.access), None)];
        if doc.name == c"seckill.init" {
            // The stream INIT names: ACL key patterns and cluster slot checks cover it.
            specs.push(key_spec(
                raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INSERT,
                Some(c"EVENTS"),
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
            // Arity stays the commands' own check, with the built-ins' message.
            arity: 0,
            key_specs: specs.as_mut_ptr(),
            args,
        };
        if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot describe {:?}", doc.name));
        }
    }
    if category {
        let set = unsafe { raw::RedisModule_SetCommandACLCategories }
            .ok_or("no RM_SetCommandACLCategories")?;
        for name in DOCS.iter().map(|d| d.name) {
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
    fn every_argument_tree_is_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for doc in DOCS {
            assert!(seen.insert(doc.name), "{:?} twice", doc.name);
            assert!(matches!(doc.args.first().map(|a| a.kind), Some(Kind::Key)));
            let mut keep = Vec::new();
            let mut keys = 0;
            raw_args(doc.args, &mut keys, &mut keep);
            let want = if doc.name == c"seckill.init" { 2 } else { 1 };
            assert_eq!(keys, want, "{:?}: one key spec per key argument", doc.name);
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
