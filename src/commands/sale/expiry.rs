//! The sale's timer (hold expiries, waiting-room steps): armed after every change, followed
//! across RENAME, MOVE and COPY, and what it does when it fires (a master expires the due
//! holds and steps the room; a replica only looks again later, as its master's `_REPLAY`
//! does both).

use super::change::{Origin, mutate};
use crate::commands::Args;
use crate::context::clock::now_ms;
use crate::context::keyspace::{in_db, selected_db, writable_value};
use crate::context::timer::Fired;
use crate::types::sale::{SALE_TYPE, SaleValue};
use redis_module::{Context, ContextFlags, NotifyEvent, RedisString};

/// How often a replica looks at its sales' holds again: it never expires them itself, but it
/// must keep a timer so that it does once promoted.
const REPLICA_RECHECK_MS: u64 = 1_000;

pub(super) fn arm_for_holds(ctx: &Context, key_name: &RedisString, value: &mut SaleValue) {
    let due = value.sale.next_timer_ms();
    value.arm_expiry_timer(ctx, selected_db(ctx), key_name.as_slice(), due);
}

/// RENAME, MOVE and COPY put a sale under a name its timer does not know: arm one there, so
/// its holds keep expiring even if nobody writes to it again.
pub fn on_key_moved(ctx: &Context, _: NotifyEvent, event: &str, key: &[u8]) {
    if !matches!(event, "rename_to" | "move_to" | "copy_to") {
        return;
    }
    let key_name = ctx.create_string(key);
    let key = ctx.open_key_writable(&key_name);
    if let Ok(Some(value)) = writable_value::<SaleValue>(&key, &SALE_TYPE) {
        arm_for_holds(ctx, &key_name, value);
    }
}

/// What a sale's expiry timer runs (registered with `types::sale::on_holds_due` at load).
pub fn on_expiry_timer(ctx: &Context, fired: Fired) {
    let home = &fired.home;
    in_db(ctx, home.db(), || {
        let key_name = ctx.create_string(home.key.as_slice());
        {
            let key = ctx.open_key_writable(&key_name);
            let Ok(Some(value)) = writable_value::<SaleValue>(&key, &SALE_TYPE) else {
                return;
            };
            value.expiry_timer_fired(&fired);
            // A replica never expires holds on its own: its master's _REPLAY does.
            if !ctx.get_flags().contains(ContextFlags::MASTER) {
                if value.sale.next_timer_ms().is_some() {
                    let recheck = now_ms() + REPLICA_RECHECK_MS;
                    value.arm_expiry_timer(ctx, home.db(), &home.key, Some(recheck));
                }
                return;
            }
        }
        let none = Args::bytes(&[]);
        if let Err(e) = mutate(ctx, &key_name, b"EXPIRE", &none, now_ms(), Origin::Timer) {
            ctx.log_warning(&format!("seckill: expiring holds failed: {e}"));
        }
    });
}
