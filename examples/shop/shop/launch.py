"""``make shop``: the module's server (or the local cluster with ``SHOP_CLUSTER=1``), a sale,
the fake payment provider, the exporter's live page when it is built, and the shop on uvicorn
with several workers; prints the URL and stops everything it started on Ctrl-C. The tests start
the same parts through these functions."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import redis

import seckill
from seckill import SaleSpec

from .metrics import MULTIPROC_DIR
from .settings import Settings

SHOP_DIR = Path(__file__).resolve().parents[1]
REPO = SHOP_DIR.parents[1]
MODULE = REPO / "target/release/libseckill.so"
EXPORTER = REPO / "target/release/seckill-exporter"


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for_port(port: int, what: str, timeout_s: float = 30.0, process: Optional["subprocess.Popen[bytes]"] = None) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if listening(port):
            return
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} is not listening on {port}")
        time.sleep(0.05)


def spawn(args: List[str], env: Optional[Dict[str, str]] = None, log: Optional[Path] = None) -> "subprocess.Popen[bytes]":
    """A child in its own process group (uvicorn's workers are stopped with it)."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - the child's to keep
    return subprocess.Popen(args, cwd=SHOP_DIR, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(process: "subprocess.Popen[bytes]", sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
    """Stops a child and its process group (SIGKILL if it has not stopped in time)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass
    # Workers left of a killed uvicorn parent: its group goes too.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def start_provider(port: int, latency_ms: str = "100", failure_rate: float = 0.0, log: Optional[Path] = None
                   ) -> "subprocess.Popen[bytes]":
    process = spawn([sys.executable, "-m", "uvicorn", "shop.provider:app", "--host", "127.0.0.1", "--port", str(port),
                     "--log-level", "warning"],
                    {"PAYMENT_LATENCY_MS": latency_ms, "PAYMENT_FAILURE_RATE": str(failure_rate)}, log)
    wait_for_port(port, "the payment provider", process=process)
    return process


def start_shop(port: int, env: Dict[str, str], workers: int = 4, log: Optional[Path] = None) -> "subprocess.Popen[bytes]":
    # The workers' metric files (shop/metrics.py), emptied at each start: a new shop's counts
    # start from zero, as a restarted process's do (Prometheus reads that as a reset).
    if log is None:
        counts = Path(tempfile.mkdtemp(prefix="seckill-shop-metrics-"))
    else:
        counts = log.parent / f"metrics-{port}"
        shutil.rmtree(counts, ignore_errors=True)
        counts.mkdir(parents=True)
    process = spawn([sys.executable, "-m", "uvicorn", "shop.app:app", "--host", "127.0.0.1", "--port", str(port),
                     "--workers", str(workers), "--log-level", "warning", "--timeout-graceful-shutdown", "2"],
                    {**env, MULTIPROC_DIR: str(counts)}, log)
    wait_for_port(port, "the shop", process=process)
    return process


def default_spec(stock: int, opens_in_s: float, admit_per_s: int) -> SaleSpec:
    """The shop's sale: a hold of 5 minutes to pay, a fair queue admitting ``admit_per_s``
    buyers a second, 2 minutes to buy once admitted, a place kept 30 s after a page closed
    without a word (a crashed browser; a closed page leaves at once)."""
    return SaleSpec(stock=stock, limit=1, hold_ms=300_000, start_ms=int((time.time() + opens_in_s) * 1000),
                    events=True, queue=True, admit_rate=(admit_per_s, 1_000), window_ms=120_000,
                    presence_ms=30_000)


def create_sale(target: str, name: str, spec: SaleSpec) -> None:
    """Makes (or makes again) the sale ``name`` on ``target`` (a SHOP_REDIS value)."""
    settings = Settings(redis=target)
    if settings.cluster:
        host, port = settings.nodes()[0]
        cluster = redis.RedisCluster(host=host, port=port)
        seckill.PartitionedSale.create(cluster, name, spec, replace=True)
        cluster.close()
    else:
        client = redis.Redis.from_url(target)
        seckill.Sale.create(client, name, spec, replace=True)
        client.close()


def main() -> None:
    env = os.environ
    shop_port, provider_port = int(env.get("SHOP_PORT", "8000")), int(env.get("PAYMENT_PORT", "8001"))
    started: List["subprocess.Popen[bytes]"] = []
    cluster_started = False
    workdir = tempfile.mkdtemp(prefix="seckill-shop-")
    logs = Path(workdir)
    try:
        if env.get("SHOP_CLUSTER") == "1":
            base = int(env.get("CLUSTER_PORT", "7000"))
            if subprocess.run(["redis-cli", "-p", str(base), "ping"], capture_output=True).returncode != 0:
                cluster_started = True  # stopped at the end, also when its start fails half way
                subprocess.run([str(REPO / "tools/cluster.sh"), "start"], cwd=REPO, check=True)
            target = "cluster://" + ",".join(f"127.0.0.1:{base + i}" for i in range(3))
            exporter_redis = f"redis://127.0.0.1:{base}"
        else:
            port = int(env.get("SHOP_REDIS_PORT", "6380"))
            started.append(spawn([env.get("REDIS_SERVER", "redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                                  "--dir", workdir, "--save", "", "--loadmodule", str(MODULE)], log=logs / "redis.log"))
            wait_for_port(port, "redis-server", process=started[-1])
            target = exporter_redis = f"redis://127.0.0.1:{port}"
        name = env.get("SHOP_SALE", "drop")
        create_sale(target, name, default_spec(int(env.get("SHOP_STOCK", "100")), float(env.get("SHOP_OPENS_IN_S", "60")),
                                               int(env.get("SHOP_ADMIT_PER_S", "5"))))
        started.append(start_provider(provider_port, env.get("PAYMENT_LATENCY_MS", "300"),
                                      float(env.get("PAYMENT_FAILURE_RATE", "0.1")), logs / "provider.log"))
        exporter = None
        if EXPORTER.exists():
            exporter_port = int(env.get("SHOP_EXPORTER_PORT", "9799"))
            exporter = f"http://127.0.0.1:{exporter_port}/"
            started.append(spawn([str(EXPORTER), "--redis", exporter_redis, "--listen", f"127.0.0.1:{exporter_port}"],
                                 log=logs / "exporter.log"))
        started.append(start_shop(shop_port, {"SHOP_REDIS": target, "SHOP_SALE": name,
                                              "SHOP_DB": str(Path(workdir) / "orders.db"),
                                              "SHOP_PAYMENTS": f"http://127.0.0.1:{provider_port}",
                                              "SHOP_EXPORTER": exporter or ""},
                                  workers=int(env.get("SHOP_WORKERS", "4")), log=logs / "shop.log"))
        print(f"the shop: http://127.0.0.1:{shop_port}/  (sale '{name}' on {target}; orders and logs in {workdir}, "
              "removed on exit unless SHOP_KEEP_DATA=1)", flush=True)
        print(f"its metrics, for Prometheus: http://127.0.0.1:{shop_port}/metrics", flush=True)
        if exporter:
            print(f"the live sale page: {exporter}", flush=True)
        print("Ctrl-C stops it", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while all(p.poll() is None for p in started):
            time.sleep(0.5)
        print("a part of the shop exited: stopping the rest", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        for process in reversed(started):
            stop(process)
        if cluster_started:
            subprocess.run([str(REPO / "tools/cluster.sh"), "stop"], cwd=REPO, check=False)
        if not env.get("SHOP_KEEP_DATA"):
            shutil.rmtree(workdir, ignore_errors=True)
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
