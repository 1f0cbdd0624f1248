"""Each page is one data function with two renderings: everything its HTML was rendered from is
in its JSON twin under /api, and that JSON has the shape /openapi.json documents."""

import pytest
from fastapi.encoders import jsonable_encoder

from app.web.pages import PAGES
from tests.api.synthetic_lineage import search_run
from tests.api.synthetic_training import weight_phase
from tests.api.test_trace import long_trace
from tests.web.test_dashboard_pages import loop_run


@pytest.fixture
def urls(store) -> dict[str, str]:
    """A URL of every page over one synthetic store that gives each something to show."""
    lineage = search_run(store)
    training = weight_phase(store, [["pass", "fail", "pass", "fail"]])
    run = loop_run(store, "live")
    baseline = loop_run(store, "base", status="done")
    checkpoint = store.checkpoint()
    evaluation = store.evaluation(run, store.harness(run), checkpoint, n_tasks=2, k=2)
    failing, passing, *_ = store.rollouts(evaluation, ["fail", "pass", "pass", "fail"])
    long_trace(store, failing, 60)
    job = training.jobs[0]
    return {
        "/runs": "/runs",
        "/runs/live": f"/runs/live?ids={run.id}",
        "/runs/compare": f"/runs/compare?ids={run.id}&ids={baseline.id}",
        "/runs/{run_id}": f"/runs/{run.id}?baseline={baseline.id}",
        "/runs/{run_id}/live": f"/runs/{run.id}/live?x=wall_s",
        "/runs/{run_id}/checks": f"/runs/{run.id}/checks",
        "/runs/{run_id}/lineage": f"/runs/{lineage.run.id}/lineage",
        "/harnesses/{harness_id}": f"/harnesses/{lineage.e.id}?against={lineage.seed.id}",
        "/training/{job_id}": f"/training/{job.id}",
        "/training/{job_id}/live": f"/training/{job.id}/live",
        "/checkpoints/{checkpoint_id}": f"/checkpoints/{training.checkpoints[0].id}",
        "/rollouts": f"/rollouts?run={run.id}&status=failed",
        "/rollouts/contrast": f"/rollouts/contrast?a_harness={lineage.seed.id}"
        f"&b_harness={lineage.e.id}",
        "/rollouts/compare": f"/rollouts/compare?a={failing.id}&b={passing.id}",
        "/rollouts/{rollout_id}": f"/rollouts/{failing.id}",
    }


def without_the_clock(value):
    """The value with a live run's wall time left out: it grows between the two requests (its
    wall-time budget, and on a wall-time axis the end of its running phase)."""
    if isinstance(value, dict) and "budgets" in value:
        budgets = [b for b in value["budgets"] if b["name"] != "wall_s"]
        curves = value["curves"]
        if curves["x"] == "wall_s":
            phases = [
                {**p, "x1": None} if p["status"] == "running" else p for p in curves["phases"]
            ]
            curves = {**curves, "phases": phases}
        return {**value, "budgets": budgets, "curves": curves}
    return value


def test_every_page_is_exercised_here(urls):
    assert set(urls) == {page.path for page in PAGES}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.path)
def test_the_json_holds_everything_the_page_shows(client, urls, page):
    shown = client.get(urls[page.path])
    data = client.get("/api" + urls[page.path])
    assert shown.status_code == 200 and data.status_code == 200, shown.text[:300]
    context = {k: v for k, v in shown.context.items() if k != "request"}
    drawn = set(page.present(context)) if page.present else set()  # SVG, layout: of the data
    given = data.json()

    for key in context.keys() - drawn:
        assert key in given, f"{page.path}: the page shows {key!r}, its JSON lacks it"
        expected = without_the_clock(jsonable_encoder(context[key]))
        assert expected == without_the_clock(given[key]), f"{page.path}: {key} differs"
    # the documented shape is the real one: every field it names is there, with its type
    assert set(page.response_model.model_fields) <= set(given)
    page.response_model.model_validate(given)


def test_openapi_documents_each_page_with_its_model(client):
    schema = client.get("/openapi.json").json()
    for page in PAGES:
        get = schema["paths"]["/api" + page.path]["get"]
        answer = get["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer == {"$ref": f"#/components/schemas/{page.response_model.__name__}"}
        assert get["description"], f"{page.path} has no description"
    runs = schema["components"]["schemas"]["RunSummary"]["properties"]
    assert {"best_test", "rollouts_left", "phase"} <= set(runs)
    # the HTML twins stay out of the API's documentation
    assert not any(path.startswith(("/runs", "/rollouts")) for path in schema["paths"])
