//! seckill: a Redis module for flash sales and distributed locks that are correct by
//! construction. Layers point down only: `commands` (the thin Redis layer) uses `types` (each
//! stored value with its Redis type), which uses `persist` (encodings), `logic` (the pure
//! state machines, no Redis types) and `context` (the C-API wrappers).

pub mod alloc;
pub mod args;
pub mod commands;
pub mod config;
pub mod context;
pub mod logic;
pub mod persist;
pub mod slot;
pub mod stats;
pub mod types;

pub mod build_info {
    include!(concat!(env!("OUT_DIR"), "/build_info.rs"));
}

use commands::sale;
use redis_module::raw;
use redis_module::{Context, InfoContext, RedisResult, RedisString, Status, redis_module};
use std::os::raw::c_int;
use types::lock::LOCK_TYPE;
use types::sale::SALE_TYPE;

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // HANDLE_IO_ERRORS: a corrupt or short RDB payload fails the load (RESTORE replies an
    // error) instead of Redis exiting. NO_IMPLICIT_SIGNAL_MODIFIED: the commands signal
    // the keys they changed themselves (`context::keyspace::signal_modified`), so a refusal leaves
    // WATCH and client-side caches alone.
    ctx.set_module_options(
        redis_module::raw::ModuleOptions::HANDLE_IO_ERRORS
            | redis_module::raw::ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );
    context::keep_detached_context(ctx);
    context::clock::became_master();
    types::sale::on_holds_due(sale::on_expiry_timer);
    let swapdb = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_SWAPDB,
        dataver: 1,
    };
    let subscribed = unsafe {
        raw::RedisModule_SubscribeToServerEvent.expect("SubscribeToServerEvent")(
            ctx.ctx,
            swapdb,
            Some(on_swapdb),
        )
    };
    if subscribed != raw::REDISMODULE_OK as c_int {
        ctx.log_warning("seckill: cannot follow SWAPDB");
        return Status::Err;
    }
    let category = context::command_info::add_acl_category(ctx);
    let registered = commands::register(ctx)
        .and_then(|()| context::command_info::describe(ctx, category, commands::documented()));
    match registered {
        Ok(()) => Status::Ok,
        Err(e) => {
            ctx.log_warning(&format!("seckill: {e}"));
            Status::Err
        }
    }
}

/// SWAPDB exchanges two databases' keys: timers and waiters must follow their keys.
unsafe extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut std::os::raw::c_void,
) {
    let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
    context::keyspace::databases::swapped(info.dbnum_first, info.dbnum_second);
}

#[redis_module_macros::flush_event_handler]
fn on_flush(ctx: &Context, event: redis_module::server_events::FlushSubevent) {
    if event == redis_module::server_events::FlushSubevent::Ended {
        types::lock::release_orphaned_waiters(ctx);
    }
}

/// A promoted replica's fences start after the millisecond of its promotion
/// (`context::clock::fences_from_ms`).
#[redis_module_macros::role_changed_event_handler]
fn on_role_changed(_ctx: &Context, role: redis_module::server_events::ServerRole) {
    if role == redis_module::server_events::ServerRole::Primary {
        context::clock::became_master();
    }
}

fn info(ctx: &InfoContext, _for_crash_report: bool) {
    // An empty section name makes Redis use the module's own, so `INFO seckill` shows it
    // and every field is prefixed `seckill_`.
    let section = ctx
        .builder()
        .add_section("")
        .field("version", i64::from(build_info::MODULE_VERSION))
        .and_then(|s| s.field("git_revision", build_info::GIT_REVISION));
    let section = stats::fields(types::lock::waiting_clients())
        .into_iter()
        .fold(section, |s, (name, value)| {
            s.and_then(|s| s.field(name, value))
        });
    if let Err(e) = section
        .and_then(|s| s.build_section())
        .and_then(|b| b.build_info())
    {
        redis_module::logging::log_warning(format!("seckill: INFO section failed: {e}"));
    }
}

redis_module! {
    name: "seckill",
    version: build_info::MODULE_VERSION,
    allocator: (alloc::ModuleAlloc, alloc::ModuleAlloc),
    data_types: [SALE_TYPE, LOCK_TYPE],
    init: init,
    info: info,
    event_handlers: [
        [@GENERIC: sale::on_key_moved],
    ],
    configurations: [
        // The macro needs every kind listed for module arguments to work, even when empty.
        i64: [
            ["aof-chunk-bytes", &config::AOF_CHUNK_BYTES, config::DEFAULT_AOF_CHUNK_BYTES, 1024, 1 << 28, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["events-maxlen", &config::EVENTS_MAXLEN, 0, 0, i64::MAX, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
            ["max-user-bytes", &config::MAX_USER_BYTES, config::DEFAULT_MAX_USER_BYTES, 1, 1 << 20, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [
            ["fences", &config::FENCES, config::Fences::clock, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
        ],
        module_args_as_configuration: true,
    ]
}
