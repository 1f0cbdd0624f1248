"""Fixtures of the page tests: the API tests' synthetic store, and a headless Chromium page."""

from pathlib import Path

import pytest

from tests.api.synthetic_store import client, store, workbench  # noqa: F401 - fixtures
from tests.conftest import AUTH

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        # every request carries the access token of the servers tests start (tests/conftest.py)
        page = browser.new_page(viewport={"width": 1280, "height": 900}, extra_http_headers=AUTH)
        page.errors = []  # JavaScript errors, e.g. htmx failing to load
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        yield page
        browser.close()
