"""A training job page in a real headless Chromium, served by `whale serve` over a synthetic
weight phase: the loss chart is drawn and the examples link leads to the accepted rollouts."""

import asyncio
import os
import re

import pytest

from app.config import Settings
from app.workbench import Workbench
from tests.api.synthetic_store import Store
from tests.api.synthetic_training import weight_phase
from tests.conftest import MISSING, whale_serve
from tests.web.conftest import ARTIFACTS, CHROMIUM

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{MISSING}no Chromium at {CHROMIUM}")


@pytest.fixture
def trained(tmp_path):
    """A store holding a finished weight phase of two steps, written and closed."""
    workbench = Workbench(Settings(home=tmp_path / "home"), say=lambda _: None)
    phase = weight_phase(Store(workbench), [["pass", "fail", "pass", "pass"], ["pass", "fail"]])
    asyncio.run(workbench.stop())
    return tmp_path / "home", phase


@pytest.fixture
def served(trained):
    home, phase = trained
    with whale_serve({**os.environ, "WHALE_HOME": str(home)}) as url:
        yield url, phase


def test_job_page_shows_the_loss_chart_and_links_its_examples(served, page):  # noqa: F811
    from playwright.sync_api import expect

    url, phase = served
    job = phase.jobs[0]
    page.goto(f"{url}/training/{job.id}")

    expect(page.locator("h1")).to_contain_text(f"Training job {job.id}")
    chart = page.locator("#loss-chart svg")
    expect(chart).to_be_visible()
    expect(chart.locator("polyline")).to_have_count(1)
    box = chart.bounding_box()
    assert box["width"] > 300 and box["height"] > 100, "the chart should be readable, not a speck"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "training-job.png"), full_page=True)

    examples = page.locator("#accepted-link")
    expect(examples).to_contain_text("3 accepted rollouts")
    examples.click()
    accepted = rf"/rollouts\?evaluation={phase.sampling[0].id}&status=pass$"
    expect(page).to_have_url(re.compile(accepted))
    expect(page.locator("table tbody tr")).to_have_count(3)
    assert page.errors == []
