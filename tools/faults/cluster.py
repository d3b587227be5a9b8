"""A Redis Cluster of 3 masters and 3 replicas with the module, each node on its own loopback
address (127.0.0.11-16, one port), so that nftables can cut any pair of them; AOF on, a short
``cluster-node-timeout`` for several failovers a run. Node-to-node connections leave from the
node's own address (``bind-source-addr``)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import Callable, List, Optional

import redis

SERVER = os.environ.get("REDIS_SERVER", "redis-server")
CLI = os.environ.get("REDIS_CLI", "redis-cli")
ADDRESSES = [f"127.0.0.{n}" for n in range(11, 17)]


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def die_with_parent() -> None:
    """For ``Popen(preexec_fn=...)``: the child gets SIGKILL when the harness dies, however it
    dies (SIGKILL included), so no node or client outlives a run."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_port() -> int:
    """A port free on every node address."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind((ADDRESSES[0], 0))
            port = int(probe.getsockname()[1])
        if port + 10000 >= 65536:
            continue
        try:
            for address in ADDRESSES:
                for offset in (0, 10000):
                    with socket.socket() as s:
                        s.bind((address, port + offset))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on every node address")


class Node:
    def __init__(self, address: str, port: int, workdir: str, module: str, node_timeout_ms: int,
                 module_args: List[str], server_args: List[str]) -> None:
        self.address, self.port, self.module = address, port, module
        self.name = f"{address}:{port}"
        self.dir = os.path.join(workdir, address)
        os.makedirs(self.dir, exist_ok=True)
        self.args = [
            # Protected mode takes only 127.0.0.1 for loopback: every node binds a loopback
            # address, so nothing outside the machine reaches it anyway.
            SERVER, "--bind", address, "--bind-source-addr", address, "--port", str(port), "--protected-mode", "no",
            "--dir", self.dir, "--loadmodule", module, *module_args,
            "--cluster-enabled", "yes", "--cluster-node-timeout", str(node_timeout_ms),
            # A replica promotes itself however long it was cut off: every failover happens.
            "--cluster-replica-validity-factor", "0",
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--enable-debug-command", "yes", "--logfile", "redis.log", *server_args,
        ]
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.start()

    def start(self, empty: bool = False) -> None:
        """Starts the node; ``empty``: without the data it had (its AOF deleted), as a node
        that ran with AOF off comes back. Its cluster config (nodes.conf) is kept."""
        if empty:
            shutil.rmtree(os.path.join(self.dir, "appendonlydir"), ignore_errors=True)
        self.process = subprocess.Popen(self.args, cwd=self.dir, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
        wait_until(self.answers, f"{self.name} to answer")

    def client(self, timeout_s: float = 1.0) -> redis.Redis:
        return redis.Redis(host=self.address, port=self.port, socket_timeout=timeout_s,
                           socket_connect_timeout=timeout_s, decode_responses=True)

    def answers(self) -> bool:
        try:
            with self.client(0.5) as c:
                return bool(c.ping())
        except redis.RedisError:
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.process is not None
            os.kill(self.process.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def role(self) -> str:
        with self.client() as c:
            return str(c.execute_command("ROLE")[0])


class Cluster:
    def __init__(self, workdir: str, module: str, node_timeout_ms: int, module_args: List[str],
                 server_args: List[str]) -> None:
        self.workdir = workdir
        self.node_timeout_ms = node_timeout_ms
        port = _free_port()
        self.nodes: List[Node] = []
        try:
            for address in ADDRESSES:
                self.nodes.append(Node(address, port, workdir, module, node_timeout_ms, module_args, server_args))
            created = subprocess.run(
                [CLI, "--cluster", "create", *(n.name for n in self.nodes), "--cluster-replicas", "1",
                 "--cluster-yes"], capture_output=True, text=True)
            if created.returncode != 0:
                raise RuntimeError(created.stdout + created.stderr)
            self.wait_converged()
        except BaseException:
            self.stop()
            raise

    def entry(self) -> Node:
        return self.nodes[0]

    def masters(self) -> List[Node]:
        return [n for n in self.nodes if n.alive() and n.answers() and n.role() == "master"
                and self._serves_slots(n)]

    def _serves_slots(self, node: Node) -> bool:
        with node.client() as c:
            line = next(l for l in c.execute_command("CLUSTER", "NODES").splitlines() if "myself" in l)
        return len(line.split()) > 8

    def master_of(self, key: str) -> Node:
        for node in self.nodes:
            if node.alive() and node.answers():
                with node.client() as c:
                    slot = c.execute_command("CLUSTER", "KEYSLOT", key)
                    for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                        if start <= slot <= end:
                            return next(n for n in self.nodes if n.port == master[1] and n.address == master[0])
        raise RuntimeError("no node answers")

    def replaced(self, node: Node) -> bool:
        """Whether every other answering node sees no slot served by ``node`` (its replica was
        promoted in its place)."""
        try:
            for other in self.nodes:
                if other is not node and other.alive() and other.answers():
                    with other.client() as c:
                        if any(tuple(s[2][:2]) == (node.address, node.port) for s in c.execute_command("CLUSTER", "SLOTS")):
                            return False
            return True
        except redis.RedisError:
            return False

    def migrate_slot(self, key: str, target: Node) -> Node:
        """Moves ``key``'s slot, with every key in it, from its master to ``target`` (another
        master) as ``redis-cli --cluster reshard`` does: IMPORTING / MIGRATING, MIGRATE of the
        keys in batches (clients meanwhile get ASK for the moved ones), then the slot's new
        owner told to every master. Returns the old owner."""
        source = self.master_of(key)
        with source.client(5.0) as src, target.client(5.0) as dst:
            slot = int(src.execute_command("CLUSTER", "KEYSLOT", key))
            src_id, dst_id = src.execute_command("CLUSTER", "MYID"), dst.execute_command("CLUSTER", "MYID")
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", target.address, target.port, "", 0, 5000, "KEYS", *keys)
            for node in [target, source] + [m for m in self.masters() if m not in (target, source)]:
                with node.client(5.0) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        return source

    def converged(self) -> bool:
        """Every node up, every one sees cluster_state:ok and the same slot owners, every
        replica linked to its master."""
        try:
            views = set()
            for node in self.nodes:
                with node.client() as c:
                    if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                        return False
                    views.add(str([(s[0], s[1], s[2][0]) for s in sorted(c.execute_command("CLUSTER", "SLOTS"))]))
                    info = c.info("replication")
                    if info["role"] == "slave" and info.get("master_link_status") != "up":
                        return False
            return len(views) == 1
        except (redis.RedisError, StopIteration):
            return False

    def wait_converged(self, timeout_s: float = 120.0) -> None:
        wait_until(self.converged, "the cluster to converge", timeout_s)

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
