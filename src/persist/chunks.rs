//! A value's payload in bounded pieces. AOF rewrite writes a big sale as
//! `_RESTORE key version CHUNK index count bytes` commands of at most `seckill.aof-chunk-bytes`
//! each, so that no argument comes near `proto-max-bulk-len` however many buyers it has; AOF
//! loading collects them here and the value appears whole, at the last piece, or not at all.

/// The pieces of one payload collected so far.
#[derive(Debug, Default)]
pub struct Staging {
    pub(crate) current: Option<Staged>,
}

#[derive(Debug)]
pub(crate) struct Staged {
    key: Vec<u8>,
    version: u32,
    count: u64,
    next: u64,
    bytes: Vec<u8>,
}

/// One piece, as the command carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub version: u32,
    pub index: u64,
    pub count: u64,
    pub bytes: &'a [u8],
}

#[derive(Debug, PartialEq, Eq)]
pub enum Collected {
    /// More pieces to come.
    Partial,
    /// The last piece: the whole payload.
    Whole(Vec<u8>),
}

impl Staging {
    /// Adds a piece of `key`'s payload. Pieces come in order, one payload at a time (an AOF is
    /// read front to back); a first piece drops whatever an earlier, unfinished payload left.
    pub fn push(&mut self, key: &[u8], chunk: Chunk) -> Result<Collected, &'static str> {
        if chunk.count < 2 || chunk.index >= chunk.count {
            self.current = None;
            return Err("bad chunk index or count");
        }
        if chunk.index == 0 {
            self.current = Some(Staged {
                key: key.to_vec(),
                version: chunk.version,
                count: chunk.count,
                next: 0,
                bytes: Vec::new(),
            });
        }
        let Some(staged) = self.current.as_mut() else {
            return Err("a chunk without its first one");
        };
        if staged.key != key
            || staged.version != chunk.version
            || staged.count != chunk.count
            || staged.next != chunk.index
        {
            self.current = None;
            return Err("a chunk out of order");
        }
        staged.bytes.extend_from_slice(chunk.bytes);
        staged.next += 1;
        if staged.next < staged.count {
            return Ok(Collected::Partial);
        }
        let whole = self.current.take().expect("staged").bytes;
        Ok(Collected::Whole(whole))
    }

    /// Bytes held for an unfinished payload.
    pub fn pending_bytes(&self) -> usize {
        self.current.as_ref().map_or(0, |s| s.bytes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(index: u64, count: u64, bytes: &[u8]) -> Chunk<'_> {
        Chunk {
            version: 4,
            index,
            count,
            bytes,
        }
    }

    #[test]
    fn pieces_in_order_make_the_whole() {
        let mut staging = Staging::default();
        assert_eq!(
            staging.push(b"k", chunk(0, 3, b"ab")),
            Ok(Collected::Partial)
        );
        assert_eq!(
            staging.push(b"k", chunk(1, 3, b"cd")),
            Ok(Collected::Partial)
        );
        assert_eq!(staging.pending_bytes(), 4);
        assert_eq!(
            staging.push(b"k", chunk(2, 3, b"e")),
            Ok(Collected::Whole(b"abcde".to_vec()))
        );
        assert_eq!(staging.pending_bytes(), 0);
    }

    #[test]
    fn anything_out_of_order_is_refused_and_forgotten() {
        let mut staging = Staging::default();
        assert!(
            staging.push(b"k", chunk(1, 3, b"x")).is_err(),
            "no first piece"
        );
        staging.push(b"k", chunk(0, 3, b"a")).unwrap();
        assert!(
            staging.push(b"other", chunk(1, 3, b"b")).is_err(),
            "another key"
        );
        assert_eq!(staging.pending_bytes(), 0, "forgotten");
        staging.push(b"k", chunk(0, 3, b"a")).unwrap();
        assert!(staging.push(b"k", chunk(2, 3, b"c")).is_err(), "a gap");
        staging.push(b"k", chunk(0, 2, b"a")).unwrap();
        assert!(
            staging
                .push(
                    b"k",
                    Chunk {
                        version: 3,
                        ..chunk(1, 2, b"b")
                    }
                )
                .is_err(),
            "another version"
        );
        for (index, count) in [(0, 1), (2, 2), (0, 0)] {
            assert!(staging.push(b"k", chunk(index, count, b"")).is_err());
        }
        // A truncated payload is dropped by the next first piece.
        staging.push(b"a", chunk(0, 2, b"stale")).unwrap();
        staging.push(b"b", chunk(0, 2, b"x")).unwrap();
        assert_eq!(
            staging.push(b"b", chunk(1, 2, b"y")),
            Ok(Collected::Whole(b"xy".to_vec()))
        );
    }
}
