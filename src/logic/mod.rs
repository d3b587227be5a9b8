//! Pure state machines: no Redis types, no clock, no I/O. Unit-tested on their own.

pub mod alarm;
pub mod buyers;
pub mod escrow;
pub mod lock;
pub mod replication;
// The waiting room's core; its commands come next (#43).
#[allow(dead_code)]
pub mod room;
pub mod sale;
