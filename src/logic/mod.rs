//! Pure state machines: no Redis types, no clock, no I/O. Unit-tested on their own.

pub mod alarm;
pub mod buyers;
pub mod escrow;
pub mod lock;
pub mod replication;
pub mod room;
pub mod sale;
