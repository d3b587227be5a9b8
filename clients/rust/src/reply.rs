//! `SECKILL.TRY`'s reply as the client libraries give it.

use crate::error::{Error, Result};
use crate::protocol::{ENDED, NOT_ADMITTED, NOT_STARTED, OVER_LIMIT, SOLD_OUT};

/// What `SECKILL.TRY` replies, for the whole sale: the codes are the command's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryReply {
    /// Bought (held, with HOLD); `remaining` units are left in the buyer's partition.
    Bought { remaining: u64 },
    /// No partition has `qty` units for this buyer: -1.
    SoldOut,
    /// The user would go over LIMIT: -2.
    OverLimit,
    /// Before START: -3.
    NotStarted,
    /// At or after END: -4.
    Ended,
    /// A sale with a waiting room, and the user is not admitted: -6.
    NotAdmitted,
}

impl TryReply {
    /// The integer `SECKILL.TRY` replies for this outcome.
    pub fn code(self) -> i64 {
        match self {
            TryReply::Bought { remaining } => remaining as i64,
            TryReply::SoldOut => SOLD_OUT,
            TryReply::OverLimit => OVER_LIMIT,
            TryReply::NotStarted => NOT_STARTED,
            TryReply::Ended => ENDED,
            TryReply::NotAdmitted => NOT_ADMITTED,
        }
    }

    pub(crate) fn from_code(code: i64) -> Result<TryReply> {
        Ok(match code {
            0.. => TryReply::Bought {
                remaining: code as u64,
            },
            SOLD_OUT => TryReply::SoldOut,
            OVER_LIMIT => TryReply::OverLimit,
            NOT_STARTED => TryReply::NotStarted,
            ENDED => TryReply::Ended,
            NOT_ADMITTED => TryReply::NotAdmitted,
            other => {
                return Err(Error::Redis(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "SECKILL.TRY replied an unknown code",
                    other.to_string(),
                ))));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_codes_are_the_commands() {
        for code in [7, 0, -1, -2, -3, -4, -6] {
            assert_eq!(TryReply::from_code(code).unwrap().code(), code);
        }
        assert!(TryReply::from_code(-5).is_err());
        assert!(TryReply::from_code(-7).is_err());
    }
}
