//! Argument parsing for every command, on plain byte slices so it is unit-tested without Redis.
//! Each parser takes the arguments after the key.

use crate::core::sale::MAX_UNITS;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// Reply with Redis' standard wrong-arity error.
    Arity,
    /// Reply with this message (it starts with `ERR`).
    Invalid(String),
}

pub type ArgResult<T> = Result<T, ArgError>;

/// Parses a decimal integer as Redis does (no sign `+`, no spaces) within `min..=max`.
pub fn integer(raw: &[u8], what: &str, min: u64, max: u64) -> ArgResult<u64> {
    let out_of_range = || {
        ArgError::Invalid(format!(
            "ERR {what} must be an integer between {min} and {max}"
        ))
    };
    let text = std::str::from_utf8(raw).map_err(|_| out_of_range())?;
    if text.starts_with('+') || (text.len() > 1 && text.starts_with('0')) {
        return Err(out_of_range());
    }
    let value: u64 = text.parse().map_err(|_| out_of_range())?;
    if value < min || value > max {
        return Err(out_of_range());
    }
    Ok(value)
}

/// A non-empty, binary-safe identifier (user id, lock token).
pub fn identifier<'a>(raw: &'a [u8], what: &str) -> ArgResult<&'a [u8]> {
    if raw.is_empty() {
        return Err(ArgError::Invalid(format!("ERR {what} must not be empty")));
    }
    Ok(raw)
}

/// Walks `[NAME value] [FLAG]` options, case-insensitively; `on_option(name, next_value)`
/// returns whether it consumed the value.
fn options<'a>(
    rest: &'a [&'a [u8]],
    mut on_option: impl FnMut(&str, Option<&'a [u8]>) -> ArgResult<bool>,
) -> ArgResult<()> {
    let mut i = 0;
    while i < rest.len() {
        let name = std::str::from_utf8(rest[i])
            .map(str::to_ascii_uppercase)
            .map_err(|_| unknown_option(rest[i]))?;
        let consumed = on_option(&name, rest.get(i + 1).copied())?;
        i += if consumed { 2 } else { 1 };
    }
    Ok(())
}

fn value_of<'a>(name: &str, value: Option<&'a [u8]>) -> ArgResult<&'a [u8]> {
    value.ok_or_else(|| ArgError::Invalid(format!("ERR {name} needs a value")))
}

/// Client bytes as they may appear inside an error reply: printable ASCII as is, anything
/// else (NUL, CR, LF, non-UTF-8) as `\xNN`, at most 64 bytes of it.
pub fn printable(raw: &[u8]) -> String {
    let mut out = String::new();
    for &byte in raw.iter().take(64) {
        if byte.is_ascii_graphic() || byte == b' ' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    if raw.len() > 64 {
        out.push_str("...");
    }
    out
}

fn unknown_option(raw: &[u8]) -> ArgError {
    ArgError::Invalid(format!("ERR unknown option '{}'", printable(raw)))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitArgs {
    pub stock: u64,
    pub limit: u64,
    pub replace: bool,
}

/// `SECKILL.INIT key stock [LIMIT n] [REPLACE]`
pub fn init(rest: &[&[u8]]) -> ArgResult<InitArgs> {
    let (stock, options_rest) = rest.split_first().ok_or(ArgError::Arity)?;
    let mut parsed = InitArgs {
        stock: integer(stock, "stock", 0, MAX_UNITS)?,
        limit: 1,
        replace: false,
    };
    options(options_rest, |name, value| match name {
        "LIMIT" => {
            parsed.limit = integer(value_of(name, value)?, "LIMIT", 1, MAX_UNITS)?;
            Ok(true)
        }
        "REPLACE" => {
            parsed.replace = true;
            Ok(false)
        }
        _ => Err(unknown_option(name.as_bytes())),
    })?;
    Ok(parsed)
}

/// `SECKILL.TRY key user [qty]`: the quantity's range (1..=LIMIT) is checked by the sale,
/// which knows its LIMIT and names it in the error.
pub fn try_buy<'a>(rest: &[&'a [u8]]) -> ArgResult<(&'a [u8], u64)> {
    match rest {
        [user] => Ok((identifier(user, "user")?, 1)),
        [user, qty] => Ok((
            identifier(user, "user")?,
            integer(qty, "qty", 0, MAX_UNITS)
                .map_err(|_| ArgError::Invalid("ERR qty must be a positive integer".to_string()))?,
        )),
        _ => Err(ArgError::Arity),
    }
}

/// `SECKILL.BOUGHT key user`
pub fn user_only<'a>(rest: &[&'a [u8]]) -> ArgResult<&'a [u8]> {
    match rest {
        [user] => identifier(user, "user"),
        _ => Err(ArgError::Arity),
    }
}

/// Commands that take only the key.
pub fn key_only(rest: &[&[u8]]) -> ArgResult<()> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(ArgError::Arity)
    }
}

/// Longest TTL or wait accepted: about 292 million years, still an i64 of milliseconds.
pub const MAX_MS: u64 = i64::MAX as u64;

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

/// Internal restore commands: `key encoding_version payload`.
pub fn restore<'a>(rest: &[&'a [u8]]) -> ArgResult<(u32, &'a [u8])> {
    match rest {
        [version, payload] => Ok((
            integer(version, "encoding version", 1, u64::from(u32::MAX))? as u32,
            payload,
        )),
        _ => Err(ArgError::Arity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(message: &str) -> ArgError {
        ArgError::Invalid(message.to_string())
    }

    #[test]
    fn integer_accepts_range_and_rejects_everything_else() {
        assert_eq!(integer(b"0", "n", 0, 5), Ok(0));
        assert_eq!(integer(b"5", "n", 0, 5), Ok(5));
        assert_eq!(
            integer(b"9223372036854775807", "n", 0, MAX_UNITS),
            Ok(MAX_UNITS)
        );
        let err = invalid("ERR n must be an integer between 1 and 5");
        for bad in [
            &b"0"[..],
            b"6",
            b"-1",
            b"+1",
            b"01",
            b" 1",
            b"1 ",
            b"",
            b"1.5",
            b"abc",
            b"\xff",
            b"99999999999999999999999",
        ] {
            assert_eq!(integer(bad, "n", 1, 5), Err(err.clone()), "{bad:?}");
        }
        assert_eq!(
            integer(b"9223372036854775808", "n", 0, MAX_UNITS),
            Err(invalid(
                "ERR n must be an integer between 0 and 9223372036854775807"
            ))
        );
    }

    #[test]
    fn unknown_options_are_quoted_safely() {
        assert_eq!(
            init(&[b"1", b"A\x00\r\n\xfd"]),
            Err(invalid("ERR unknown option 'A\\x00\\x0d\\x0a\\xfd'"))
        );
        let long = vec![b'z'; 100];
        let Err(ArgError::Invalid(message)) = acquire(&[b"t", b"1", &long]) else {
            panic!("a long unknown option is an error");
        };
        assert!(
            message.ends_with("...'") && message.len() < 100,
            "{message}"
        );
    }

    #[test]
    fn identifier_is_binary_safe_but_not_empty() {
        assert_eq!(identifier(b"\x00\xff", "user"), Ok(&b"\x00\xff"[..]));
        assert_eq!(
            identifier(b"", "user"),
            Err(invalid("ERR user must not be empty"))
        );
    }

    #[test]
    fn init_parses_options_in_any_order_and_case() {
        assert_eq!(
            init(&[b"10"]),
            Ok(InitArgs {
                stock: 10,
                limit: 1,
                replace: false
            })
        );
        assert_eq!(
            init(&[b"10", b"replace", b"Limit", b"3"]),
            Ok(InitArgs {
                stock: 10,
                limit: 3,
                replace: true
            })
        );
        assert_eq!(init(&[]), Err(ArgError::Arity));
        assert_eq!(
            init(&[b"10", b"LIMIT"]),
            Err(invalid("ERR LIMIT needs a value"))
        );
        assert_eq!(
            init(&[b"10", b"LIMIT", b"0"]),
            Err(invalid(
                "ERR LIMIT must be an integer between 1 and 9223372036854775807"
            ))
        );
        assert_eq!(
            init(&[b"10", b"BOGUS"]),
            Err(invalid("ERR unknown option 'BOGUS'"))
        );
        assert_eq!(
            init(&[b"-1"]),
            Err(invalid(
                "ERR stock must be an integer between 0 and 9223372036854775807"
            ))
        );
    }

    #[test]
    fn try_and_user_commands() {
        assert_eq!(try_buy(&[b"u"]), Ok((&b"u"[..], 1)));
        assert_eq!(try_buy(&[b"u", b"3"]), Ok((&b"u"[..], 3)));
        assert_eq!(try_buy(&[]), Err(ArgError::Arity));
        assert_eq!(try_buy(&[b"u", b"1", b"x"]), Err(ArgError::Arity));
        assert_eq!(
            try_buy(&[b"", b"1"]),
            Err(invalid("ERR user must not be empty"))
        );
        assert_eq!(try_buy(&[b"u", b"0"]), Ok((&b"u"[..], 0)));
        assert!(try_buy(&[b"u", b"-1"]).is_err());
        assert_eq!(user_only(&[b"u"]), Ok(&b"u"[..]));
        assert_eq!(user_only(&[]), Err(ArgError::Arity));
        assert_eq!(key_only(&[]), Ok(()));
        assert_eq!(key_only(&[b"x"]), Err(ArgError::Arity));
    }

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
        assert_eq!(restore(&[b"1", b"xyz"]), Ok((1, &b"xyz"[..])));
        assert!(restore(&[b"0", b"xyz"]).is_err());
        assert_eq!(restore(&[b"1"]), Err(ArgError::Arity));
    }
}
