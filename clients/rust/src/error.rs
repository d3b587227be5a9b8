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
    /// Anything else from the connection or the server (I/O, cluster down, WRONGTYPE, ...).
    Redis(redis::RedisError),
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSale(name) => write!(f, "no sale named {name:?}"),
            Error::SaleExists(name) => write!(f, "a sale named {name:?} already exists"),
            Error::InvalidArgument(message) => write!(f, "invalid argument: {message}"),
            Error::BadManifest(why) => write!(f, "bad sale manifest: {why}"),
            Error::Contended { borrows } => write!(
                f,
                "the purchase borrowed stock {borrows} times and others bought it each time"
            ),
            Error::Redis(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        let detail = e.detail().unwrap_or_default().to_string();
        match e.code() {
            Some("NOSALE") => Error::NoSale(detail),
            Some("ERR") if detail.starts_with("a sale already exists") => Error::SaleExists(detail),
            // The module's argument errors all say what must hold.
            Some("ERR") if is_argument_error(&detail) => {
                Error::InvalidArgument(format!("ERR {detail}"))
            }
            _ => Error::Redis(e),
        }
    }
}

fn is_argument_error(detail: &str) -> bool {
    [
        " must ",
        "unknown option",
        "needs a value",
        "syntax error",
        "go together",
        "wrong number of arguments",
    ]
    .iter()
    .any(|marker| detail.contains(marker))
}

impl From<redis::ParsingError> for Error {
    fn from(e: redis::ParsingError) -> Error {
        Error::Redis(e.into())
    }
}
