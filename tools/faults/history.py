"""One operation of the history, Jepsen's model in one record: who (``process``), what (``f``
and its arguments), when it was invoked and completed (``start``, ``end``: wall-clock seconds,
one clock for every process of the machine), and how it ended: ``ok`` (applied), ``fail``
(known not applied) or ``info`` (outcome unknown), with the reply. Written one JSON object per
line."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, TextIO

OK, FAIL, INFO = "ok", "fail", "info"


@dataclass
class Op:
    process: str
    f: str
    start: float
    end: float
    type: str
    args: Dict[str, Any] = field(default_factory=dict)
    value: Any = None

    def line(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class Fault:
    """One fault of the nemesis: what, on which nodes, from ``start`` to ``end``."""

    kind: str
    targets: List[str]
    start: float
    end: float

    def line(self) -> str:
        return json.dumps({"fault": asdict(self)}, sort_keys=True)


def read(lines: Iterable[str]) -> Iterator[Op]:
    for line in lines:
        record = json.loads(line)
        if "fault" not in record:
            yield Op(**record)


def read_faults(lines: Iterable[str]) -> Iterator[Fault]:
    for line in lines:
        record = json.loads(line)
        if "fault" in record:
            yield Fault(**record["fault"])


def write(out: TextIO, record: Any) -> None:
    out.write(record.line() + "\n")
    out.flush()
