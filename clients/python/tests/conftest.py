"""A real local Redis Cluster (3 masters, each with a replica) with the seckill module, for the whole test session;
its servers are killed at the end, and with this process if it dies."""

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


def _free_port() -> int:
    # At most 55535: a cluster node also listens on its port + 10000.
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port <= 55535:
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


def _answers(port: int) -> bool:
    try:
        return redis.Redis(port=port, socket_timeout=1).ping()
    except redis.exceptions.ConnectionError:
        return False


@pytest.fixture(scope="session")
def cluster():
    if not pathlib.Path(MODULE).exists():
        pytest.fail(f"{MODULE} is missing: run `make test` (or `cargo build --release`) first")
    workdir = tempfile.TemporaryDirectory(prefix="seckill-py-")
    servers, ports = [], []
    try:
        for _ in range(6):
            port = _free_port()
            node_dir = pathlib.Path(workdir.name) / str(port)
            node_dir.mkdir()
            servers.append(
                subprocess.Popen(
                    [SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir),
                     "--save", "", "--appendonly", "no", "--cluster-enabled", "yes",
                     "--cluster-node-timeout", "5000", "--logfile", str(node_dir / "server.log"),
                     "--loadmodule", MODULE],
                    stdout=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent,
                )
            )
            ports.append(port)
        for port in ports:
            wait_until(lambda: _answers(port), f"the server on {port}")
        subprocess.run(
            [CLI, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports], "--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            capture_output=True,
        )
        for port in ports:
            node = redis.Redis(port=port)
            wait_until(lambda: node.cluster("info")["cluster_state"] == "ok", "cluster_state:ok")
        for port in ports:
            node = redis.Redis(port=port)
            wait_until(lambda: node.info("replication")["role"] == "master"
                       or node.info("replication").get("master_link_status") == "up",
                       "every replica to sync")
        yield redis.RedisCluster(host="127.0.0.1", port=ports[0])
    finally:
        for server in servers:
            server.kill()
            server.wait()
        workdir.cleanup()
