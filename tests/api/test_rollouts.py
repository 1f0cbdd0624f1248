"""GET /api/rollouts (filters, paging) and /api/rollouts/{id} (the trace)."""
import pytest

MIXED = ["pass", "fail", "error", "timeout", "fail", "pass"] * 5


@pytest.fixture
def run_with_rollouts(store):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=len(MIXED))
    return run, evaluation, store.rollouts(evaluation, MIXED)


@pytest.mark.parametrize("status", ["pass", "fail", "error", "timeout"])
def test_status_filter_returns_only_that_status(client, run_with_rollouts, status):
    run, _, rollouts = run_with_rollouts

    data = client.get("/api/rollouts", params={"run": run.id, "status": status}).json()

    assert {item["status"] for item in data["items"]} == {status}
    assert [item["id"] for item in data["items"]] == [r.id for r in rollouts if r.status == status]
    assert data["filters"] == {"run": run.id, "evaluation": None, "status": status}


def test_list_items_have_the_columns_the_page_shows(client, run_with_rollouts):
    run, _, rollouts = run_with_rollouts

    item = client.get("/api/rollouts", params={"run": run.id}).json()["items"][0]

    assert item["id"] == rollouts[0].id
    assert item["task_id"] == "test-0"
    assert item["question"] == "What is 0 + 1?"
    assert (item["answer"], item["gold"], item["reward"]) == ("1", "1", 1.0)
    assert item["tokens"] == 25
    assert "stdout_tail" not in item  # large columns stay on the trace page


def test_paging_walks_every_rollout_once_in_order(store, client):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=60, k=2)
    rollouts = store.rollouts(evaluation, ["fail"] * 120)

    pages = [client.get("/api/rollouts", params={"run": run.id, "page": n}).json()
             for n in (1, 2, 3, 4)]  # fmt: skip

    assert [len(p["items"]) for p in pages] == [50, 50, 20, 0]
    assert [p["has_more"] for p in pages] == [True, True, False, False]
    seen = [item["id"] for p in pages for item in p["items"]]
    assert seen == [r.id for r in rollouts]


def test_evaluation_filter_keeps_other_evaluations_out(store, client, run_with_rollouts):
    run, evaluation, rollouts = run_with_rollouts
    second = store.evaluation(run, store.harness(run, name="other.py"), store.checkpoint("b"), 2)
    store.rollouts(second, ["pass", "pass"])

    data = client.get("/api/rollouts", params={"evaluation": evaluation.id}).json()

    assert [i["id"] for i in data["items"]] == [r.id for r in rollouts]
    assert data["status_counts"]["pass"] == MIXED.count("pass")


def test_unknown_run_or_evaluation_filter_is_404(client):
    assert client.get("/api/rollouts", params={"run": 999}).status_code == 404
    assert client.get("/api/rollouts", params={"evaluation": 999}).status_code == 404


def test_trace_has_its_steps_in_order_with_messages(store, client, run_with_rollouts):
    rollout = run_with_rollouts[2][1]
    question = [{"role": "system", "content": "Solve it."},
                {"role": "user", "content": "What is 1 + 1?"}]  # fmt: skip
    # written out of order: the trace must still come back ordered by step index
    store.tool_step(rollout, 1, "calculator", ["1 + 1"], result=2)
    store.model_step(rollout, 0, question, "Let me compute.", temperature=0.7)
    store.model_step(rollout, 2, question + [{"role": "assistant", "content": "Let me compute."}],
                     "The answer is 2.", temperature=0.0)  # fmt: skip

    data = client.get(f"/api/rollouts/{rollout.id}").json()

    assert data["rollout"]["id"] == rollout.id
    assert data["rollout"]["task"] == {"question": "What is 1 + 1?"}
    assert data["run"]["id"] == rollout.run_id
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
