"""``make shop`` as the README shows it: it prints the shop's URL, serves the product page with
the operator link to the exporter's live page, and Ctrl-C stops everything it started."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from typing import Dict

import httpx
import pytest

from conftest import REPO, servers
from shop.launch import listening


def free_base(count: int) -> int:
    """A port such that it and the next ``count - 1`` and their cluster bus ports (+10 000) are
    free, all below the kernel's ephemeral range: a port in that range may be taken by any
    outgoing connection between the check and the node's start (seen: two of six nodes failed
    to bind)."""
    chance = random.Random()
    while True:
        base = chance.randrange(10_000, 22_000)
        if not any(listening(p) or listening(p + 10_000) for p in range(base, base + count)):
            return base


@pytest.mark.parametrize("cluster", [False, True], ids=["one server", "SHOP_CLUSTER=1"])
def test_make_shop_serves_the_shop_and_ctrl_c_stops_all_it_started(cluster, tmp_path):
    # The local cluster of `make cluster`, on ports of this test's own (picked first, so that
    # no other part gets one of its six): started by make shop, and stopped by it too.
    base = free_base(6)
    ports: Dict[str, int] = {}
    for name in ("SHOP_PORT", "PAYMENT_PORT", "SHOP_REDIS_PORT", "SHOP_EXPORTER_PORT"):
        while (port := servers._free_port()) in range(base, base + 6):
            pass
        ports[name] = port
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}, "SHOP_OPENS_IN_S": "30"}
    if cluster:
        env.update(SHOP_CLUSTER="1", CLUSTER_PORT=str(base), CLUSTER_DIR=str(tmp_path / "cluster"))
        del ports["SHOP_REDIS_PORT"]
        ports.update({f"cluster node {i}": base + i for i in range(6)})
    make = subprocess.Popen(["make", "--no-print-directory", "shop"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert make.stdout is not None
        printed = []
        deadline = time.monotonic() + 300  # make builds first (nothing to do after make test's build)
        while not any(line.startswith("Ctrl-C stops it") for line in printed):
            assert time.monotonic() < deadline and make.poll() is None, "".join(printed)
            printed.append(make.stdout.readline())
        url = f"http://127.0.0.1:{ports['SHOP_PORT']}/"
        assert any(line.startswith(f"the shop: {url}") for line in printed), printed
        assert any("cluster://" in line for line in printed) == cluster, printed
        page = httpx.get(url)
        assert page.status_code == 200 and page.headers["x-shop-step"] == "product"
        assert 'id="countdown"' in page.text
        assert httpx.get(url + "metrics").status_code == 200
        assert any(line.startswith(f"its metrics, for Prometheus: {url}metrics") for line in printed), printed
        exporter = f"http://127.0.0.1:{ports['SHOP_EXPORTER_PORT']}/"
        assert f'href="{exporter}"' in page.text
        servers.wait_until(lambda: listening(ports["SHOP_EXPORTER_PORT"]), "the exporter")
        assert httpx.get(exporter + "metrics").status_code == 200

        os.killpg(make.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground group
        make.wait(60)
        for name, port in ports.items():
            servers.wait_until(lambda: not listening(port), f"{name} {port} to close", timeout=10)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
