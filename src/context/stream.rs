//! A sale's event stream, written through the module stream API (`RM_StreamAdd`): no command
//! lookup and no XADD argv per purchase, field names created once. Nothing here replicates:
//! the sale's `SECKILL._REPLAY` carries the IDs the entries got and the length a trim left,
//! and a replica (or the AOF) writes the same entries with those IDs and trims to that length,
//! so both hold the same stream byte for byte.

use super::keyspace::{notify, signal_modified};
use super::strings::{StaticStrings, TempStrings};
use crate::logic::sale::EventKind;
use redis_module::{Context, RedisError, raw};
use std::os::raw::{c_int, c_longlong};
use std::ptr::null_mut;

/// The fields an entry can have, in the order they are written.
#[derive(Clone, Copy)]
pub enum Field {
    Event,
    User,
    Qty,
    Order,
    Remaining,
    Transfer,
    Peer,
}

/// Most fields an entry has.
pub const MAX_FIELDS: usize = 7;

const EVENT_KINDS: [EventKind; EventKind::ALL.len()] = EventKind::ALL;

/// The field names (in [`Field`] order), then the event kinds' names (in `EVENT_KINDS` order).
static WORDS: StaticStrings<{ MAX_FIELDS + EVENT_KINDS.len() }> = StaticStrings::new([
    "event",
    "user",
    "qty",
    "order",
    "remaining",
    "transfer",
    "peer",
    "purchase",
    "confirm",
    "cancel",
    "expire",
    "restock",
    "lend",
    "absorb",
    "admit",
    "draw",
    "lapse",
    "leave",
    "drop",
]);

pub enum Value<'a> {
    Bytes(&'a [u8]),
    Int(u64),
    /// The event's name, a string made once.
    Kind(EventKind),
}

/// The sale's stream key, open for writing; closed when dropped.
pub struct Stream<'c> {
    ctx: &'c Context,
    name: TempStrings,
    key: *mut raw::RedisModuleKey,
}

impl<'c> Stream<'c> {
    /// Opens `name`, refusing to go on when it holds something else than a stream: the change
    /// and its entry happen together or not at all.
    pub fn open(ctx: &'c Context, name: &[u8]) -> Result<Stream<'c>, RedisError> {
        let mut names = TempStrings::new(ctx);
        let name = names.bytes(name);
        let key = unsafe {
            raw::RedisModule_OpenKey.expect("OpenKey")(
                ctx.ctx,
                name,
                (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int,
            )
        }
        .cast::<raw::RedisModuleKey>();
        let stream = Stream {
            ctx,
            name: names,
            key,
        };
        let kind = unsafe { raw::RedisModule_KeyType.expect("KeyType")(stream.key) } as isize;
        if kind != raw::REDISMODULE_KEYTYPE_EMPTY && kind != raw::REDISMODULE_KEYTYPE_STREAM {
            return Err(RedisError::Str(
                "WRONGTYPE the sale's EVENTS key holds a value that is not a stream",
            ));
        }
        Ok(stream)
    }

    fn name(&self) -> *mut raw::RedisModuleString {
        self.name.all()[0]
    }

    /// Appends one entry, with the next ID (`None`) or a given one (a replica's), and
    /// returns its ID.
    pub fn add(
        &self,
        fields: &[(Field, Value)],
        id: Option<(u64, u64)>,
    ) -> Result<(u64, u64), &'static str> {
        assert!(fields.len() <= MAX_FIELDS, "more fields than an entry has");
        let mut values = TempStrings::new(self.ctx);
        let mut argv = [null_mut(); 2 * MAX_FIELDS];
        for (i, (field, value)) in fields.iter().enumerate() {
            argv[2 * i] = WORDS.get(*field as usize);
            argv[2 * i + 1] = match value {
                Value::Bytes(bytes) => values.bytes(bytes),
                Value::Int(n) => values.integer(*n),
                // EventKind::ALL lists the kinds in their declared order.
                Value::Kind(kind) => WORDS.get(MAX_FIELDS + *kind as usize),
            };
        }
        let (mut stream_id, flags) = match id {
            Some((ms, seq)) => (raw::RedisModuleStreamID { ms, seq }, 0),
            None => (
                raw::RedisModuleStreamID { ms: 0, seq: 0 },
                raw::REDISMODULE_STREAM_ADD_AUTOID as c_int,
            ),
        };
        let added = unsafe {
            raw::RedisModule_StreamAdd.expect("StreamAdd")(
                self.key,
                flags,
                &mut stream_id,
                argv.as_mut_ptr(),
                fields.len() as i64,
            )
        };
        if added != raw::REDISMODULE_OK as c_int {
            return Err("the stream refused the entry (an ID not above its last one)");
        }
        // The stream API leaves keyspace notifications to its caller; XADD sends this one.
        unsafe {
            signal_modified(self.ctx, self.name());
            notify(self.ctx, raw::NotifyEvent::STREAM, c"xadd", self.name());
        }
        Ok((stream_id.ms, stream_id.seq))
    }

    pub fn length(&self) -> u64 {
        (unsafe { raw::RedisModule_ValueLength.expect("ValueLength")(self.key) }) as u64
    }

    /// Trims to about `maxlen` entries, as `XADD MAXLEN ~` does: whole nodes only, so
    /// trimming costs O(1) amortized.
    pub fn trim_approx(&self, maxlen: u64) {
        self.trim(maxlen, raw::REDISMODULE_STREAM_TRIM_APPROX as c_int);
    }

    /// Trims to exactly `length` entries: on a stream equal to the master's, this removes the
    /// same nodes its approximate trim did.
    pub fn trim_exact(&self, length: u64) {
        self.trim(length, 0);
    }

    fn trim(&self, length: u64, flags: c_int) {
        if self.length() <= length {
            return;
        }
        let removed = unsafe {
            raw::RedisModule_StreamTrimByLength.expect("StreamTrimByLength")(
                self.key,
                flags,
                length as c_longlong,
            )
        };
        if removed > 0 {
            unsafe {
                signal_modified(self.ctx, self.name());
                notify(self.ctx, raw::NotifyEvent::STREAM, c"xtrim", self.name());
            }
        }
    }
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        unsafe { raw::RedisModule_CloseKey.expect("CloseKey")(self.key) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_the_fields_and_the_event_kinds() {
        let fields = [
            (Field::Event, "event"),
            (Field::User, "user"),
            (Field::Qty, "qty"),
            (Field::Order, "order"),
            (Field::Remaining, "remaining"),
            (Field::Transfer, "transfer"),
            (Field::Peer, "peer"),
        ];
        for (field, name) in fields {
            assert_eq!(WORDS.word(field as usize), name);
        }
        for (i, kind) in EVENT_KINDS.iter().enumerate() {
            assert_eq!(WORDS.word(MAX_FIELDS + i), kind.name());
            assert_eq!(*kind as usize, i, "ALL in declared order");
        }
    }
}
