"""RESP3 on bytes, for the sold-out cache's tracking connection (``_tracking``), the one
connection the package reads itself: its replies and its invalidation pushes share the socket,
and redis-py's parsers hand pushes over differently in each version (or drop them). Pure
functions over a byte buffer, unit-tested in ``tests/test_resp.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple, Union

__all__ = ["ErrorReply", "Incomplete", "Push", "encode", "parse"]


class Incomplete(Exception):
    """The buffer ends inside a frame: read more."""


@dataclass(frozen=True)
class Push:
    """An out-of-band message (``>``): ``[b"invalidate", [keys] or None]`` for tracking."""

    items: List[Any]


@dataclass(frozen=True)
class ErrorReply:
    """An error reply (``-`` or ``!``), as a value: the caller decides what it means."""

    message: str


Arg = Union[str, bytes, int]
Buffer = Union[bytes, bytearray]


def encode(args: Sequence[Arg]) -> bytes:
    """One command as a RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _line(buf: Buffer, pos: int) -> Tuple[bytes, int]:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete
    return bytes(buf[pos:end]), end + 2


def _blob(buf: Buffer, pos: int, length: int) -> Tuple[bytes, int]:
    end = pos + length
    if len(buf) < end + 2:
        raise Incomplete
    return bytes(buf[pos:end]), end + 2


def parse(buf: Buffer, pos: int = 0) -> Tuple[Any, int]:
    """The frame starting at ``pos`` and where the next one starts; ``Incomplete`` if the
    buffer ends first, ``ValueError`` on bytes that are not RESP. Bulk strings stay bytes,
    maps become dicts, sets lists, attributes are skipped."""
    if pos >= len(buf):
        raise Incomplete
    kind = buf[pos : pos + 1]
    line, pos = _line(buf, pos + 1)
    if kind == b"+":
        return line, pos
    if kind == b"-":
        return ErrorReply(line.decode(errors="replace")), pos
    if kind in (b":", b"("):
        return int(line), pos
    if kind == b"_":
        return None, pos
    if kind == b"#":
        return line == b"t", pos
    if kind == b",":
        return float(line), pos
    if kind in (b"$", b"=", b"!"):
        length = int(line)
        if length < 0:
            return None, pos
        data, pos = _blob(buf, pos, length)
        if kind == b"!":
            return ErrorReply(data.decode(errors="replace")), pos
        return (data[4:] if kind == b"=" else data), pos
    if kind in (b"*", b"~", b">", b"%", b"|"):
        count = int(line)
        if count < 0:
            return None, pos
        items: List[Any] = []
        for _ in range(count * 2 if kind in (b"%", b"|") else count):
            item, pos = parse(buf, pos)
            items.append(item)
        if kind == b"%":
            return dict(zip(items[0::2], items[1::2])), pos
        if kind == b"|":
            return parse(buf, pos)  # the attribute's reply follows it
        return (Push(items) if kind == b">" else items), pos
    raise ValueError(f"not RESP: {bytes(buf[pos - len(line) - 3 : pos])!r}")
