//! The module's global allocator: Redis' allocator once the module is loaded (so `used_memory`,
//! `maxmemory` and MEMORY USAGE see every buyer), the system allocator in unit tests, where no
//! Redis is there.
//!
//! The switch is safe because Redis fills `RedisModule_Alloc` in `RedisModule_Init`, before the
//! module allocates anything, and a process never goes from Redis back to no Redis.

use redis_module::alloc::RedisAlloc;
use redis_module::raw;
use std::alloc::{GlobalAlloc, Layout, System};

pub struct ModuleAlloc;

unsafe impl GlobalAlloc for ModuleAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if unsafe { raw::RedisModule_Alloc }.is_some() {
            unsafe { RedisAlloc.alloc(layout) }
        } else {
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if unsafe { raw::RedisModule_Free }.is_some() {
            unsafe { RedisAlloc.dealloc(ptr, layout) }
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }
}
