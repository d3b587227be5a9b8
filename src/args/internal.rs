//! The arguments of the internal commands: `SECKILL._REPLAY` and the restores.

use super::{ArgError, ArgResult, MAX_MS, integer, printable};

/// A sale command as its master ran it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayArgs<'a, 'r> {
    pub now_ms: u64,
    /// The stream entries the master wrote for the change, which a replica writes alike.
    pub entries: Option<ReplayedEntries<'a>>,
    pub command: &'a [u8],
    pub args: &'r [&'a [u8]],
}

/// `STREAM ids length`: the entries' IDs, comma-separated in the order of the change's events
/// (empty for an entry the master could not write), and the stream's length afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayedEntries<'a> {
    pub ids: &'a [u8],
    pub length: u64,
}

impl<'a> ReplayedEntries<'a> {
    /// Each event's entry ID (`None`: no entry), or an error for a malformed list.
    pub fn ids(self) -> impl Iterator<Item = ArgResult<Option<(u64, u64)>>> + 'a {
        self.ids
            .split(|b| *b == b',')
            .map(|id| (!id.is_empty()).then(|| stream_id(id)).transpose())
    }
}

/// A stream entry ID, `ms-seq`.
pub fn stream_id(text: &[u8]) -> ArgResult<(u64, u64)> {
    let bad = || ArgError::Invalid(format!("ERR invalid stream ID '{}'", printable(text)));
    let dash = text.iter().position(|b| *b == b'-').ok_or_else(bad)?;
    let part = |digits: &[u8]| -> ArgResult<u64> {
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(bad)
    };
    Ok((part(&text[..dash])?, part(&text[dash + 1..])?))
}

/// `SECKILL._REPLAY key now_ms [STREAM ids length] COMMAND args...`
pub fn replay<'a, 'r>(rest: &'r [&'a [u8]]) -> ArgResult<ReplayArgs<'a, 'r>> {
    let [now, rest @ ..] = rest else {
        return Err(ArgError::Arity);
    };
    let now_ms = integer(now, "now_ms", 0, MAX_MS)?;
    let (entries, rest) = match rest {
        [marker, ids, length, rest @ ..] if marker.eq_ignore_ascii_case(b"STREAM") => (
            Some(ReplayedEntries {
                ids,
                length: integer(length, "stream length", 0, MAX_MS)?,
            }),
            rest,
        ),
        _ => (None, rest),
    };
    match rest {
        [command, args @ ..] => Ok(ReplayArgs {
            now_ms,
            entries,
            command,
            args,
        }),
        _ => Err(ArgError::Arity),
    }
}

/// What an internal restore command carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restore<'a> {
    Whole { version: u32, payload: &'a [u8] },
    Chunk(crate::persist::chunks::Chunk<'a>),
}

/// Internal restore commands: `key encoding_version payload`, or one piece of a big payload,
/// `key encoding_version CHUNK index count bytes`.
pub fn restore<'a>(rest: &[&'a [u8]]) -> ArgResult<Restore<'a>> {
    let version = |raw| integer(raw, "encoding version", 1, u64::from(u32::MAX)).map(|v| v as u32);
    match rest {
        [v, payload] => Ok(Restore::Whole {
            version: version(v)?,
            payload,
        }),
        [v, marker, index, count, bytes] if marker.eq_ignore_ascii_case(b"CHUNK") => {
            Ok(Restore::Chunk(crate::persist::chunks::Chunk {
                version: version(v)?,
                index: integer(index, "chunk index", 0, MAX_MS)?,
                count: integer(count, "chunk count", 2, MAX_MS)?,
                bytes,
            }))
        }
        _ => Err(ArgError::Arity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::*;

    #[test]
    fn replay_carries_the_clock_and_the_stream_ids() {
        let args: [&[u8]; 4] = [b"17", b"TRY", b"u", b"1"];
        assert_eq!(
            replay(&args),
            Ok(ReplayArgs {
                now_ms: 17,
                entries: None,
                command: b"TRY",
                args: &args[2..]
            })
        );
        assert_eq!(replay(&args[..1]), Err(ArgError::Arity));
        let args: [&[u8]; 6] = [b"17", b"stream", b"5-0,,5-1", b"9", b"TRY", b"u"];
        let parsed = replay(&args).unwrap();
        let entries = parsed.entries.unwrap();
        assert_eq!(entries.length, 9);
        assert_eq!((parsed.command, parsed.args), (&b"TRY"[..], &args[5..]));
        let ids: Vec<_> = entries.ids().collect();
        assert_eq!(ids, [Ok(Some((5, 0))), Ok(None), Ok(Some((5, 1)))]);
        let none = ReplayedEntries {
            ids: b"",
            length: 0,
        };
        assert_eq!(
            none.ids().collect::<Vec<_>>(),
            [Ok(None)],
            "one entry, not written"
        );
        assert_eq!(replay(&args[..4]), Err(ArgError::Arity));
        for bad in [
            &b"5"[..],
            b"-1",
            b"5-",
            b"a-1",
            b"1-2-3",
            b"99999999999999999999-0",
        ] {
            assert!(stream_id(bad).is_err(), "{bad:?}");
        }
        assert_eq!(stream_id(b"18446744073709551615-7"), Ok((u64::MAX, 7)));
    }

    #[test]
    fn restore_takes_a_whole_payload_or_its_chunks() {
        assert_eq!(
            restore(&[b"1", b"xyz"]),
            Ok(Restore::Whole {
                version: 1,
                payload: b"xyz"
            })
        );
        assert_eq!(
            restore(&[b"4", b"chunk", b"1", b"3", b"xy"]),
            Ok(Restore::Chunk(crate::persist::chunks::Chunk {
                version: 4,
                index: 1,
                count: 3,
                bytes: b"xy"
            }))
        );
        assert!(
            restore(&[b"4", b"CHUNK", b"1", b"1", b"xy"]).is_err(),
            "count 1"
        );
        assert!(restore(&[b"4", b"PIECE", b"1", b"3", b"xy"]).is_err());
        assert!(restore(&[b"0", b"xyz"]).is_err());
        assert_eq!(restore(&[b"1"]), Err(ArgError::Arity));
    }
}
