//! The arguments of the lock commands.

use super::{ArgError, ArgResult, MAX_MS, identifier, integer, options, unknown_option, value_of};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub token: &'a [u8],
    pub ttl_ms: u64,
    /// `Some(0)` waits without limit.
    pub wait_ms: Option<u64>,
}

/// `LOCK.ACQUIRE key token ttl_ms [WAIT timeout_ms]`
pub fn acquire<'a>(rest: &[&'a [u8]]) -> ArgResult<AcquireArgs<'a>> {
    let [token, ttl, options_rest @ ..] = rest else {
        return Err(ArgError::Arity);
    };
    let mut parsed = AcquireArgs {
        token: identifier(token, "token")?,
        ttl_ms: integer(ttl, "ttl_ms", 1, MAX_MS)?,
        wait_ms: None,
    };
    options(options_rest, |name, value| match name {
        "WAIT" => {
            parsed.wait_ms = Some(integer(
                value_of(name, value)?,
                "WAIT timeout_ms",
                0,
                MAX_MS,
            )?);
            Ok(true)
        }
        _ => Err(unknown_option(name.as_bytes())),
    })?;
    Ok(parsed)
}

/// `LOCK.RELEASE key token`
pub fn token_only<'a>(rest: &[&'a [u8]]) -> ArgResult<&'a [u8]> {
    match rest {
        [token] => identifier(token, "token"),
        _ => Err(ArgError::Arity),
    }
}

/// `LOCK.EXTEND key token ttl_ms`
pub fn extend<'a>(rest: &[&'a [u8]]) -> ArgResult<(&'a [u8], u64)> {
    match rest {
        [token, ttl] => Ok((
            identifier(token, "token")?,
            integer(ttl, "ttl_ms", 1, MAX_MS)?,
        )),
        _ => Err(ArgError::Arity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::fixtures::invalid;
    use crate::args::*;

    #[test]
    fn lock_commands() {
        assert_eq!(
            acquire(&[b"t", b"100"]),
            Ok(AcquireArgs {
                token: b"t",
                ttl_ms: 100,
                wait_ms: None
            })
        );
        assert_eq!(
            acquire(&[b"t", b"100", b"wait", b"0"]).map(|a| a.wait_ms),
            Ok(Some(0))
        );
        assert_eq!(acquire(&[b"t"]), Err(ArgError::Arity));
        assert_eq!(
            acquire(&[b"t", b"0"]),
            Err(invalid(
                "ERR ttl_ms must be an integer between 1 and 9223372036854775807"
            ))
        );
        assert_eq!(
            acquire(&[b"t", b"1", b"WAIT"]),
            Err(invalid("ERR WAIT needs a value"))
        );
        assert_eq!(
            acquire(&[b"t", b"1", b"WAIT", b"10", b"wait", b"20"]),
            Err(invalid("ERR syntax error"))
        );
        assert_eq!(
            buyers(&[b"0", b"COUNT", b"1", b"COUNT", b"2"]),
            Err(invalid("ERR syntax error"))
        );
        assert_eq!(
            acquire(&[b"t", b"1", b"NX"]),
            Err(invalid("ERR unknown option 'NX'"))
        );
        assert_eq!(
            acquire(&[b"", b"1"]),
            Err(invalid("ERR token must not be empty"))
        );
        assert_eq!(token_only(&[b"t"]), Ok(&b"t"[..]));
        assert_eq!(token_only(&[b"t", b"x"]), Err(ArgError::Arity));
        assert_eq!(extend(&[b"t", b"5"]), Ok((&b"t"[..], 5)));
        assert_eq!(extend(&[b"t"]), Err(ArgError::Arity));
        assert!(extend(&[b"t", b"-5"]).is_err());
    }
}
