"""Real servers for the tests: a local Redis Cluster (3 masters, each with a replica) with the
seckill module for the whole session, clusters and single servers of a test's own; every
server is killed at the end, and with this process if it dies."""

import contextlib
import ctypes
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import redis

REPO = pathlib.Path(__file__).resolve().parents[3]
MODULE = os.environ.get("SECKILL_MODULE", str(REPO / "target/release/libseckill.so"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
CLI = os.environ.get("REDIS_CLI", "redis-cli")
#: The protocol every client of the tests speaks: `make test` runs the tests under RESP3 on the
#: newest redis-py and under RESP2 on redis-py 5.
PROTOCOL = int(os.environ.get("SECKILL_RESP", "2"))


#: Ports handed out in this process (and their cluster bus ports): the kernel may offer a port
#: again before the server given it listens (CI once started two nodes on one port).
_handed_out: set = set()


#: ``SECKILL_TEST_PORTS=first-last``: the servers' ports are taken from that band, below the
#: kernel's ephemeral ports, so that another suite running at once (``make test`` runs the Rust
#: suites beside this one), whose servers take ports the kernel offers, never gets one of them.
_BAND = os.environ.get("SECKILL_TEST_PORTS")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    # At most 55535: a cluster node also listens on its port + 10000.
    if _BAND is not None:
        first, _, last = _BAND.partition("-")
        for port in range(int(first), int(last) + 1):
            if not {port, port + 10000} & _handed_out and _bindable(port) and _bindable(port + 10000):
                _handed_out.update((port, port + 10000))
                return port
        raise RuntimeError(f"no free port left in SECKILL_TEST_PORTS={_BAND}")
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port <= 55535 and not {port, port + 10000} & _handed_out:
            _handed_out.update((port, port + 10000))
            return port


def _die_with_parent():
    # PR_SET_PDEATHSIG: the server gets SIGKILL when pytest goes away, however it ends.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def wait_until(condition, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.01)


def command_calls(port: int, command: str) -> int:
    """How many times ``command`` (lower case, as INFO names it) ran on the server at ``port``
    (INFO commandstats; 0 if never): the Rust harness's ``command_calls``."""
    stats = redis.Redis(port=port).info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def _answers(port: int) -> bool:
    try:
        return redis.Redis(port=port, socket_timeout=1).ping()
    except redis.exceptions.ConnectionError:
        return False


class Node:
    """One redis-server of a test, with the module unless ``module=False``."""

    def __init__(self, workdir: str, extra=(), module: bool = True):
        self.port = _free_port()
        self.dir = pathlib.Path(workdir) / str(self.port)
        self.dir.mkdir()
        args = [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--appendonly", "no", "--enable-debug-command", "yes",
                "--logfile", str(self.dir / "server.log"), *extra]
        if module:
            args += ["--loadmodule", MODULE]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def _require_module_built():
    if not pathlib.Path(MODULE).exists():
        pytest.fail(f"{MODULE} is missing: run `make test` (or `cargo build --release`) first")


def start_cluster(workdir: str, node_timeout_ms: int = 5000):
    """3 masters, each with a replica, every replica in sync; returns the nodes."""
    nodes = [Node(workdir, ["--cluster-enabled", "yes", "--cluster-node-timeout", str(node_timeout_ms)])
             for _ in range(6)]
    for node in nodes:
        wait_until(lambda: _answers(node.port), f"the server on {node.port}")
    subprocess.run(
        [CLI, "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in nodes], "--cluster-replicas", "1", "--cluster-yes"],
        check=True,
        capture_output=True,
    )
    for node in nodes:
        con = redis.Redis(port=node.port)
        wait_until(lambda: con.cluster("info")["cluster_state"] == "ok", "cluster_state:ok")
    for node in nodes:
        con = redis.Redis(port=node.port)
        wait_until(lambda: con.info("replication")["role"] == "master"
                   or con.info("replication").get("master_link_status") == "up",
                   "every replica to sync")
    # Each node learns of the others' replicas by gossip, after they synced: a client's slot
    # map read from a node that has not yet lists no replica (read_from_replicas, durability).
    for node in nodes:
        con = redis.Redis(port=node.port)
        wait_until(lambda: all(len(shard) > 3 for shard in con.execute_command("CLUSTER", "SLOTS")),
                   "every node to list every replica")
    return nodes


@contextlib.contextmanager
def cluster_nodes(node_timeout_ms: int = 5000):
    """A cluster's nodes, killed (and their directory removed) at the end."""
    _require_module_built()
    workdir = tempfile.TemporaryDirectory(prefix="seckill-py-")
    nodes = []
    try:
        nodes = start_cluster(workdir.name, node_timeout_ms)
        yield nodes
    finally:
        for node in nodes:
            node.kill()
        workdir.cleanup()


@contextlib.contextmanager
def _single_node(module: bool):
    """One server's port, the server killed at the end."""
    if module:
        _require_module_built()
    workdir = tempfile.TemporaryDirectory(prefix="seckill-py-")
    node = Node(workdir.name, module=module)
    try:
        wait_until(lambda: _answers(node.port), "the server")
        yield node.port
    finally:
        node.kill()
        workdir.cleanup()


@pytest.fixture(scope="session")
def cluster():
    """One cluster for the whole session; tests that disturb it make their own."""
    with cluster_nodes() as nodes:
        yield redis.RedisCluster(host="127.0.0.1", port=nodes[0].port, protocol=PROTOCOL)


@pytest.fixture
def own_cluster():
    """A cluster of this test's own, to kill a node of: its nodes."""
    with cluster_nodes() as nodes:
        yield nodes


@pytest.fixture
def server():
    """One server with the module: its port."""
    with _single_node(module=True) as port:
        yield port


@pytest.fixture
def bare_server():
    """One server without the module: its port."""
    with _single_node(module=False) as port:
        yield port


def master_and_replica(nodes, key):
    """The cluster node objects of ``key``'s master and of its replica."""
    alive = [n for n in nodes if n.process.poll() is None]
    master_port = redis.RedisCluster(host="127.0.0.1", port=alive[0].port).get_node_from_key(key).port
    master = next(n for n in alive if n.port == master_port)
    replicas = [n for n in alive if redis.Redis(port=n.port).info("replication").get("master_port") == master_port]
    return master, (replicas[0] if replicas else None)


def promote(nodes, replica, master):
    """SIGKILL ``master``, then promote ``replica`` at once (CLUSTER FAILOVER TAKEOVER)."""
    master.kill()
    os.kill(replica.process.pid, signal.SIGCONT)
    redis.Redis(port=replica.port).execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
    wait_until(lambda: redis.Redis(port=replica.port).info("replication")["role"] == "master", "the promotion")


async def buy_until_kept(sale, user):
    """``sale.try_buy(user)`` on a ``seckill.asyncio`` sale, sent again under its attempt id
    while it ends ``NotReplicatedError``, as a shop does for a buyer told "confirming": a write
    answered by a master just before a failover (its WAIT cut short) can end so, and its repeat
    then answers from the new master, never buying twice."""
    from seckill import NotReplicatedError

    attempt = None
    while True:
        try:
            return await sale.try_buy(user, attempt_id=attempt)
        except NotReplicatedError as error:
            attempt = error.attempt_id


def link_up(replica: Node) -> bool:
    return redis.Redis(port=replica.port).info("replication").get("master_link_status") == "up"


@contextlib.contextmanager
def one_master_and_replica():
    """A master and its replica (one server each, no cluster), in sync; both killed at the end."""
    _require_module_built()
    workdir = tempfile.TemporaryDirectory(prefix="seckill-py-")
    master, replica = Node(workdir.name), Node(workdir.name)
    try:
        for node in (master, replica):
            wait_until(lambda: _answers(node.port), "the server")
        redis.Redis(port=replica.port).execute_command("REPLICAOF", "127.0.0.1", master.port)
        wait_until(lambda: link_up(replica), "the replica's link")
        yield master, replica
    finally:
        for node in (master, replica):
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.process.pid, signal.SIGCONT)
            node.kill()
        workdir.cleanup()
