"""A run stopping mid-evaluation in a real headless Chromium, served by `whale serve`: the runs
list and the run page say "stopping" and how many rollouts it waits for, and the rollout list
tells the running rollouts from the queued ones."""

import asyncio
import os
import re

import pytest

from app.config import Settings
from app.db.schema import now
from app.workbench import Workbench
from tests.api.synthetic_store import Store
from tests.conftest import MISSING, whale_serve
from tests.web.conftest import ARTIFACTS, CHROMIUM
from tests.web.test_holding_pages import loop_run, running_weight_phase

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{MISSING}no Chromium at {CHROMIUM}")


@pytest.fixture
def served(tmp_path):
    workbench = Workbench(Settings(home=tmp_path / "home"), say=lambda _: None)
    store = Store(workbench)
    # "stopping": a status `whale serve` does not resume (resuming would start a model)
    run = loop_run(store, "stopping", {"rollouts": 256}, desired="stopped")
    harness, base = store.harness(run), store.checkpoint()
    running_weight_phase(store, run, harness, base)
    evaluation = store.evaluation(run, harness, base, n_tasks=8, split="train")
    rollouts = store.rollouts(evaluation, ["pending"] * 8)
    for rollout in rollouts[:3]:
        store.write_values(rollout, started_at=now())
    asyncio.run(workbench.stop())
    with whale_serve({**os.environ, "WHALE_HOME": str(tmp_path / "home")}) as url:
        yield url, run


def test_a_stopping_run_says_what_it_waits_for_and_which_rollouts_run(served, page):
    from playwright.sync_api import expect

    url, run = served
    page.goto(url + "/runs")
    row = page.locator("#runs tbody tr").first
    expect(row.locator(".badge")).to_have_text("stopping")
    expect(row).to_contain_text("weight phase 1")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "runs-stopping.png"), full_page=True)

    page.goto(f"{url}/runs/{run.id}")
    expect(page.locator(".run-status .badge")).to_have_text("stopping")
    expect(page.locator("#activity")).to_have_text("stopping: waiting for 3 rollouts in flight")
    page.screenshot(path=str(ARTIFACTS / "run-stopping.png"), full_page=True)

    page.goto(f"{url}/rollouts?run={run.id}")
    expect(page.locator(".chip.status-running")).to_have_text(re.compile(r"running\s*3"))
    expect(page.locator(".chip.status-queued")).to_have_text(re.compile(r"queued\s*5"))
    page.locator(".chip.status-queued").click()
    expect(page).to_have_url(re.compile(r"status=queued"))
    expect(page.locator("table tbody tr")).to_have_count(5)
    expect(page.locator("table tbody .badge.status-queued")).to_have_count(5)
    page.screenshot(path=str(ARTIFACTS / "rollouts-queued.png"), full_page=True)
    assert page.errors == []
