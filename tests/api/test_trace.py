"""One trace through the API: windows of a long trace, the raw download, two traces compared,
and the rollouts of the same task offered for comparing."""

import pytest

from app.db.schema import Step


def long_trace(store, rollout, n_steps: int) -> None:
    """A multi-turn trace: model calls (each resending the conversation so far) and tool calls
    in turn, written in one transaction."""
    conversation = [{"role": "user", "content": "What is 2 + 2?"}]
    steps = []
    for idx in range(n_steps):
        if idx % 2 == 0:
            reply = f"thought {idx}"
            steps.append(
                Step(
                    rollout_id=rollout.id,
                    idx=idx,
                    kind="model",
                    request={"messages": list(conversation)},
                    response={
                        "message": {"role": "assistant", "content": reply},
                        "finish_reason": "stop",
                    },
                )
            )
            conversation += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": f"go on after {idx}"},
            ]
        else:
            steps.append(
                Step(
                    rollout_id=rollout.id,
                    idx=idx,
                    kind="tool",
                    tool="calculator",
                    request={"args": [f"{idx} + 1"], "kwargs": {}},
                    response={"result": idx + 1},
                )
            )
    store.write(*steps)


@pytest.fixture
def two_harnesses(store):
    """One task under two harnesses (fails under the first, passes under the second) and a
    different task."""
    run = store.run()
    checkpoint = store.checkpoint()
    first, second = store.harness(run, name="first.py"), store.harness(run, name="second.py")
    failing, other_task = store.rollouts(
        store.evaluation(run, first, checkpoint, 2), ["fail", "fail"]
    )
    [passing] = store.rollouts(store.evaluation(run, second, checkpoint, 1), ["pass"])
    return failing, passing, other_task


def test_a_long_trace_gives_its_ends_or_the_window_asked_for(store, client, two_harnesses):
    rollout = two_harnesses[0]
    long_trace(store, rollout, 120)

    ends = client.get(f"/api/rollouts/{rollout.id}").json()
    window = client.get(f"/api/rollouts/{rollout.id}", params={"steps": "20-69"}).json()

    # like its page: the first 20 and the last 5 steps, and the model call before the tail
    assert [s["idx"] for s in ends["steps"]] == [*range(20), *range(115, 120)]
    assert ends["shown"] == [[0, 19], [115, 119]] and ends["n_steps"] == 120
    assert ends["model_step_before"][0] is None
    assert ends["model_step_before"][1]["idx"] == 114  # steps alternate model, tool
    assert [s["idx"] for s in window["steps"]] == list(range(20, 70))
    assert window["shown"] == [[20, 69]] and window["n_steps"] == 120


@pytest.mark.parametrize(
    "steps, mentions",
    [
        ("69-20", "ends before it starts"),
        ("0-500", "at most 200"),
        ("twenty", "steps"),
        ("-5", "steps"),
    ],
)
def test_a_malformed_step_window_is_a_422(client, two_harnesses, steps, mentions):
    rollout = two_harnesses[0]
    response = client.get(f"/api/rollouts/{rollout.id}", params={"steps": steps})
    assert response.status_code == 422
    assert mentions in response.json()["detail"]


def test_raw_download_is_an_attachment_with_every_step(store, client, two_harnesses):
    rollout = two_harnesses[0]
    long_trace(store, rollout, 40)

    response = client.get(f"/api/rollouts/{rollout.id}/raw")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert (
        response.headers["content-disposition"]
        == f'attachment; filename="rollout-{rollout.id}.json"'
    )
    data = response.json()
    assert data["rollout"]["id"] == rollout.id and len(data["steps"]) == 40
    assert client.get("/api/rollouts/4242/raw").status_code == 404


def test_compare_gives_both_traces_and_whether_the_task_is_the_same(client, two_harnesses):
    failing, passing, other_task = two_harnesses

    same = client.get("/api/rollouts/compare", params={"a": failing.id, "b": passing.id}).json()
    different = client.get(
        "/api/rollouts/compare", params={"a": failing.id, "b": other_task.id}
    ).json()

    assert (same["a"]["rollout"]["id"], same["b"]["rollout"]["id"]) == (failing.id, passing.id)
    assert same["same_task"] is True and same["warning"] is None
    assert different["same_task"] is False
    assert "test-0" in different["warning"] and "test-1" in different["warning"]


def test_compare_refuses_a_missing_or_unknown_side(client, two_harnesses):
    failing = two_harnesses[0]
    missing = client.get("/api/rollouts/compare", params={"a": failing.id})
    assert missing.status_code == 422 and "b" in missing.json()["detail"]
    assert (
        client.get("/api/rollouts/compare", params={"a": failing.id, "b": "x"}).status_code == 422
    )
    assert (
        client.get("/api/rollouts/compare", params={"a": failing.id, "b": 999}).status_code == 404
    )


def test_a_trace_offers_the_same_task_under_other_harnesses(store, client, two_harnesses):
    failing, passing, other_task = two_harnesses

    offered = client.get(f"/api/rollouts/{failing.id}").json()["compare_with"]

    assert [c["id"] for c in offered] == [passing.id]  # not itself, not another task
    assert offered[0]["harness_name"] == "second.py" and offered[0]["status"] == "pass"
