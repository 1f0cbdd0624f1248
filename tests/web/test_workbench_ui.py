"""The workbench in a real headless Chromium, on a real `whale serve` running a real quick loop
with the demo model: start a run from the runs page, pause and resume it with the buttons, watch
its curve, then follow a researcher's path: the lineage, a diff, the failing traces, one trace,
two traces side by side. Every page's screenshot is kept in test-artifacts/ui-*.png."""

import re
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import MISSING, whale_serve
from tests.loop.conftest import quick_toml
from tests.loop.test_crash import wait_for
from tests.web.conftest import ARTIFACTS, CHROMIUM

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{MISSING}no Chromium at {CHROMIUM}")


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"ui-{name}.png"), full_page=True)


def rollout_with_another_harness(db: Path, run_id: int) -> int:
    """A rollout of the run, failing if one is, whose task some other harness also ran."""
    with sqlite3.connect(db) as con:
        (rollout_id,) = con.execute(
            """SELECT r.id FROM rollout r JOIN evaluation e ON e.id = r.evaluation_id
                WHERE r.run_id = ? AND e.split = 'harness' AND EXISTS (
                      SELECT 1 FROM rollout o JOIN evaluation oe ON oe.id = o.evaluation_id
                       WHERE o.task_id = r.task_id AND oe.split = 'harness'
                         AND o.harness_id != r.harness_id AND o.status IN ('pass', 'fail'))
                ORDER BY r.status != 'fail', r.id LIMIT 1""",
            (run_id,),
        ).fetchone()
    return rollout_id


@pytest.mark.slow
def test_a_researcher_drives_a_run_from_the_browser(whale_env, page):
    from playwright.sync_api import expect

    db = Path(whale_env["WHALE_HOME"]) / "whale.db"
    page.on("dialog", lambda dialog: dialog.accept())  # the buttons ask for confirmation
    with whale_serve(whale_env) as url:
        # start a run from the runs page
        page.goto(url + "/runs")
        page.fill("#experiment", quick_toml("ui-run", rollouts=44))
        page.click("#start-run button[type=submit]")
        expect(page).to_have_url(re.compile(r"/runs/\d+$"), timeout=120_000)
        run_id = int(page.url.rsplit("/", 1)[1])
        status = page.locator(".run-status .badge")
        expect(status).to_have_text("running", timeout=120_000)

        # pause and resume it with the buttons; the page follows without a reload
        wait_for(db, "SELECT count(*) > 2 FROM rollout WHERE status != 'pending'", 300)
        page.fill("#control-reason", "reading traces")
        page.click("button.control-pause")
        expect(status).to_have_text("paused", timeout=120_000)
        expect(page.locator("button.control-resume")).to_be_enabled()
        expect(page.locator("button.control-pause")).to_be_disabled()
        expect(page.locator("#events")).to_contain_text("pause asked from ui: reading traces")
        shot(page, "run-paused")
        page.click("button.control-resume")
        expect(status).to_have_text("running", timeout=60_000)

        # the run ends by itself; its curves are drawn
        expect(status).to_have_text("done", timeout=600_000)
        expect(page.locator("#timeline .phase-block")).not_to_have_count(0)
        test_curve = page.locator("#curves svg").first
        expect(test_curve.locator("polyline")).to_have_count(1)
        # test points at the start and after the phases
        expect(test_curve.locator("circle").nth(1)).to_be_attached()
        shot(page, "run")

        # the lineage: the harness tree of both harness phases; a candidate opens with its diff
        page.click("a[href$='/lineage']")
        expect(page).to_have_url(re.compile(r"/lineage$"))
        nodes = page.locator("#lineage-tree a[id^='node-']")
        expect(nodes.nth(2)).to_be_attached()  # the seed and at least two candidates
        shot(page, "lineage")
        nodes.nth(1).click()
        expect(page).to_have_url(re.compile(r"/harnesses/\d+"))
        expect(page.locator("table.diff")).to_be_visible()
        changed = "table.diff tr.diff-replace, table.diff tr.diff-insert, table.diff tr.diff-delete"
        expect(page.locator(changed).first).to_be_attached()  # the knob it changed
        shot(page, "harness-diff")

        # the failing traces of the run, filtered in the URL; one of them, then two side by side
        page.goto(f"{url}/rollouts?run={run_id}")
        page.click("a.chip.status-fail")
        expect(page).to_have_url(re.compile(r"status=fail"))
        failing = page.locator("table a[href^='/rollouts/']")
        expect(failing.first).to_be_attached()
        shot(page, "traces-failing")
        failing.first.click()
        expect(page.locator("h1 .badge")).to_have_text("fail")
        expect(page.locator("article.step-model").first).to_contain_text("model call")
        shot(page, "trace")
        # side by side from a failing rollout of a task that another harness also ran: the
        # harness phases score their candidates on the same tasks, whatever the model answered
        # (a test rollout has none when the run ended on the weights and harness it began with)
        page.goto(f"{url}/rollouts/{rollout_with_another_harness(db, run_id)}")
        page.locator("#compare-with ~ table a", has_text="compare side by side").first.click()
        expect(page.locator(".trace-column")).to_have_count(2)
        shot(page, "traces-side-by-side")

        # several runs on one chart: here the one run, picked on the runs page
        page.goto(url + "/runs")
        page.check(f"input[name=ids][value='{run_id}']")
        page.click("text=Compare selected")
        expect(page.locator("#compare")).to_contain_text("ui-run")
        expect(page.locator("svg polyline")).to_have_count(1)
        shot(page, "compare")
        assert page.errors == []
