"""The exporter's live page in a real browser (Debian's chromium, headless, through Debian's
chromedriver): each sale's numbers equal SECKILL.INFO's and follow purchases without a reload;
a node going down shows; a screenshot is saved under target/screenshots/."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import redis
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools"))
from chromium import headless_chromium, text, texts  # noqa: E402
MODULE = ROOT / "target/release/libseckill.so"
EXPORTER = ROOT / "target/release/seckill-exporter"
SCREENSHOTS = ROOT / "target/screenshots"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def answers(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.exceptions.ConnectionError:
        return False


@pytest.fixture
def servers():
    """Two servers with the module: their ports (the second to be killed)."""
    folder = tempfile.mkdtemp(prefix="seckill-page-")
    processes, ports = [], []
    for _ in range(2):
        port = free_port()
        processes.append(subprocess.Popen(
            [os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(port), "--bind", "127.0.0.1",
             "--save", "", "--dir", folder, "--loadmodule", str(MODULE)],
            stdout=subprocess.DEVNULL))
        ports.append(port)
    for port in ports:
        wait_until(lambda: answers(port), f"server {port}")
    yield ports, processes
    for process in processes:
        process.kill()
        process.wait()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def exporter(servers):
    ports, _ = servers
    address = f"127.0.0.1:{free_port()}"
    args = [str(EXPORTER), "--listen", address, "--timeout-ms", "800"]
    for port in ports:
        args += ["--redis", f"redis://127.0.0.1:{port}"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    host, port = address.split(":")
    wait_until(lambda: socket.socket().connect_ex((host, int(port))) == 0, "the exporter")
    yield address
    process.kill()
    process.wait()


@pytest.fixture
def browser():
    driver = headless_chromium()
    yield driver
    driver.quit()


def shown(driver, sale: str, field: str) -> str:
    return text(driver, f'.sale[data-sale="{sale}"] [data-field="{field}"]')


def info(con: redis.Redis, key: str) -> dict:
    reply = con.execute_command("SECKILL.INFO", key)
    if isinstance(reply, dict):
        return {k.decode(): v for k, v in reply.items()}
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def test_the_live_page_follows_purchases_without_a_reload(servers, exporter, browser):
    (port, other), processes = servers
    con = redis.Redis(port=port)
    con.execute_command("SECKILL.INIT", "sneakers", 50)
    con.execute_command("SECKILL.INIT", "tickets", 20, "QUEUE")
    for user in ("a", "b", "c"):
        con.execute_command("SECKILL.JOIN", "tickets", user)
    con.execute_command("LOCK.ACQUIRE", "order-lock:a", "tok", 60_000)
    for n in range(5):
        con.execute_command("SECKILL.TRY", "sneakers", f"early{n}")

    browser.get(f"http://{exporter}/")
    browser.execute_script("window.loadedOnce = true")
    wait_until(lambda: shown(browser, "sneakers", "remaining") == str(info(con, "sneakers")["remaining"]),
               "the page to show SECKILL.INFO's units left")
    assert shown(browser, "sneakers", "sold") == str(info(con, "sneakers")["sold"]) == "5"
    assert shown(browser, "tickets", "waiting") == "3"
    assert shown(browser, "tickets", "admitted") == "0"

    for n in range(12):
        con.execute_command("SECKILL.TRY", "sneakers", f"late{n}")
    after = info(con, "sneakers")
    assert after["remaining"] == 33
    wait_until(lambda: shown(browser, "sneakers", "remaining") == "33", "the page to follow the purchases")
    assert shown(browser, "sneakers", "buyers") == str(after["buyers"])
    rate = shown(browser, "sneakers", "purchases/s")
    assert rate.replace(".", "", 1).isdigit(), f"purchases a second is a number: {rate!r}"
    assert browser.execute_script("return window.loadedOnce === true"), "updated without a reload"
    assert int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-updates")) >= 2
    assert texts(browser, 'tr[data-lock="order-lock:a"] td')[:3] == ["order-lock:a", "held", "0"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#refusals tr")) == 5

    processes[1].kill()
    processes[1].wait()
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, f'.nodes span.down[data-instance="127.0.0.1:{other}"]'),
               "the killed node shown down")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "canvas"), "the charts")
    WebDriverWait(browser, 10).until(lambda d: d.execute_script(
        "return [...document.querySelectorAll('canvas')].every(c => c.width > 0)"))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / "live-page.png"
    browser.save_screenshot(str(path))
    print(f"screenshot: {path}")
    assert path.stat().st_size > 10_000
