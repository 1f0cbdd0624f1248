"""Tags, notes and labels in a real headless Chromium, served by `whale serve` over a synthetic
store: a run is tagged and noted from its page's form, the runs list filters by the tag; a
failed rollout is labelled from its trace page, a label too long is refused in place with the
text kept, and the label filters the rollout list; a harness phase shows its candidates' lines.
Screenshots go to test-artifacts/annotations-*.png."""

import asyncio
import os

import pytest

from app.config import Settings
from app.db.schema import SearchIteration
from app.workbench import Workbench
from tests.api.synthetic_lineage import search_run
from tests.api.synthetic_store import Store
from tests.conftest import MISSING, whale_serve
from tests.web.conftest import ARTIFACTS, CHROMIUM
from tests.web.test_annotations import frontier, labelled_run, with_intervals

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{MISSING}no Chromium at {CHROMIUM}")


@pytest.fixture
def served(tmp_path):
    workbench = Workbench(Settings(home=tmp_path / "home"), say=lambda _: None)
    store = Store(workbench)
    lineage = search_run(store)
    for iteration, front in enumerate(
        [[(lineage.seed, 0.1)], [(lineage.a, 0.4)], [(lineage.c, 0.6), (lineage.a, 0.4)]]
    ):
        store.write(
            SearchIteration(
                run_id=lineage.run.id,
                phase_id=lineage.phase1.id,
                iteration=iteration,
                proposer="llm",
                status="done",
                frontier=frontier(*front),
            )
        )
    seed, a, c, d = lineage.seed, lineage.a, lineage.c, lineage.d
    intervals = {seed.id: (0.02, 0.3), a.id: (0.2, 0.62), c.id: (0.35, 0.81), d.id: (0.12, 0.55)}
    with_intervals(store, lineage.phase1, intervals)
    run, _, rollouts = labelled_run(store)
    asyncio.run(workbench.stop())
    with whale_serve({**os.environ, "WHALE_HOME": str(tmp_path / "home")}) as url:
        yield url, lineage, run, rollouts


def shot(page, name: str, locator=None) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = str(ARTIFACTS / f"annotations-{name}.png")
    (locator or page).screenshot(path=path, **({} if locator else {"full_page": True}))


def annotate(page, url: str, names: str, note: str) -> None:
    """Open the page's edit form, type, save (htmx swaps the section in place)."""
    page.goto(url)
    section = page.locator("section.annotations")
    section.locator("summary").click()
    section.locator("input").fill(names)
    section.locator("textarea").fill(note)
    section.get_by_role("button", name="Save").click()


def test_tag_a_run_and_label_a_trace_from_the_browser(served, page):
    from playwright.sync_api import expect

    url, lineage, run, (missed, *_) = served
    annotate(page, f"{url}/runs/{run.id}", "baseline, seed 3", "lr too high?\nsee the search run")
    expect(page.locator("#run-annotations .user-tag")).to_have_text(["baseline", "seed 3"])
    expect(page.locator("#run-annotations .note")).to_contain_text("see the search run")
    annotate(page, f"{url}/runs/{lineage.run.id}", "whale, ablation", "the candidates' lines")
    expect(page.locator("#run-annotations .user-tag")).to_have_count(2)

    page.goto(url + "/runs")
    expect(page.locator("#tag-filter .chip")).to_have_count(5)  # all runs, and the four tags
    notes = ["lr too high?", "the candidates' lines"]  # newest run first, first lines only
    expect(page.locator("#runs .note-line")).to_have_text(notes)
    page.locator("#tag-filter a", has_text="baseline").click()
    expect(page).to_have_url(f"{url}/runs?tag=baseline")
    expect(page.locator("#runs tbody tr")).to_have_count(1)
    expect(page.locator("#runs tbody")).to_contain_text("lr too high?")
    expect(page.locator("#runs tbody")).not_to_contain_text("see the search run")
    page.wait_for_timeout(10_500)  # the list polls: the filter stays
    expect(page.locator("#runs tbody tr")).to_have_count(1)
    shot(page, "runs-tagged")

    trace = f"{url}/rollouts/{missed.id}"
    annotate(page, trace, "x" * 50, "typed, and kept")
    expect(page.locator("#rollout-annotations .annotation-error")).to_contain_text("at most 40")
    expect(page.locator("#rollout-annotations textarea")).to_have_value("typed, and kept")
    annotate(page, trace, "retrieval miss, format error", "the retriever returned page 2")
    labels = page.locator("#rollout-annotations .user-tag")
    expect(labels).to_have_text(["retrieval miss", "format error"])
    shot(page, "trace-labelled")

    labels.first.click()
    expect(page.locator("h1")).to_contain_text("labelled retrieval miss")
    expect(page.locator("table tbody tr")).to_have_count(1)

    page.goto(f"{url}/runs/{lineage.run.id}")
    chart = page.locator(f"#candidate-lines-{lineage.phase1.id} svg")
    expect(chart.locator("polyline")).to_have_count(4)
    expect(chart.locator(".chart-ci")).to_have_count(5)  # each point's 95% interval
    shot(page, "candidate-lines", page.locator(f"#harness-phase-{lineage.phase1.id}"))
    assert page.errors == []
