"""The faults of a run: a seeded schedule (the seed is printed; the same seed draws the same
kinds, lengths and choices), each fault healed and the cluster converged before the next.

- ``partition``: a master and one client group on one side, every other node and client on
  the other, for 2.5 node timeouts: the majority promotes the master's replica while the old
  master still takes writes from the clients on its side, until it sees it lost.
- ``kill``: SIGKILL of a master, restarted from its AOF after 2 node timeouts (it comes back
  as a replica of the promoted one).
- ``pause-short`` / ``pause-long``: SIGSTOP of a master for 0.8 node timeout (no failover:
  calls time out, then are answered) or two (a failover behind the frozen master's back).
- ``bridge``: a partition as above, but one node of the majority (a bridge) still reaches the
  cut master, so two sides overlap: the master's view differs from everyone else's.
- ``ring``: the nodes in a random ring, each cut from the node opposite: every node sees 5 of
  6 (overlapping majorities), no side is a minority; clients reach every node.
- ``loss``: 30 % of a master's packets (to it and from it) dropped at random for 3 node
  timeouts (nftables; no netem in these containers, see ``net.py``).
- ``kill-empty``: SIGKILL of a master, restarted once its replica was promoted, without its
  data (its AOF deleted: a node that ran with AOF off).
- ``migrate``: the slot of a partition of the sale moved to another master under load
  (IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE)."""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

from .cluster import Cluster, Node, wait_until
from .history import Fault
from .net import Network

KINDS = ["partition", "kill", "pause-short", "pause-long", "bridge", "ring", "loss", "kill-empty", "migrate"]
#: The kinds that cut the network: skipped without root and nft.
NETWORK = {"partition", "bridge", "ring", "loss"}
#: The smoke run of ``make test``: one partition, one kill.
SMOKE = ["partition", "kill"]
#: The planted bugs' runs add the short pause, which a client without attempt ids answers with
#: a second purchase.
PLANTED = ["partition", "pause-short", "kill"]


@dataclass
class Step:
    kind: str
    quiet_s: float  # healthy time before the fault


def schedule(seed: int, seconds: float, node_timeout_s: float, kinds: Optional[List[str]] = None) -> List[Step]:
    """Faults for a run of about ``seconds`` (``kinds`` given: exactly those, in order)."""
    rng = random.Random(seed)
    if kinds is not None:
        return [Step(kind, 1.0 + rng.random()) for kind in kinds]
    steps, planned = [], 0.0
    while planned < seconds:
        step = Step(rng.choice(KINDS), 1.0 + 3.0 * rng.random())
        steps.append(step)
        # A fault and its healing take about 5 node timeouts, the quiet time before it aside.
        planned += step.quiet_s + 5 * node_timeout_s
    return steps


class Nemesis:
    def __init__(self, cluster: Cluster, network: Optional[Network], client_addresses: List[str],
                 lock_key: str, sale_keys: List[str], seed: int, record: Callable[[Fault], None]) -> None:
        self.cluster, self.network = cluster, network
        self.client_addresses, self.lock_key, self.sale_keys = client_addresses, lock_key, sale_keys
        self.rng = random.Random(seed ^ 0x5EC)
        self.record = record
        self.timeout_s = cluster.node_timeout_ms / 1000

    def run(self, steps: List[Step], stop_at: float) -> None:
        for step in steps:
            time.sleep(step.quiet_s)
            if time.time() >= stop_at:
                return
            if step.kind in NETWORK and self.network is None:
                continue  # no root or no nft: said at the start
            getattr(self, step.kind.replace("-", "_"))()
            self.cluster.wait_converged()

    def _victim(self) -> Node:
        """A master, the lock key's more often than the others: its grants are the ones a
        failover can lose."""
        masters = self.cluster.masters()
        lock_master = self.cluster.master_of(self.lock_key)
        return lock_master if self.rng.random() < 0.5 else self.rng.choice(masters)

    def partition(self, bridged: bool = False) -> None:
        assert self.network is not None
        victim = self._victim()
        clients = self.rng.choice(self.client_addresses)
        others = [n for n in self.cluster.nodes if n is not victim]
        bridge = self.rng.choice(others) if bridged else None
        side_a = [victim.address, clients]
        side_b = [n.address for n in others if n is not bridge] + \
                 [c for c in self.client_addresses if c != clients]
        start = time.time()
        self.network.partition(side_a, side_b)
        time.sleep(2.5 * self.timeout_s)
        self.network.heal()
        targets = [victim.name, clients] + ([f"bridge {bridge.name}"] if bridge is not None else [])
        self.record(Fault("bridge" if bridged else "partition", targets, start, time.time()))

    def bridge(self) -> None:
        self.partition(bridged=True)

    def ring(self) -> None:
        assert self.network is not None
        ring = list(self.cluster.nodes)
        self.rng.shuffle(ring)
        half = len(ring) // 2
        start = time.time()
        for node, opposite in zip(ring[:half], ring[half:]):
            self.network.partition([node.address], [opposite.address])
        time.sleep(2.5 * self.timeout_s)
        self.network.heal()
        self.record(Fault("ring", [n.name for n in ring], start, time.time()))

    def loss(self) -> None:
        assert self.network is not None
        victim = self._victim()
        start = time.time()
        self.network.lossy(victim.address, 30)
        time.sleep(3 * self.timeout_s)
        self.network.heal()
        self.record(Fault("loss", [victim.name, "30%"], start, time.time()))

    def kill(self) -> None:
        victim = self.rng.choice(self.cluster.masters())
        start = time.time()
        victim.kill()
        time.sleep(2 * self.timeout_s)
        victim.start()
        self.record(Fault("kill", [victim.name], start, time.time()))

    def kill_empty(self) -> None:
        victim = self.rng.choice(self.cluster.masters())
        start = time.time()
        victim.kill()
        # Back without its data before its replica took over, it would serve its slots empty:
        # the loss Redis's docs warn of for a master without persistence, not a client's.
        wait_until(lambda: self.cluster.replaced(victim), f"{victim.name}'s replica to take over")
        victim.start(empty=True)
        self.record(Fault("kill-empty", [victim.name], start, time.time()))

    def migrate(self) -> None:
        key = self.rng.choice(self.sale_keys)
        target = self.rng.choice([m for m in self.cluster.masters() if m is not self.cluster.master_of(key)])
        start = time.time()
        source = self.cluster.migrate_slot(key, target)
        self.record(Fault("migrate", [key, source.name, target.name], start, time.time()))

    def _pause(self, kind: str, length_s: float) -> None:
        victim = self._victim()
        start = time.time()
        victim.signal(signal.SIGSTOP)
        time.sleep(length_s)
        victim.signal(signal.SIGCONT)
        self.record(Fault(kind, [victim.name], start, time.time()))

    def pause_short(self) -> None:
        self._pause("pause-short", 0.8 * self.timeout_s)

    def pause_long(self) -> None:
        self._pause("pause-long", 2 * self.timeout_s)
