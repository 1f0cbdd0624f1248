"""The UI in a real headless Chromium over a store holding a real evaluation by the real model."""

import re

import pytest

from tests.conftest import MISSING
from tests.web.conftest import ARTIFACTS, CHROMIUM

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{MISSING}no Chromium at {CHROMIUM}")


def test_click_from_runs_to_a_failing_trace(server_url, page):
    from playwright.sync_api import expect

    page.goto(server_url + "/")
    expect(page.locator("h1")).to_have_text("Runs")
    page.locator("table a[href^='/runs/']").first.click()

    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    expect(page.locator("#run-live")).to_contain_text("Evaluations")
    expect(page.locator("#run-live")).to_contain_text("seed.py")
    failing = page.locator("#recent-failures a[href^='/rollouts/']")
    expect(failing.first).to_be_attached()  # the real evaluation has at least one failing rollout
    failing.first.click()

    expect(page).to_have_url(re.compile(r"/rollouts/\d+$"))
    expect(page.locator("h1 .badge")).to_have_text(re.compile("fail|error|timeout"))
    model_call = page.locator("article.step-model").first
    expect(model_call).to_contain_text("model call")
    expect(model_call.locator(".msg.role-user .content")).to_contain_text("What is")
    completion = model_call.locator(".msg.completion .content")
    expect(completion).to_be_visible()
    assert completion.inner_text().strip(), "the completion text should be shown"

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "trace.png"), full_page=True)
    assert page.errors == []
