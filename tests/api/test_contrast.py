"""GET /api/rollouts/contrast: the tasks that fail under A and pass under B."""

import pytest

from app.db.schema import Rollout

# task -> (statuses under A, statuses under B)
OUTCOMES = {
    "t0": (["fail", "fail"], ["fail", "pass"]),  # fixed by B
    "t1": (["fail", "error"], ["fail", "fail"]),  # B fails too
    "t2": (["pass", "fail"], ["pass", "pass"]),  # A passes once: not "fails under A"
    "t3": (["timeout", "error"], ["pass"]),  # fixed by B; A's failures of any kind count
    "t4": (["pending", "pending"], ["pass"]),  # A has not run it yet
    "t5": ([], ["pass"]),  # A never saw it
    "t6": (["fail", "fail", "pass"], ["pass"]),  # A fails most of the time
    "t7": (["fail"], ["pending"]),  # B has not finished it
    "t8": (["pass"], ["fail"]),  # broken by B
}


def write(store, evaluation, side: int) -> dict[str, list[Rollout]]:
    """The rollouts of OUTCOMES for side 0 (A) or 1 (B) under `evaluation`, by task."""
    written = {}
    for task, sides in OUTCOMES.items():
        rows = [
            Rollout(
                run_id=evaluation.run_id,
                evaluation_id=evaluation.id,
                harness_id=evaluation.harness_id,
                checkpoint_id=evaluation.checkpoint_id,
                task_id=task,
                sample=i,
                task={"question": f"q {task}"},
                gold="1",
                status=status,
                answer="1" if status == "pass" else "2",
                reward=float(status == "pass"),
            )
            for i, status in enumerate(sides[side])
        ]
        if rows:
            result = store.write(*rows)
            written[task] = result if isinstance(result, list) else [result]
    return written


def one(store, evaluation, task: str, status: str) -> Rollout:
    """One finished rollout of `task` under the evaluation's harness and checkpoint."""
    return store.write(
        Rollout(
            run_id=evaluation.run_id,
            evaluation_id=evaluation.id,
            harness_id=evaluation.harness_id,
            checkpoint_id=evaluation.checkpoint_id,
            task_id=task,
            sample=0,
            status=status,
        )
    )


@pytest.fixture
def harness_pair(store):
    run = store.run()
    a, b = store.harness(run, name="a.py"), store.harness(run, name="b.py")
    checkpoint = store.checkpoint()
    under_a = write(store, store.evaluation(run, a, checkpoint, n_tasks=9), 0)
    under_b = write(store, store.evaluation(run, b, checkpoint, n_tasks=9), 1)
    return run, a, b, under_a, under_b


def test_lists_exactly_the_tasks_that_fail_under_a_and_pass_under_b(client, harness_pair):
    run, a, b, under_a, under_b = harness_pair

    data = client.get(
        "/api/rollouts/contrast", params={"a_harness": a.id, "b_harness": b.id}
    ).json()

    assert sorted(t["task_id"] for t in data["tasks"]) == ["t0", "t3"]
    assert data["n_tasks"] == 2
    for task in data["tasks"]:
        failing, passing = task["a"]["failing"], task["b"]["passing"]
        # the linked traces are the task's, one failing under A and one passing under B
        assert failing["id"] in [r.id for r in under_a[task["task_id"]]]
        assert failing["harness_id"] == a.id and failing["status"] != "pass"
        assert passing["id"] in [r.id for r in under_b[task["task_id"]]]
        assert passing["harness_id"] == b.id and passing["status"] == "pass"
        assert task["a"]["n_pass"] == 0 and task["b"]["n_pass"] >= 1
    t0 = next(t for t in data["tasks"] if t["task_id"] == "t0")
    assert (t0["a"]["n"], t0["b"]["n"], t0["b"]["n_pass"]) == (2, 2, 1)
    assert t0["question"] == "q t0"


def test_most_of_the_time_also_counts_tasks_a_mostly_fails(client, harness_pair):
    _, a, b, _, _ = harness_pair

    data = client.get(
        "/api/rollouts/contrast", params={"a_harness": a.id, "b_harness": b.id, "a_fails": "most"}
    ).json()

    assert sorted(t["task_id"] for t in data["tasks"]) == ["t0", "t3", "t6"]


def test_the_other_way_round_finds_what_b_broke(client, harness_pair):
    _, a, b, _, _ = harness_pair

    data = client.get(
        "/api/rollouts/contrast", params={"a_harness": b.id, "b_harness": a.id}
    ).json()

    assert [t["task_id"] for t in data["tasks"]] == ["t8"]


def test_sides_can_be_checkpoints_within_a_run(store, client):
    run, elsewhere = store.run(), store.run(name="elsewhere")
    harness = store.harness(run)
    base, tuned = store.checkpoint("base"), store.checkpoint("tuned")
    write(store, store.evaluation(run, harness, base, n_tasks=9), 0)
    write(store, store.evaluation(run, harness, tuned, n_tasks=9), 1)
    # the same checkpoints in another run pass t1 under B: left out when the run is named
    other = store.evaluation(elsewhere, store.harness(elsewhere), tuned, n_tasks=1)
    one(store, other, "t1", "pass")

    params = {"a_checkpoint": base.id, "b_checkpoint": tuned.id}
    within = client.get("/api/rollouts/contrast", params={**params, "run": run.id}).json()
    anywhere = client.get("/api/rollouts/contrast", params=params).json()

    assert sorted(t["task_id"] for t in within["tasks"]) == ["t0", "t3"]
    assert sorted(t["task_id"] for t in anywhere["tasks"]) == ["t0", "t1", "t3"]
    assert (
        within["a"]["checkpoint"]["name"] == "base" and within["b"]["checkpoint"]["name"] == "tuned"
    )


def test_a_split_keeps_other_splits_out_of_the_tasks_and_the_paired_figure(store, client):
    run = store.run()
    a, b = store.harness(run, name="a.py"), store.harness(run, name="b.py")
    checkpoint = store.checkpoint()
    write(store, store.evaluation(run, a, checkpoint, n_tasks=9), 0)
    write(store, store.evaluation(run, b, checkpoint, n_tasks=9), 1)
    # the same harnesses on the harness split: B fixes t1 there, and breaks nothing
    for harness, status in ((a, "fail"), (b, "pass")):
        searched = store.evaluation(run, harness, checkpoint, n_tasks=1, split="harness")
        one(store, searched, "t-harness", status)

    params = {"a_harness": a.id, "b_harness": b.id}
    test = client.get("/api/rollouts/contrast", params={**params, "split": "test"}).json()
    searched = client.get("/api/rollouts/contrast", params={**params, "split": "harness"}).json()
    every = client.get("/api/rollouts/contrast", params=params).json()

    assert sorted(t["task_id"] for t in test["tasks"]) == ["t0", "t3"]
    assert [t["task_id"] for t in searched["tasks"]] == ["t-harness"]
    assert sorted(t["task_id"] for t in every["tasks"]) == ["t-harness", "t0", "t3"]
    assert test["paired"]["n_tasks"] + 1 == every["paired"]["n_tasks"]
    assert "(test split)" in test["paired"]["design"]
    assert "(every split)" in every["paired"]["design"]
    page = client.get("/rollouts/contrast", params={**params, "split": "test"}).text
    assert '<option value="test" selected>' in page
    assert (
        client.get("/api/rollouts/contrast", params={**params, "split": "dev"}).status_code == 422
    )


def test_a_side_must_be_named_and_exist(client, harness_pair):
    _, a, b, _, _ = harness_pair

    missing = client.get("/api/rollouts/contrast", params={"a_harness": a.id})
    assert missing.status_code == 422
    assert "b_harness or b_checkpoint" in missing.json()["detail"]
    malformed = client.get("/api/rollouts/contrast", params={"a_harness": "x", "b_harness": b.id})
    assert malformed.status_code == 422 and "a_harness" in malformed.json()["detail"]
    assert (
        client.get(
            "/api/rollouts/contrast",
            params={"a_harness": a.id, "b_harness": b.id, "a_fails": "some"},
        ).status_code
        == 422
    )
    unknown = client.get("/api/rollouts/contrast", params={"a_harness": a.id, "b_harness": 999})
    assert unknown.status_code == 404 and "999 not found" in unknown.json()["detail"]
