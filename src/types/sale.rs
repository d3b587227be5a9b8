//! A sale key's value: the core `Sale` and the one timer that expires its holds, with its
//! Redis type `seckill-S` and the type's callbacks.

use super::{NO_METHODS, boxed, digest_bytes, emit_restore, load_with, value};
use crate::context::detached_context;
use crate::context::strings::string_bytes;
use crate::context::timer::{KeyTimer, OnFire};
use crate::logic::sale::Sale;
use crate::persist::encoding::{self, SALE_VERSION};
use crate::stats;
use redis_module::key::RedisKeyWritable;
use redis_module::native_types::RedisType;
use redis_module::{Context, RedisError, raw};
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

/// What a sale key holds: the core state plus its hold-expiry timer.
pub struct SaleValue {
    pub sale: Sale,
    timer: KeyTimer,
}

/// What a sale's expiry timer runs when it fires: the command layer's (it expires the holds,
/// writes the stream and replicates), registered once at module load, so that a sale loaded
/// from RDB or RESTORE, where no command runs, arms its timer without this layer calling up.
static ON_HOLDS_DUE: OnceLock<OnFire> = OnceLock::new();

/// Registers [`ON_HOLDS_DUE`]; the module's init calls it before any value can load.
pub fn on_holds_due(on_fire: OnFire) {
    let _ = ON_HOLDS_DUE.set(on_fire);
}

impl SaleValue {
    pub fn new(sale: Sale) -> SaleValue {
        SaleValue {
            sale,
            timer: KeyTimer::default(),
        }
    }

    /// The persistent part only (COPY): the copy's timer is armed by the `copy_to` event.
    pub fn copy_state(&self) -> SaleValue {
        SaleValue::new(self.sale.clone())
    }

    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<SaleValue>() - std::mem::size_of::<Sale>() + self.sale.memory_bytes()
    }

    /// Keeps the sale's one expiry timer due no later than `due` (`None`: stops it).
    pub fn arm_expiry_timer(&mut self, ctx: &Context, db: i32, key: &[u8], due: Option<u64>) {
        let on_fire = *ON_HOLDS_DUE
            .get()
            .expect("the module's init registers the hold expiry");
        self.timer.set(ctx, db, key, due, on_fire);
    }

    /// Called by a firing expiry timer: whether it is this sale's current one (see
    /// [`KeyTimer::fired`]).
    pub fn expiry_timer_fired(&mut self, fired: &crate::context::timer::Fired) -> bool {
        self.timer.fired(fired)
    }
}

pub static SALE_TYPE: RedisType = RedisType::new(
    "seckill-S",
    SALE_VERSION as i32,
    raw::RedisModuleTypeMethods {
        rdb_load: Some(sale_rdb_load),
        rdb_save: Some(sale_rdb_save),
        aof_rewrite: Some(sale_aof_rewrite),
        mem_usage: Some(sale_mem_usage),
        digest: Some(sale_digest),
        free: Some(sale_free),
        copy: Some(sale_copy),
        ..NO_METHODS
    },
);

/// Stores a sale at an open key (replacing what is there) and counts it.
pub fn set_sale(key: &RedisKeyWritable, value: SaleValue) -> Result<(), RedisError> {
    key.set_value(&SALE_TYPE, value)?;
    stats::SALES.up();
    Ok(())
}

fn decode_sale_value(bytes: &[u8], version: u32) -> Result<SaleValue, encoding::DecodeError> {
    encoding::decode_sale(bytes, version).map(SaleValue::new)
}

unsafe extern "C" fn sale_rdb_load(rdb: *mut raw::RedisModuleIO, version: c_int) -> *mut c_void {
    let ptr = unsafe { load_with(rdb, version, "sale", decode_sale_value, &stats::SALES) };
    if !ptr.is_null() {
        // No command runs for a loaded value (RDB, DEBUG RELOAD, RESTORE, full sync), so its
        // holds need their expiry timer armed here.
        let value = unsafe { &mut *ptr.cast::<SaleValue>() };
        if value.sale.next_expiry().is_some()
            && let Some(ctx) = detached_context()
        {
            let name = unsafe { raw::RedisModule_GetKeyNameFromIO.expect("GetKeyNameFromIO")(rdb) };
            let db = unsafe { raw::RedisModule_GetDbIdFromIO.expect("GetDbIdFromIO")(rdb) };
            if !name.is_null() && db >= 0 {
                let key = unsafe { string_bytes(name.cast_mut()) };
                let due = value.sale.next_expiry();
                value.arm_expiry_timer(&ctx, db, key, due);
            }
        }
    }
    ptr
}

unsafe extern "C" fn sale_rdb_save(rdb: *mut raw::RedisModuleIO, ptr: *mut c_void) {
    raw::save_slice(
        rdb,
        &encoding::encode_sale(&unsafe { value::<SaleValue>(ptr) }.sale),
    );
}

unsafe extern "C" fn sale_aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    ptr: *mut c_void,
) {
    let payload = encoding::encode_sale(&unsafe { value::<SaleValue>(ptr) }.sale);
    unsafe { emit_restore(aof, c"SECKILL._RESTORE", key, SALE_VERSION, &payload) };
}

unsafe extern "C" fn sale_free(ptr: *mut c_void) {
    drop(unsafe { Box::from_raw(ptr.cast::<SaleValue>()) });
    stats::SALES.down();
}

unsafe extern "C" fn sale_mem_usage(ptr: *const c_void) -> usize {
    unsafe { value::<SaleValue>(ptr) }.memory_bytes()
}

unsafe extern "C" fn sale_digest(md: *mut raw::RedisModuleDigest, ptr: *mut c_void) {
    unsafe { digest_bytes(md, &encoding::encode_sale(&value::<SaleValue>(ptr).sale)) };
}

unsafe extern "C" fn sale_copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    ptr: *const c_void,
) -> *mut c_void {
    boxed(
        unsafe { value::<SaleValue>(ptr) }.copy_state(),
        &stats::SALES,
    )
}
