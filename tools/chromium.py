"""A headless chromium for the tests of the pages we ship (Debian's `chromium`, driven through
Debian's `chromedriver` by Selenium): the exporter's live page and the shop."""

import shutil
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def headless_chromium(window_size: str = "1280,900") -> Any:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={window_size}"):
        options.add_argument(flag)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    return webdriver.Chrome(service=service, options=options)


def texts(driver: Any, selector: str) -> list[str]:
    """The shown text of every element `selector` matches, read in one script: a page that
    redraws (`replaceChildren`) between a look-up and a read would leave a looked-up element
    stale (`StaleElementReferenceException`, seen in CI)."""
    found = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())", selector)
    return [str(text) for text in found]


def text(driver: Any, selector: str) -> str:
    """The shown text of the first element `selector` matches, or "" when there is none."""
    found = texts(driver, selector)
    return found[0] if found else ""
