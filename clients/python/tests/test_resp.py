"""The RESP3 reader of the sold-out cache's tracking connection, on bytes."""

import pytest

from seckill._resp import ErrorReply, Incomplete, Push, encode, parse


def test_every_reply_type_parses_and_ends_where_the_next_begins():
    cases = [
        (b"+OK\r\n", b"OK"),
        (b"-ERR no\r\n", ErrorReply("ERR no")),
        (b":-7\r\n", -7),
        (b"(12345678901234567890\r\n", 12345678901234567890),
        (b"_\r\n", None),
        (b"#t\r\n", True),
        (b"#f\r\n", False),
        (b",1.5\r\n", 1.5),
        (b"$3\r\na\r\n\r\n", b"a\r\n"),
        (b"$-1\r\n", None),
        (b"*-1\r\n", None),
        (b"=7\r\ntxt:abc\r\n", b"abc"),
        (b"!5\r\nERR x\r\n", ErrorReply("ERR x")),
        (b"*2\r\n:1\r\n$1\r\nx\r\n", [1, b"x"]),
        (b"~1\r\n:1\r\n", [1]),
        (b"%2\r\n$9\r\nremaining\r\n:0\r\n$3\r\nend\r\n_\r\n", {b"remaining": 0, b"end": None}),
        (b"|1\r\n+ttl\r\n:3\r\n:9\r\n", 9),
        (b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", Push([b"invalidate", [b"k"]])),
        (b">2\r\n$10\r\ninvalidate\r\n_\r\n", Push([b"invalidate", None])),
    ]
    for frame, value in cases:
        assert parse(frame + b":1\r\n") == (value, len(frame)), frame
        assert parse(bytearray(b"xx" + frame), 2) == (value, len(frame) + 2)


def test_a_frame_cut_anywhere_is_incomplete():
    frame = b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\nk\r\n%1\r\n+a\r\n:1\r\n"
    for end in range(len(frame)):
        with pytest.raises(Incomplete):
            parse(frame[:end])
    assert parse(frame)[1] == len(frame)


def test_bytes_that_are_not_resp_are_refused():
    with pytest.raises(ValueError):
        parse(b"?what\r\n")
    with pytest.raises(ValueError):
        parse(b":x\r\n")


def test_commands_are_arrays_of_bulk_strings():
    assert encode(["SECKILL.INFO", b"k\r\n", 7]) == b"*3\r\n$12\r\nSECKILL.INFO\r\n$3\r\nk\r\n\r\n$1\r\n7\r\n"
    command = encode(["a", "bc"])
    assert parse(command) == ([b"a", b"bc"], len(command))
