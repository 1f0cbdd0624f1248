"""Runs, phases and rollouts in a real headless Chromium, served by `whale serve` over one
synthetic store: a training job leads to its weight phase's section of the run page; the compare
table fits a 1400 px window and its paired baseline is picked from a menu; a run and a filtered
rollout list download as files; the rollout filters offer names; a refused start keeps its
preset. Screenshots go to test-artifacts/pages-*.png."""

import asyncio
import csv
import io
import os
import re
import tarfile

import pytest

from app.config import Settings
from app.workbench import Workbench
from tests.api.synthetic_store import Store
from tests.api.synthetic_training import loop_weight_phases
from tests.conftest import MISSING, WEB_TOKEN, whale_serve
from tests.report.synthetic_experiments import experiments
from tests.report.test_intervals import scored_run
from tests.web.conftest import ARTIFACTS, CHROMIUM

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{MISSING}no Chromium at {CHROMIUM}")

LONG_NAME = "a run whose name is as long as people make them, seed 3, k=2, patience 4"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`whale serve` over a store with the strategies' runs, two scored runs to pair, and a loop
    run with two weight phases whose second phase's rollouts include an infrastructure failure."""
    home = tmp_path_factory.mktemp("pages") / "home"
    workbench = Workbench(Settings(home=home), say=lambda _: None)
    store = Store(workbench)
    filled = experiments(store)
    # a running run would be resumed by `whale serve`, which would load a model for it
    store.write_values(filled.runs["stagewise"], status="stopped")
    old, _ = scored_run(store, LONG_NAME, passing=set(range(6)))
    new, _ = scored_run(store, "better prompt", passing=set(range(6)) | set(range(10, 22)))
    first, second = loop_weight_phases(
        store, [[["pass", "fail"] * 2, ["pass"] * 4], [["fail"] * 4]]
    )
    tuned = store.harness(first.run, name="tuned.py")
    evaluation = store.evaluation(first.run, tuned, first.checkpoints[-1], n_tasks=3)
    store.rollouts(evaluation, ["pass", "infra", "fail"])
    asyncio.run(workbench.stop())
    with whale_serve({**os.environ, "WHALE_HOME": str(home)}) as url:
        yield (
            url,
            {
                "runs": [*filled.runs.values(), old, new],
                "old": old,
                "new": new,
                "phases": (first, second),
                "tuned": tuned,
            },
        )


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"pages-{name}.png"), full_page=True)


def test_a_training_job_leads_to_its_weight_phase_on_the_run_page(served, page):
    from playwright.sync_api import expect

    url, made = served
    first, second = made["phases"]
    page.goto(f"{url}/training/{second.jobs[0].id}")
    expect(page.locator("h1")).to_contain_text("of weight phase 2")
    shot(page, "training-job")

    page.locator("#job-phase").click()

    expect(page).to_have_url(re.compile(rf"/runs/{first.run.id}#weight-phase-{second.row.id}$"))
    section = page.locator(f"#weight-phase-{second.row.id}")
    expect(section.locator("h2")).to_contain_text("Weight phase 2")
    expect(section).to_contain_text("accept rate 0%")
    expect(section).to_be_in_viewport()  # the link lands on the phase's own section
    one = page.locator(f"#weight-phase-{first.row.id}")
    expect(one.locator("table.training-jobs tbody tr")).to_have_count(2)
    expect(one).to_contain_text("accept rate 75%")
    shot(page, "run-weight-phases")
    assert page.errors == []


def test_the_compare_table_fits_1400_px_and_pairs_with_the_baseline_picked(served, page):
    from playwright.sync_api import expect

    url, made = served
    old, new = made["old"], made["new"]
    page.set_viewport_size({"width": 1400, "height": 900})
    ids = "&".join(f"ids={r.id}" for r in [new, *made["runs"][:-1]])  # newest ticked first
    page.goto(f"{url}/runs/compare?{ids}")

    table = page.locator("#compare")
    expect(table).to_contain_text(LONG_NAME)
    oldest = min(r.id for r in made["runs"])
    expect(page.locator("#baseline")).to_have_value(str(oldest))  # the oldest by default
    # the page does not scroll sideways, and the whole table is in the window's width
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    box = table.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 1400, box

    page.locator("#baseline").select_option(str(old.id))

    expect(page).to_have_url(re.compile(rf"baseline={old.id}"))
    expect(table.locator("thead")).to_contain_text(f"final vs #{old.id}")
    better = table.locator("tr", has=page.locator(f"a[href='/runs/{new.id}']"))
    expect(better).to_contain_text("+0.500")
    expect(better).to_contain_text("24 tasks, paired")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    box = table.bounding_box()
    assert box["x"] + box["width"] <= 1400, box
    shot(page, "compare-1400")
    assert page.errors == []


def test_a_run_and_a_filtered_rollout_list_download_as_files(served, page, tmp_path):
    from playwright.sync_api import expect

    url, made = served
    run = made["phases"][0].run
    # A browser sends the token's cookie with a download (not the header a page's requests
    # get): the cookie a first visit with ?token= sets, as for a user.
    page.goto(f"{url}/runs/{run.id}?token={WEB_TOKEN}")
    with page.expect_download() as got:
        page.locator("#export-link").click()
    archive = tmp_path / got.value.suggested_filename
    got.value.save_as(archive)
    assert archive.name == f"whale-export-run-{run.id}.tar.gz"
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    root = f"whale-export-run-{run.id}"
    for name in ("run.json", "rollouts.jsonl", "training_jobs.jsonl", "phases.jsonl"):
        assert f"{root}/{name}" in names

    page.goto(f"{url}/rollouts?run={run.id}")
    page.locator("a.chip.status-fail").click()
    expect(page).to_have_url(re.compile(r"status=fail"))
    shown = page.locator("table tbody tr").count()
    with page.expect_download() as got:
        page.locator("#download-csv").click()
    assert got.value.suggested_filename == f"rollouts-run-{run.id}.csv"
    rows = list(csv.DictReader(io.StringIO(open(got.value.path(), encoding="utf-8").read())))
    assert len(rows) == shown and {r["status"] for r in rows} == {"fail"}
    with page.expect_download() as got:
        page.locator("#download-jsonl").click()
    assert len(open(got.value.path(), encoding="utf-8").read().splitlines()) == shown
    assert page.errors == []


def test_the_rollout_filters_offer_names_and_the_title_names_the_run(served, page):
    from playwright.sync_api import expect

    url, made = served
    run, tuned = made["phases"][0].run, made["tuned"]
    page.goto(f"{url}/rollouts?run={run.id}")
    expect(page).to_have_title(f"Rollouts of run {run.id} · {run.name} · Whale")
    expect(page.locator("a.chip.status-infra")).to_contain_text("infra 1")

    page.locator("#filters select[name=harness]").select_option(label="tuned.py")
    page.locator("#filters button[type=submit]").click()

    expect(page).to_have_url(re.compile(rf"harness={tuned.id}"))
    expect(page.locator("h1")).to_contain_text("under tuned.py")
    expect(page.locator("table tbody tr")).to_have_count(3)
    expect(page.locator("#filters select[name=harness]")).to_have_value(str(tuned.id))
    phases = page.locator("#filters select[name=phase] option")
    expect(phases).to_contain_text(["any", "weight phase 1", "harness phase 1", "weight phase 2"])
    shot(page, "rollouts-by-name")

    page.goto(f"{url}/rollouts?run={run.id}&harness=tuned.py")  # a name typed in the URL
    expect(page.locator("table tbody tr")).to_have_count(3)
    page.goto(f"{url}/rollouts?run={run.id}&harness=nope.py")
    expect(page.locator("#error-message")).to_contain_text(
        f"No harness named 'nope.py' in run {run.id}"
    )
    shot(page, "rollouts-unknown-name")
    assert page.errors == []


def test_a_refused_start_keeps_the_preset_picked(served, page):
    from playwright.sync_api import expect

    url, _ = served
    page.goto(url + "/runs")
    page.locator("#start-run summary").click()
    page.locator("#preset").select_option("arith-whale.toml")
    expect(page.locator("#experiment")).to_have_value(re.compile(r"strategy"))
    page.locator("#experiment").press("Control+End")
    page.locator("#experiment").type("\n[nonsense]\nrollout = 5\n")
    picked = page.locator("#preset option:checked")
    expect(picked).to_have_text("experiments/arith-whale.toml (edited)")
    page.get_by_role("button", name="Start run").click()

    error = page.locator("#start-error")
    expect(error).to_contain_text("nonsense: Extra inputs are not permitted")
    assert not error.inner_text().startswith("ui:")
    expect(page.locator("#preset")).to_have_value("arith-whale.toml")
    expect(page.locator("#experiment")).to_have_value(re.compile(r"rollout = 5"))
    shot(page, "start-refused")
    assert page.errors == []
