"""GET /api/rollouts: every filter, their combinations, keyset paging, the bounded text search;
and /api/rollouts/{id} (the trace)."""

import re

import pytest

from app.db.schema import Phase, Rollout
from app.read import rollouts as rollouts_module
from tests.conftest import error_detail

MIXED = ["pass", "fail", "error", "timeout", "fail", "pass"] * 5
MAX_ID = 2**63 - 1


@pytest.fixture
def run_with_rollouts(store):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=len(MIXED))
    return run, evaluation, store.rollouts(evaluation, MIXED)


@pytest.fixture
def world(store):
    """Two runs, three harnesses, two checkpoints, two phases; answers and errors to search."""
    run1, run2 = store.run(name="first"), store.run(name="second")
    seed, tuned = store.harness(run1, name="seed.py"), store.harness(run1, name="tuned.py")
    other = store.harness(run2, name="other.py")
    base, lora = store.checkpoint("base"), store.checkpoint("lora-1")
    p1 = store.write(Phase(run_id=run1.id, kind="harness", round=1, status="done"))
    p2 = store.write(Phase(run_id=run1.id, kind="weight", round=2, status="done"))
    evaluations = [
        store.evaluation(run1, seed, base, 6, phase_id=p1.id),
        store.evaluation(run1, tuned, base, 6, phase_id=p1.id),
        store.evaluation(run1, tuned, lora, 6, phase_id=p2.id),
        store.evaluation(run2, other, base, 6),
    ]
    rows = []
    for e in evaluations:
        rows += store.rollouts(e, ["pass", "fail", "error", "timeout", "fail", "pass"])
    # something to search for: answers, tracebacks and reasons
    store.write_values(rows[1], answer="I think it is FORTY-two")
    store.write_values(rows[2], error="Traceback ...\nZeroDivisionError: division by zero")
    store.write_values(rows[9], answer="forty two")
    store.write_values(rows[20], error="ValueError: 100% sure_not", reason="exception")
    return {
        "runs": (run1, run2),
        "harnesses": (seed, tuned, other),
        "checkpoints": (base, lora),
        "phases": (p1, p2),
        "evaluations": evaluations,
    }


def all_rows(workbench) -> list[Rollout]:
    from sqlmodel import select

    with workbench.session() as s:
        return list(s.exec(select(Rollout).order_by(Rollout.id)))


def walk(client, **params) -> list[dict]:
    """Every item of a filtered list, page after page through `next_after`."""
    items, after = [], None
    for _ in range(1000):
        data = client.get("/api/rollouts", params={**params, "after": after}).json()
        items += data["items"]
        after = data["next_after"]
        if after is None:
            return items
    raise AssertionError("paging did not end")


def ids(items) -> list[int]:
    return [item["id"] for item in items]


@pytest.mark.parametrize("status", ["pass", "fail", "error", "timeout"])
def test_status_filter_returns_only_that_status(client, run_with_rollouts, status):
    run, _, rollouts = run_with_rollouts

    data = client.get("/api/rollouts", params={"run": run.id, "status": status}).json()

    assert {item["status"] for item in data["items"]} == {status}
    assert ids(data["items"]) == [r.id for r in rollouts if r.status == status]
    assert data["filters"]["run"] == run.id and data["filters"]["status"] == status


def test_failed_means_fail_error_and_timeout(client, run_with_rollouts):
    run, _, rollouts = run_with_rollouts

    items = walk(client, run=run.id, status="failed")

    assert ids(items) == [r.id for r in rollouts if r.status in ("fail", "error", "timeout")]


# Each filter against the rows it should keep, decided on the stored rows themselves.
FILTERS = {
    "run": lambda w: (w["runs"][1].id, lambda r: r.run_id == w["runs"][1].id),
    "evaluation": lambda w: (
        w["evaluations"][2].id,
        lambda r: r.evaluation_id == w["evaluations"][2].id,
    ),
    "harness": lambda w: (w["harnesses"][1].id, lambda r: r.harness_id == w["harnesses"][1].id),
    "checkpoint": lambda w: (
        w["checkpoints"][1].id,
        lambda r: r.checkpoint_id == w["checkpoints"][1].id,
    ),
    "task": lambda w: ("test-3", lambda r: r.task_id == "test-3"),
    "phase": lambda w: (
        w["phases"][0].id,
        lambda r: r.evaluation_id in (w["evaluations"][0].id, w["evaluations"][1].id),
    ),
    "status": lambda w: ("timeout", lambda r: r.status == "timeout"),
}


@pytest.mark.parametrize("name", FILTERS)
def test_each_filter_keeps_exactly_its_rollouts(client, workbench, world, name):
    value, keep = FILTERS[name](world)
    everything = all_rows(workbench)

    items = walk(client, **{name: value})

    expected = [r.id for r in everything if keep(r)]
    assert ids(items) == expected
    assert 0 < len(expected) < len(everything)  # the filter did narrow the list


def test_filters_combine(client, workbench, world):
    seed, tuned, _ = world["harnesses"]
    base, _ = world["checkpoints"]
    run1 = world["runs"][0]

    items = walk(client, run=run1.id, checkpoint=base.id, status="failed", task="test-1")

    assert {(i["run_id"], i["checkpoint_id"], i["task_id"]) for i in items} == {
        (run1.id, base.id, "test-1")
    }
    assert {i["status"] for i in items} <= {"fail", "error", "timeout"}
    expected = [
        r.id
        for r in all_rows(workbench)
        if r.run_id == run1.id
        and r.checkpoint_id == base.id
        and r.task_id == "test-1"
        and r.status in ("fail", "error", "timeout")
    ]
    assert ids(items) == expected and len(expected) == 2  # under seed.py and tuned.py
    assert walk(client, harness=seed.id, evaluation=world["evaluations"][1].id) == []


def test_blank_form_fields_are_no_filter(client, world):
    everything = walk(client)
    blank = walk(client, run="", harness="", checkpoint=" ", phase="", task="", q="", status="")
    assert ids(blank) == ids(everything)


def test_keyset_paging_walks_every_row_once_forward_and_back(store, client):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=60, k=2)
    rollouts = store.rollouts(evaluation, ["fail"] * 120)
    expected = [r.id for r in rollouts]

    pages, after = [], None
    while True:
        page = client.get("/api/rollouts", params={"run": run.id, "after": after}).json()
        pages.append(page)
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert [len(p["items"]) for p in pages] == [50, 50, 20]
    assert [p["has_more"] for p in pages] == [True, True, False]
    assert [item["id"] for p in pages for item in p["items"]] == expected  # no gap, no repeat
    assert pages[0]["prev_before"] is None  # the first page has nothing before it

    # backwards from the end ("last"), page after page, covers the same rows
    back, before = [], MAX_ID
    while before is not None:
        page = client.get("/api/rollouts", params={"run": run.id, "before": before}).json()
        assert ids(page["items"]) == sorted(ids(page["items"]))  # a page reads in id order
        back = page["items"] + back
        before = page["prev_before"]
    assert ids(back) == expected

    # "previous" from the second page is exactly the first page
    previous = client.get(
        "/api/rollouts", params={"run": run.id, "before": pages[1]["prev_before"]}
    ).json()
    assert ids(previous["items"]) == ids(pages[0]["items"])
    assert previous["prev_before"] is None and previous["next_after"] == pages[0]["next_after"]


def test_paging_skips_rows_the_filters_leave_out(store, client):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=200)
    rollouts = store.rollouts(evaluation, ["pass", "fail", "pass", "pass"] * 50)

    items = walk(client, run=run.id, status="fail")

    assert ids(items) == [r.id for r in rollouts if r.status == "fail"]
    assert len(items) == 50  # exactly one page: no empty "next" page after it
    assert (
        client.get("/api/rollouts", params={"run": run.id, "status": "fail"}).json()["next_after"]
        is None
    )


@pytest.mark.parametrize(
    "q, expect",
    [
        ("forty", [1, 9]),  # answers, case-insensitive
        ("zerodivisionerror", [2]),  # an error's traceback
        ("exception", [2, 8, 14, 20]),  # the failure reason
        ("100% sure_", [20]),  # % and _ are plain characters
        ("sure%", []),
    ],
)
def test_text_search_finds_answers_errors_and_reasons(client, workbench, world, q, expect):
    everything = all_rows(workbench)

    data = client.get("/api/rollouts", params={"q": q}).json()

    assert ids(data["items"]) == [everything[i].id for i in expect]
    assert data["search"]["complete"] is True
    assert data["status_counts"] is None


def test_text_search_combines_with_filters(client, workbench, world):
    run2 = world["runs"][1]
    items = walk(client, q="exception", run=run2.id)
    assert [(i["run_id"], i["reason"]) for i in items] == [(run2.id, "exception")]


def test_text_search_reads_a_bounded_number_of_rows_and_says_where_to_go_on(
    client, store, monkeypatch
):
    monkeypatch.setattr(rollouts_module, "SEARCH_ROWS", 10)
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=35)
    rollouts = store.rollouts(evaluation, ["fail"] * 35)
    for i in (3, 25, 26):
        store.write_values(rollouts[i], error=f"KeyError: 'needle {i}'")

    first = client.get("/api/rollouts", params={"q": "needle"}).json()

    assert ids(first["items"]) == [rollouts[3].id]
    assert first["search"] == {
        "q": "needle",
        "rows_limit": 10,
        "complete": False,
        "stopped_at": rollouts[9].id,
    }
    assert first["next_after"] == rollouts[9].id  # continue after the rows searched
    # following "continue" finds every match once, and the last window says it is complete
    found = walk(client, q="needle")
    assert ids(found) == [rollouts[i].id for i in (3, 25, 26)]
    last = client.get("/api/rollouts", params={"q": "needle", "after": rollouts[29].id}).json()
    assert last["search"]["complete"] is True and last["next_after"] is None


def test_status_counts_for_what_the_filters_name(client, world):
    run1 = world["runs"][0]
    tuned = world["harnesses"][1]

    assert client.get("/api/rollouts").json()["status_counts"] is None
    counts = client.get("/api/rollouts", params={"run": run1.id}).json()["status_counts"]
    assert counts == {
        "running": 0,
        "queued": 0,
        "pass": 6,
        "fail": 6,
        "error": 3,
        "timeout": 3,
        "infra": 0,
    }
    # the counts are the run's whatever status is picked
    picked = client.get("/api/rollouts", params={"run": run1.id, "status": "pass"}).json()
    assert picked["status_counts"] == counts
    # under a harness, checkpoint or phase filter: the rollouts it names (the chips keep counts)
    seed, lora, (p1, _) = world["harnesses"][0], world["checkpoints"][1], world["phases"]
    one_eval = {"running": 0, "queued": 0, "pass": 2, "fail": 2, "error": 1, "timeout": 1}
    for params, times in [
        ({"harness": tuned.id}, 2),
        ({"harness": seed.id, "status": "fail"}, 1),
        ({"checkpoint": lora.id}, 1),
        ({"phase": p1.id}, 2),
    ]:
        narrowed = client.get("/api/rollouts", params={"run": run1.id, **params}).json()
        assert narrowed["status_counts"] == {
            **{k: n * times for k, n in one_eval.items()},
            "infra": 0,
        }, params
    # a task or a text search has no index to count from: no counts then
    by_task = client.get("/api/rollouts", params={"run": run1.id, "task": "test-0"}).json()
    assert by_task["status_counts"] is None


def test_list_items_have_the_columns_the_page_shows(client, run_with_rollouts):
    run, _, rollouts = run_with_rollouts

    item = client.get("/api/rollouts", params={"run": run.id}).json()["items"][0]

    assert item["id"] == rollouts[0].id
    assert item["task_id"] == "test-0"
    assert item["question"] == "What is 0 + 1?"
    assert (item["answer"], item["gold"], item["reward"]) == ("1", "1", 1.0)
    assert item["tokens"] == 25
    assert "stdout_tail" not in item  # large columns stay on the trace page


def test_evaluation_filter_keeps_other_evaluations_out(store, client, run_with_rollouts):
    run, evaluation, rollouts = run_with_rollouts
    second = store.evaluation(run, store.harness(run, name="other.py"), store.checkpoint("b"), 2)
    store.rollouts(second, ["pass", "pass"])

    data = client.get("/api/rollouts", params={"evaluation": evaluation.id}).json()

    assert [i["id"] for i in data["items"]] == [r.id for r in rollouts]
    assert data["status_counts"]["pass"] == MIXED.count("pass")


@pytest.mark.parametrize("name", ["run", "evaluation", "harness", "checkpoint", "phase"])
def test_unknown_id_filter_is_404(client, name):
    response = client.get("/api/rollouts", params={name: 999})
    assert response.status_code == 404
    assert "999 not found" in response.json()["detail"]


@pytest.mark.parametrize(
    "params, mentions",
    [
        ({"harness": str(2**63)}, "harness"),
        ({"checkpoint": "1.5"}, "checkpoint"),
        ({"phase": "-1"}, "phase"),
        ({"status": "failing"}, "status"),
        ({"after": "x"}, "after"),
        ({"before": "-3"}, "before"),
        ({"after": "10", "before": "20"}, "after and before"),
        ({"q": "x" * 201}, "q"),
        ({"task": "t" * 201}, "task"),
    ],
)
def test_malformed_filters_are_a_422_naming_the_parameter(client, params, mentions):
    for url in ("/api/rollouts", "/rollouts"):
        response = client.get(url, params=params)
        assert response.status_code == 422, url
        assert mentions in error_detail(response)


def test_trace_has_its_steps_in_order_with_messages(store, client, run_with_rollouts):
    rollout = run_with_rollouts[2][1]
    question = [
        {"role": "system", "content": "Solve it."},
        {"role": "user", "content": "What is 1 + 1?"},
    ]
    # written out of order: the trace must still come back ordered by step index
    store.tool_step(rollout, 1, "calculator", ["1 + 1"], result=2)
    store.model_step(rollout, 0, question, "Let me compute.", temperature=0.7)
    store.model_step(
        rollout,
        2,
        question + [{"role": "assistant", "content": "Let me compute."}],
        "The answer is 2.",
        temperature=0.0,
    )

    data = client.get(f"/api/rollouts/{rollout.id}").json()

    assert data["rollout"]["id"] == rollout.id
    assert data["rollout"]["task"] == {"question": "What is 1 + 1?"}
    assert data["run"]["id"] == rollout.run_id
    assert data["n_steps"] == 3 and data["shown"] is None  # every step
    steps = data["steps"]
    assert [s["idx"] for s in steps] == [0, 1, 2]
    assert [s["kind"] for s in steps] == ["model", "tool", "model"]
    assert steps[0]["request"]["messages"] == question
    assert steps[0]["request"]["temperature"] == 0.7
    assert steps[0]["response"]["message"]["content"] == "Let me compute."
    assert steps[1]["tool"] == "calculator"
    assert steps[1]["request"]["args"] == ["1 + 1"]
    assert steps[1]["response"] == {"result": 2}
    assert steps[2]["response"]["message"]["content"] == "The answer is 2."


def test_failed_tool_call_keeps_its_error(store, client, run_with_rollouts):
    rollout = run_with_rollouts[2][2]
    store.tool_step(rollout, 0, "nope", [], error="unknown tool 'nope'")

    [step] = client.get(f"/api/rollouts/{rollout.id}").json()["steps"]

    assert step["error"] == "unknown tool 'nope'"
    assert step["response"] is None


def test_unknown_rollout_is_404(client):
    response = client.get("/api/rollouts/4242")
    assert response.status_code == 404
    assert "4242" in response.json()["detail"]


def test_a_harness_checkpoint_or_phase_is_found_by_its_name(client, world):
    run1, run2 = world["runs"]
    seed, tuned, _ = world["harnesses"]
    _, lora = world["checkpoints"]
    _, weight = world["phases"]

    for by_name, by_id in [
        ({"harness": "tuned.py"}, {"harness": tuned.id}),
        ({"run": run1.id, "checkpoint": "lora-1"}, {"checkpoint": lora.id}),
        ({"run": run1.id, "phase": "weight phase 2"}, {"phase": weight.id}),
        ({"run": run1.id, "phase": "Weight Phase 2"}, {"phase": weight.id}),
    ]:
        named = client.get("/api/rollouts", params=by_name).json()
        assert [i["id"] for i in named["items"]] == [i["id"] for i in walk(client, **by_id)]
        assert named["items"], by_name
        assert all(named["filters"][k] == v for k, v in by_id.items())  # resolved to the id
    page = client.get("/rollouts", params={"run": run1.id, "harness": "tuned.py"}).text
    assert f'<option value="{tuned.id}" selected>tuned.py</option>' in page
    assert f'href="/rollouts?run={run1.id}&amp;harness={tuned.id}&amp;status=failed"' in page


def test_a_name_that_names_nothing_or_several_says_so(store, client, world):
    run1, run2 = world["runs"]
    store.harness(run2, name="seed.py")  # a second run has its own seed.py

    missing = client.get("/rollouts", params={"run": run2.id, "harness": "tuned.py"})
    assert missing.status_code == 404
    assert f"No harness named 'tuned.py' in run {run2.id}" in error_detail(missing)
    several = client.get("/api/rollouts", params={"harness": "seed.py"})
    assert several.status_code == 422
    assert "harness: 'seed.py' names 2 harnesses" in error_detail(several)
    assert "add run=ID" in error_detail(several)
    scoped = client.get("/api/rollouts", params={"harness": "seed.py", "run": run1.id})
    assert scoped.status_code == 200 and len(scoped.json()["items"]) == 6
    nameless = client.get("/rollouts", params={"phase": "the second one"})
    assert nameless.status_code == 422
    assert "as 'weight phase 2'" in error_detail(nameless)
    for_all = client.get("/api/rollouts", params={"phase": "weight phase 2"})  # one run has one
    assert for_all.status_code == 200 and len(for_all.json()["items"]) == 6


def test_the_list_names_its_run_offers_names_and_always_the_infra_chip(client, world):
    run1, _ = world["runs"]
    seed, tuned, other = world["harnesses"]
    evaluation = world["evaluations"][0]

    page = client.get("/rollouts", params={"evaluation": evaluation.id}).text

    # the evaluation's run: the title says it, the form offers that run's names only
    assert f"<title>Rollouts of run {run1.id} · first · Whale</title>" in page
    form = page[page.index('<form class="form-row filters"') : page.index("</form>")]
    harnesses = form[form.index('<select name="harness"') :]
    harnesses = harnesses[: harnesses.index("</select>")]
    assert ">seed.py</option>" in harnesses and ">tuned.py</option>" in harnesses
    assert "other.py" not in harnesses
    assert ">harness phase 1</option>" in form and ">weight phase 2</option>" in form
    assert re.search(r'<a class="chip status-infra [^"]*" href="[^"]+"\s*>infra <b>0</b></a>', page)
    everything = client.get("/rollouts").text
    assert "<title>Rollouts · Whale</title>" in everything
    assert ">other.py (run " in everything  # the whole store's: each names its run
