"""The lineage and harness pages in a real headless Chromium, served by `whale serve` over a
synthetic search: the tree is drawn at a readable size, scrolls sideways inside its box when wide,
its nodes lead to harness pages, and a diff with a very long line stays inside the page."""

import asyncio
import os
import re

import pytest

from app.config import Settings
from app.workbench import Workbench
from tests.api.synthetic_lineage import PROGRAM_CODE, large_search_run, search_run
from tests.api.synthetic_store import Store
from tests.conftest import MISSING, whale_serve
from tests.web.conftest import ARTIFACTS, CHROMIUM

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{MISSING}no Chromium at {CHROMIUM}")

LONG_LINE = "    PROMPT = " + repr("Think step by step. " * 30)


@pytest.fixture
def served(tmp_path):
    workbench = Workbench(Settings(home=tmp_path / "home"), say=lambda _: None)
    store = Store(workbench)
    small = search_run(store)
    code = PROGRAM_CODE.replace(
        "def run(task, llm, tools):\n", f"def run(task, llm, tools):\n{LONG_LINE}\n"
    )
    long = store.harness(small.run, name="long-prompt", parent_id=small.a.id, code=code)
    large = large_search_run(store)
    asyncio.run(workbench.stop())
    with whale_serve({**os.environ, "WHALE_HOME": str(tmp_path / "home")}) as url:
        yield url, small, long, large


def _no_page_overflow(shown) -> None:
    width = shown.evaluate("document.documentElement.scrollWidth")
    assert width <= shown.viewport_size["width"], f"the page is {width}px wide: something overflows"


def test_lineage_tree_is_readable_and_leads_to_harness_pages(served, page):  # noqa: F811
    from playwright.sync_api import expect

    url, small, _, large = served
    page.goto(f"{url}/runs/{small.run.id}")
    page.locator("#lineage-link").click()
    expect(page).to_have_url(re.compile(rf"/runs/{small.run.id}/lineage$"))

    tree = page.locator("#lineage-tree svg.lineage")
    expect(tree).to_be_visible()
    expect(tree.locator("a.lineage-node")).to_have_count(9)
    expect(tree.locator("a.lineage-node.accepted")).to_have_count(2)
    label = tree.locator(f"#node-{small.c.id} .node-label")
    assert label.evaluate("e => parseFloat(getComputedStyle(e).fontSize)") >= 11
    _no_page_overflow(page)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "lineage.png"), full_page=True)

    tree.locator(f"#node-{small.e.id}").click()
    expect(page).to_have_url(re.compile(rf"/harnesses/{small.e.id}$"))
    expect(page.locator("h1")).to_contain_text("vote")

    page.goto(f"{url}/runs/{large.id}/lineage")
    box = page.locator("#lineage-tree")
    expect(box.locator("a.lineage-node")).to_have_count(97)
    # wider than the page: it scrolls inside its box, the page itself does not
    assert box.evaluate("e => e.scrollWidth > e.clientWidth")
    _no_page_overflow(page)
    box.evaluate("e => e.scrollLeft = e.scrollWidth / 2")
    page.screenshot(path=str(ARTIFACTS / "lineage-large.png"), full_page=False)
    assert page.errors == []


def test_harness_diff_wraps_long_lines_and_compares_against_a_pick(served, page):  # noqa: F811
    from playwright.sync_api import expect

    url, small, long, _ = served
    page.goto(f"{url}/harnesses/{long.id}")

    diff = page.locator("table.diff")
    expect(diff).to_be_visible()
    expect(diff.locator("tr.diff-insert")).to_have_count(1)
    expect(diff.locator("tr.diff-fold").first).to_contain_text("unchanged lines")
    inserted = diff.locator("tr.diff-insert td.diff-new")
    assert inserted.evaluate("e => e.scrollWidth <= e.clientWidth"), "the long line wraps"
    assert inserted.bounding_box()["height"] > 40, "the long line takes several wrapped lines"
    _no_page_overflow(page)
    page.screenshot(path=str(ARTIFACTS / "harness-diff.png"), full_page=True)

    page.select_option("select[name=against]", str(small.seed.id))
    page.get_by_role("button", name="compare").click()
    expect(page).to_have_url(re.compile(rf"/harnesses/{long.id}\?against={small.seed.id}"))
    expect(page.locator("h2#diff")).to_contain_text("Diff against harness")
    expect(diff.locator("tr.diff-replace").first).to_contain_text("SOLVER")

    page.goto(f"{url}/harnesses/{small.seed.id}")
    expect(page.locator("#no-parent")).to_be_visible()
    expect(page.locator("details.full-code .highlight")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "harness-no-parent.png"), full_page=True)
    assert page.errors == []
