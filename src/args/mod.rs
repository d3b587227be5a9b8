//! Argument parsing for every command, on plain byte slices so it is unit-tested without Redis.
//! Each parser takes the arguments after the key. The shared pieces (integers, identifiers,
//! options, error texts) are here; each family of commands has its file.

mod internal;
mod lock;
mod sale;

pub use internal::*;
pub use lock::*;
pub use sale::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// Reply with Redis' standard wrong-arity error.
    Arity,
    /// Reply with this message (it starts with `ERR`).
    Invalid(String),
}

pub type ArgResult<T> = Result<T, ArgError>;

/// Longest TTL or wait accepted: about 292 million years, still an i64 of milliseconds.
pub const MAX_MS: u64 = i64::MAX as u64;

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
/// returns whether it consumed the value. An option given twice is `ERR syntax error`, as
/// built-in commands answer `SET k v EX 1 EX 2`.
pub(crate) fn options<'a>(
    rest: &[&'a [u8]],
    mut on_option: impl FnMut(&str, Option<&'a [u8]>) -> ArgResult<bool>,
) -> ArgResult<()> {
    let mut seen: Vec<String> = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let name = std::str::from_utf8(rest[i])
            .map(str::to_ascii_uppercase)
            .map_err(|_| unknown_option(rest[i]))?;
        if seen.contains(&name) {
            return Err(syntax_error());
        }
        let consumed = on_option(&name, rest.get(i + 1).copied())?;
        seen.push(name);
        i += if consumed { 2 } else { 1 };
    }
    Ok(())
}

pub fn syntax_error() -> ArgError {
    ArgError::Invalid("ERR syntax error".to_string())
}

pub(crate) fn value_of<'a>(name: &str, value: Option<&'a [u8]>) -> ArgResult<&'a [u8]> {
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

pub(crate) fn unknown_option(raw: &[u8]) -> ArgError {
    ArgError::Invalid(format!("ERR unknown option '{}'", printable(raw)))
}

/// Commands that take only the key.
pub fn key_only(rest: &[&[u8]]) -> ArgResult<()> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(ArgError::Arity)
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::ArgError;

    pub(crate) fn invalid(message: &str) -> ArgError {
        ArgError::Invalid(message.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::fixtures::invalid;
    use crate::logic::sale::MAX_UNITS;

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
}
