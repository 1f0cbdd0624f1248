"""The forms' refusals in a real headless Chromium, served by `whale serve` over a synthetic
store: a page left open across a server restart holds a stale CSRF token, and its start form and
control buttons then say so beside themselves, the form and its text kept, instead of doing
nothing."""

import asyncio
import os

import pytest

from app.config import Settings
from app.db.schema import Run
from app.workbench import Workbench
from tests.api.synthetic_store import Store
from tests.conftest import MISSING, whale_serve
from tests.web.conftest import ARTIFACTS, CHROMIUM

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{MISSING}no Chromium at {CHROMIUM}")


@pytest.fixture
def served(tmp_path):
    workbench = Workbench(Settings(home=tmp_path / "home"), say=lambda _: None)
    # a run with buttons that `whale serve` does not resume (resuming would start a model)
    run = Store(workbench).write(
        Run(
            name="steered",
            kind="experiment",
            domain="arith",
            status="stopping",
            strategy="whale",
            desired="running",
            config={"experiment": {}},
        )
    )
    asyncio.run(workbench.stop())
    with whale_serve({**os.environ, "WHALE_HOME": str(tmp_path / "home")}) as url:
        yield url, run


def stale_token(page) -> None:
    """What a restart does to an open page: its CSRF token is the old server's."""
    page.evaluate(
        "document.body.setAttribute('hx-headers', JSON.stringify({'X-CSRF-Token': 'old'}))"
    )


def test_refusals_show_beside_the_form_and_the_button(served, page):
    from playwright.sync_api import expect

    url, run = served
    page.goto(url + "/runs")
    page.locator("#start-run summary").click()
    page.locator("#experiment").fill('name = "typed"\n')
    stale_token(page)
    page.get_by_role("button", name="Start run").click()
    refusal = page.locator("#start-refusal .refusal")
    expect(refusal).to_contain_text("refused (HTTP 403)")
    expect(refusal).to_contain_text("CSRF token")
    expect(page.locator("#experiment")).to_have_value('name = "typed"\n')  # the form stays

    page.goto(f"{url}/runs/{run.id}")
    stale_token(page)
    page.on("dialog", lambda dialog: dialog.accept())  # the button asks for confirmation
    page.locator("button.control-pause").click()
    shown = page.locator("#control-refusal .refusal")
    expect(shown).to_contain_text("refused (HTTP 403)")
    expect(page.locator("#controls")).to_be_visible()
    page.wait_for_timeout(2500)  # the live part refreshes: the message stays
    expect(shown).to_contain_text("CSRF token")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-control-refused.png"))
    assert page.errors == []
