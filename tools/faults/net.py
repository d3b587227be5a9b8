"""Network faults on loopback with nftables: packets between two sets of 127.0.0.x addresses
dropped in both directions (node to node, node to client, client to node), or a share of one
address's packets dropped at random (``numgen random``: loss; TCP resends what was dropped, so
calls slow down by its retransmission timeouts). netem would add delay too, but the containers
this runs in have no qdisc modules (``tc qdisc add dev lo root netem`` fails there). The rules
live in one table of this run's own (``seckill_faults_<pid>``), deleted at the end, also after
Ctrl-C; a table left by a run that was killed outright is deleted by the next run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Iterable, List

PREFIX = "seckill_faults_"


def available() -> bool:
    """Root with nft: the network faults can run."""
    return os.geteuid() == 0 and shutil.which("nft") is not None


def _nft(*args: str) -> str:
    return subprocess.run(["nft", *args], check=True, capture_output=True, text=True).stdout


def tables() -> List[str]:
    """This harness's tables, of any run."""
    return re.findall(rf"table inet ({PREFIX}\d+)", _nft("list", "tables"))


def remove_stale() -> None:
    """Deletes the tables of runs whose process is gone."""
    for table in tables():
        pid = int(table[len(PREFIX):])
        if not os.path.exists(f"/proc/{pid}"):
            _nft("delete", "table", "inet", table)


def _set(addresses: Iterable[str]) -> str:
    return "{ " + ", ".join(sorted(addresses)) + " }"


class Network:
    def __init__(self) -> None:
        self.table = f"{PREFIX}{os.getpid()}"
        _nft("add", "table", "inet", self.table)
        _nft("add", "chain", "inet", self.table, "cut", "{ type filter hook output priority 0 ; }")

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Nothing passes between an address of ``side_a`` and one of ``side_b``."""
        a, b = _set(side_a), _set(side_b)
        _nft("add", "rule", "inet", self.table, "cut", "ip", "saddr", a, "ip", "daddr", b, "drop")
        _nft("add", "rule", "inet", self.table, "cut", "ip", "saddr", b, "ip", "daddr", a, "drop")

    def lossy(self, address: str, percent: int) -> None:
        """``percent`` % of the packets from or to ``address`` dropped, each on its own."""
        for direction in ("saddr", "daddr"):
            _nft("add", "rule", "inet", self.table, "cut", "ip", direction, address,
                 "numgen", "random", "mod", "100", "<", str(percent), "drop")

    def heal(self) -> None:
        _nft("flush", "chain", "inet", self.table, "cut")

    def remove(self) -> None:
        if self.table in tables():
            _nft("delete", "table", "inet", self.table)
