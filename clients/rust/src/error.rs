//! The client's errors, typed by what a caller does about them.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// No sale of this name: its manifest (or one of its partitions) is missing.
    NoSale(String),
    /// `create` found a sale of this name already.
    SaleExists(String),
    /// The server refused an argument (`ERR ... must be ...`, a qty past LIMIT, ...).
    InvalidArgument(String),
    /// The manifest exists but cannot be read as a partitioned sale.
    BadManifest(String),
    /// A purchase kept finding its partition drained by others while it borrowed stock for
    /// it, more times than the client allows; nothing was bought.
    Contended { borrows: u32 },
    /// A purchase or a cancel got no definite answer before the retry deadline (the server
    /// was unreachable, busy past the timeout, or electing a master all along): it may or may
    /// not have happened. Sending it again with `attempt_id` is safe (it changes nothing if
    /// it did happen); `bought` tells what the buyer owns now.
    OutcomeUnknown {
        attempt_id: String,
        last_error: redis::RedisError,
    },
    /// The master applied the write (`reply`: a purchase's units left, a cancel's units
    /// returned, 1 for a confirm, 0 for OK) but no replica acknowledged it within the handle's
    /// acknowledgement timeout (see [`crate::Durability`]), so a failover now could take it
    /// back: an unknown outcome. Tell the buyer "confirming", not "bought". Sending it again
    /// with `attempt_id` answers the same and waits again; `bought` tells what the buyer owns.
    /// `attempt_id` is `None` for a write without one (a confirm, a restock, a sale made).
    NotReplicated {
        reply: i64,
        attempt_id: Option<String>,
    },
    /// A purchase or a cancel none of whose sends reached a server before the retry deadline
    /// (every connection was refused, or no cluster connection to its node existed): it did
    /// not happen. Tell the buyer "not bought, try again"; `last_error` says what failed.
    Unavailable {
        attempt_id: String,
        last_error: redis::RedisError,
    },
    /// The server has no seckill module loaded: `redis-server --loadmodule .../libseckill.so`.
    ModuleMissing,
    /// The server's seckill module is older than this client needs
    /// ([`crate::protocol::MIN_MODULE_VERSION`]); `found` is its `INFO seckill` version
    /// (major * 10 000 + minor * 100 + patch).
    ModuleTooOld { found: i64 },
    /// CONFIRM on a sale made without holds, where nothing is ever held.
    NoHolds,
    /// `join`, `position` or `admit` on a sale made without a waiting room (QUEUE).
    NoQueue(String),
    /// `hold` was not granted the lock within its wait; `reason` says why (another holder
    /// kept it, no replica acknowledged the grant, or the server did not answer). Nothing is
    /// left held.
    LockTimeout { name: String, reason: String },
    /// The guard's lease is lost, or may be: the server gave the lock up or to another holder
    /// (`LOCK.EXTEND` answered 0), or no renewal succeeded before the lease's local deadline.
    /// Stop before the next side effect; a fenced write of this holder's would be refused.
    LockLost { name: String, reason: String },
    /// The key holds something else than what the call works on (a string, a list, ...):
    /// Redis's `WRONGTYPE`. (A one-key sale opened as a partitioned one is [`Error::BadManifest`].)
    WrongType(String),
    /// Anything else from the connection or the server (I/O, cluster down, ...).
    Redis(redis::RedisError),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Whether the call may or may not have taken effect for good: [`Error::OutcomeUnknown`]
    /// and [`Error::NotReplicated`] (ask `bought`, or send it again under its attempt id).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(
            self,
            Error::OutcomeUnknown { .. } | Error::NotReplicated { .. }
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSale(name) => write!(f, "no sale named {name:?}"),
            Error::SaleExists(name) => write!(f, "a sale named {name:?} already exists"),
            Error::InvalidArgument(message) => write!(f, "invalid argument: {message}"),
            Error::BadManifest(why) => write!(f, "bad sale manifest: {why}"),
            Error::WrongType(detail) => write!(f, "wrong type of key: {detail}"),
            Error::Contended { borrows } => write!(
                f,
                "the purchase borrowed stock {borrows} times and others bought it each time"
            ),
            Error::OutcomeUnknown {
                attempt_id,
                last_error,
            } => write!(
                f,
                "no answer for attempt {attempt_id} before the deadline (last: {last_error}); \
                 send it again with the same id, or ask bought"
            ),
            Error::NotReplicated { reply, attempt_id } => {
                write!(
                    f,
                    "applied by the master (reply {reply}) but not acknowledged by a replica in time"
                )?;
                match attempt_id {
                    Some(id) => write!(f, "; send attempt {id} again, or ask bought"),
                    None => Ok(()),
                }
            }
            Error::Unavailable {
                attempt_id,
                last_error,
            } => write!(
                f,
                "attempt {attempt_id} was never sent before the deadline (last: {last_error}); \
                 it did not happen: try again"
            ),
            Error::ModuleMissing => write!(
                f,
                "the server has no seckill module: start it with --loadmodule .../libseckill.so"
            ),
            Error::ModuleTooOld { found } => write!(
                f,
                "the server's seckill module is version {found}, this client needs {} or later: \
                 load a newer libseckill.so",
                crate::protocol::MIN_MODULE_VERSION
            ),
            Error::NoHolds => write!(f, "the sale has no holds to confirm (made without HOLD)"),
            Error::NoQueue(detail) => write!(f, "{detail}"),
            Error::LockTimeout { name, reason } => write!(f, "lock {name:?} not granted: {reason}"),
            Error::LockLost { name, reason } => write!(f, "lock {name:?} lost: {reason}"),
            Error::Redis(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e)
            | Error::OutcomeUnknown { last_error: e, .. }
            | Error::Unavailable { last_error: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        // A pipeline's failure (the lock's calls are pipelines) carries its command's error,
        // whose detail the failure itself does not.
        let first = e.clone().into_server_errors().and_then(|errors| {
            let (_, error) = errors.first()?;
            Some((error.code().to_string(), error.details()?.to_string()))
        });
        let (code, detail) = match first {
            Some((code, detail)) => (Some(code), detail),
            None => (
                e.code().map(String::from),
                e.detail().unwrap_or_default().to_string(),
            ),
        };
        match code.as_deref() {
            Some("NOSALE") => Error::NoSale(detail),
            Some("WRONGTYPE") => Error::WrongType(detail),
            Some("ERR") if detail.starts_with("a sale already exists") => Error::SaleExists(detail),
            Some("ERR") if detail.starts_with("the sale has no holds") => Error::NoHolds,
            Some("ERR") if detail.starts_with("the sale has no waiting room") => {
                Error::NoQueue(detail)
            }
            Some("ERR") if detail.starts_with("unknown command") && names_module(&detail) => {
                Error::ModuleMissing
            }
            // The module's argument errors all say what must hold.
            Some("ERR") if is_argument_error(&detail) => Error::InvalidArgument(detail),
            _ => Error::Redis(e),
        }
    }
}

/// Whether an unknown command is one of the module's (a sale's or a lock's).
fn names_module(detail: &str) -> bool {
    let detail = detail.to_ascii_lowercase();
    detail.contains("seckill.") || detail.contains("lock.")
}

fn is_argument_error(detail: &str) -> bool {
    [
        " must ",
        "unknown option",
        "needs a value",
        "syntax error",
        "go together",
        "wrong number of arguments",
        "already used",
        "already lent",
        "already absorbed",
    ]
    .iter()
    .any(|marker| detail.contains(marker))
}

impl From<redis::ParsingError> for Error {
    fn from(e: redis::ParsingError) -> Error {
        Error::Redis(e.into())
    }
}
