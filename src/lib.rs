//! seckill: a Redis module for flash sales and distributed locks that are correct by
//! construction. `core` is pure logic, `commands` the thin Redis layer, `persist` the data
//! types and their encodings.

pub mod alloc;
pub mod args;
pub mod blocking;
pub mod commands;
pub mod core;
pub mod persist;
pub mod stats;

pub mod build_info {
    include!(concat!(env!("OUT_DIR"), "/build_info.rs"));
}

use commands::{guarded, lock, sale};
use persist::{LOCK_TYPE, SALE_TYPE};
use redis_module::{Context, InfoContext, RedisResult, RedisString, Status, redis_module};

macro_rules! guarded_commands {
    ($($wrapper:ident => $body:path),* $(,)?) => {
        $(
            fn $wrapper(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
                guarded(ctx, args, $body)
            }
        )*
    };
}

guarded_commands! {
    seckill_init => sale::init,
    seckill_try => sale::try_buy,
    seckill_info => sale::info,
    seckill_bought => sale::bought,
    seckill_restore => sale::restore,
    lock_acquire => lock::acquire,
    lock_release => lock::release,
    lock_extend => lock::extend,
    lock_info => lock::info,
    lock_restore => lock::restore,
}

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // Lets a corrupt or short RDB payload fail the load (RESTORE replies an error) instead
    // of Redis exiting.
    ctx.set_module_options(redis_module::raw::ModuleOptions::HANDLE_IO_ERRORS);
    Status::Ok
}

fn info(ctx: &InfoContext, _for_crash_report: bool) {
    // An empty section name makes Redis use the module's own, so `INFO seckill` shows it
    // and every field is prefixed `seckill_`.
    let section = ctx
        .builder()
        .add_section("")
        .field("version", i64::from(build_info::MODULE_VERSION))
        .and_then(|s| s.field("git_revision", build_info::GIT_REVISION));
    let section = stats::fields()
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
    commands: [
        ["seckill.init", seckill_init, "write deny-oom fast", 1, 1, 1, ""],
        ["seckill.try", seckill_try, "write deny-oom fast", 1, 1, 1, ""],
        ["seckill.info", seckill_info, "readonly fast", 1, 1, 1, ""],
        ["seckill.bought", seckill_bought, "readonly fast", 1, 1, 1, ""],
        ["seckill._restore", seckill_restore, "write deny-oom", 1, 1, 1, ""],
        ["lock.acquire", lock_acquire, "write deny-oom", 1, 1, 1, ""],
        ["lock.release", lock_release, "write fast", 1, 1, 1, ""],
        ["lock.extend", lock_extend, "write fast", 1, 1, 1, ""],
        ["lock.info", lock_info, "readonly fast", 1, 1, 1, ""],
        ["lock._restore", lock_restore, "write deny-oom", 1, 1, 1, ""],
    ],
}
