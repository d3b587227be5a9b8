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
