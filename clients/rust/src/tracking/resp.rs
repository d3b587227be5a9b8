//! RESP3 on bytes, for the sold-out cache's tracking connections, the only connections the
//! crate reads itself: their replies and their invalidation pushes share one socket. The same
//! reader as the Python package's `_resp.py`.

/// One frame. Simple strings, bulk and verbatim strings are `Bulk`; big numbers that do not
/// fit are refused.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Frame {
    Bulk(Vec<u8>),
    Error(String),
    Int(i64),
    Double(f64),
    Bool(bool),
    Null,
    Array(Vec<Frame>),
    Map(Vec<(Frame, Frame)>),
    Push(Vec<Frame>),
}

impl Frame {
    /// A map's (or RESP2 flat array's) field as an integer; 0 when absent or null.
    pub(crate) fn field(&self, name: &str) -> i64 {
        let pairs: Vec<(&Frame, &Frame)> = match self {
            Frame::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
            Frame::Array(items) => items
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| (&c[0], &c[1]))
                .collect(),
            _ => return 0,
        };
        pairs
            .into_iter()
            .find(|(k, _)| k.text() == Some(name))
            .map_or(0, |(_, v)| match v {
                Frame::Int(n) => *n,
                Frame::Bool(b) => i64::from(*b),
                Frame::Bulk(b) => std::str::from_utf8(b)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0),
                _ => 0,
            })
    }

    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Frame::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
}

/// A command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Not RESP.
#[derive(Debug, PartialEq)]
pub(crate) struct Malformed;

fn line(buf: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let end = buf.get(pos..)?.windows(2).position(|w| w == b"\r\n")? + pos;
    Some((&buf[pos..end], end + 2))
}

fn number<T: std::str::FromStr>(text: &[u8]) -> Result<T, Malformed> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Malformed)
}

/// The frame at the start of `buf` and its length; `Ok(None)` when the buffer ends inside it.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, Malformed> {
    parse_at(buf, 0)
}

fn parse_at(buf: &[u8], pos: usize) -> Result<Option<(Frame, usize)>, Malformed> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let Some((text, mut pos)) = line(buf, pos + 1) else {
        return Ok(None);
    };
    let frame = match kind {
        b'+' => Frame::Bulk(text.to_vec()),
        b'-' => Frame::Error(String::from_utf8_lossy(text).into_owned()),
        b':' | b'(' => Frame::Int(number(text)?),
        b'_' => Frame::Null,
        b'#' => Frame::Bool(text == b"t"),
        b',' => Frame::Double(number(text)?),
        b'$' | b'=' | b'!' => {
            let length: i64 = number(text)?;
            if length < 0 {
                return Ok(Some((Frame::Null, pos)));
            }
            let end = pos + length as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            let data = &buf[pos..end];
            pos = end + 2;
            match kind {
                b'!' => Frame::Error(String::from_utf8_lossy(data).into_owned()),
                b'=' => Frame::Bulk(data.get(4..).ok_or(Malformed)?.to_vec()),
                _ => Frame::Bulk(data.to_vec()),
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let count: i64 = number(text)?;
            if count < 0 {
                return Ok(Some((Frame::Null, pos)));
            }
            let paired = matches!(kind, b'%' | b'|');
            let mut items = Vec::new();
            for _ in 0..count * if paired { 2 } else { 1 } {
                let Some((item, next)) = parse_at(buf, pos)? else {
                    return Ok(None);
                };
                items.push(item);
                pos = next;
            }
            match kind {
                b'|' => return parse_at(buf, pos), // the attribute's reply follows it
                b'%' => {
                    let mut pairs = Vec::new();
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    Frame::Map(pairs)
                }
                b'>' => Frame::Push(items),
                _ => Frame::Array(items),
            }
        }
        _ => return Err(Malformed),
    };
    Ok(Some((frame, pos)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Frame {
        Frame::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn every_reply_type_parses_and_ends_where_the_next_begins() {
        let cases: Vec<(&[u8], Frame)> = vec![
            (b"+OK\r\n", bulk("OK")),
            (b"-ERR no\r\n", Frame::Error("ERR no".into())),
            (b":-7\r\n", Frame::Int(-7)),
            (b"(42\r\n", Frame::Int(42)),
            (b"_\r\n", Frame::Null),
            (b"#t\r\n", Frame::Bool(true)),
            (b",1.5\r\n", Frame::Double(1.5)),
            (b"$3\r\na\r\n\r\n", bulk("a\r\n")),
            (b"$-1\r\n", Frame::Null),
            (b"*-1\r\n", Frame::Null),
            (b"=7\r\ntxt:abc\r\n", bulk("abc")),
            (b"!5\r\nERR x\r\n", Frame::Error("ERR x".into())),
            (
                b"*2\r\n:1\r\n$1\r\nx\r\n",
                Frame::Array(vec![Frame::Int(1), bulk("x")]),
            ),
            (b"~1\r\n:1\r\n", Frame::Array(vec![Frame::Int(1)])),
            (
                b"%1\r\n$9\r\nremaining\r\n:0\r\n",
                Frame::Map(vec![(bulk("remaining"), Frame::Int(0))]),
            ),
            (b"|1\r\n+ttl\r\n:3\r\n:9\r\n", Frame::Int(9)),
            (
                b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n",
                Frame::Push(vec![bulk("invalidate"), Frame::Array(vec![bulk("k")])]),
            ),
            (
                b">2\r\n$10\r\ninvalidate\r\n_\r\n",
                Frame::Push(vec![bulk("invalidate"), Frame::Null]),
            ),
        ];
        for (frame, want) in cases {
            let mut buf = frame.to_vec();
            buf.extend_from_slice(b":1\r\n");
            assert_eq!(parse(&buf), Ok(Some((want, frame.len()))), "{frame:?}");
        }
    }

    #[test]
    fn a_frame_cut_anywhere_is_incomplete_and_junk_is_refused() {
        let frame = b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\nk\r\n%1\r\n+a\r\n:1\r\n";
        for end in 0..frame.len() {
            assert_eq!(parse(&frame[..end]), Ok(None), "{end}");
        }
        assert_eq!(parse(frame).unwrap().unwrap().1, frame.len());
        assert_eq!(parse(b"?what\r\n"), Err(Malformed));
        assert_eq!(parse(b":x\r\n"), Err(Malformed));
    }

    #[test]
    fn fields_read_from_maps_and_flat_arrays() {
        let map = Frame::Map(vec![
            (bulk("remaining"), Frame::Int(3)),
            (bulk("end"), Frame::Null),
        ]);
        let flat = Frame::Array(vec![
            bulk("remaining"),
            Frame::Int(3),
            bulk("sealed"),
            Frame::Bool(true),
        ]);
        assert_eq!((map.field("remaining"), map.field("end")), (3, 0));
        assert_eq!(
            (
                flat.field("remaining"),
                flat.field("sealed"),
                flat.field("x")
            ),
            (3, 1, 0)
        );
        let command = encode(&[b"a", b"bc"]);
        assert_eq!(
            parse(&command),
            Ok(Some((
                Frame::Array(vec![bulk("a"), bulk("bc")]),
                command.len()
            )))
        );
    }
}
