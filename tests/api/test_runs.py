"""GET /api/runs and /api/runs/{id}: the runs list and a run with its evaluations and counts."""

from collections import Counter

STATUSES = ["pass", "fail", "fail", "error", "timeout", "pass", "fail", "pending"]


def test_runs_are_listed_newest_first_with_best_score_and_rollout_count(store, client):
    old = store.run(name="old run")
    new = store.run(name="new run", status="running")
    harness, checkpoint = store.harness(old), store.checkpoint()
    done = {"status": "done"}
    store.evaluation(old, harness, checkpoint, n_tasks=4, k=2, mean_at_k=0.25, n_done=8, **done)
    store.evaluation(old, harness, checkpoint, n_tasks=3, k=1, mean_at_k=0.5, n_done=3, **done)

    runs = client.get("/api/runs").json()["runs"]

    assert [r["name"] for r in runs] == ["new run", "old run"]
    by_id = {r["id"]: r for r in runs}
    assert by_id[old.id]["best_test"] == 0.5
    assert by_id[old.id]["n_rollouts"] == 4 * 2 + 3
    assert by_id[new.id]["best_test"] is None
    assert by_id[new.id]["n_rollouts"] == 0
    assert by_id[new.id]["status"] == "running"


def test_run_status_counts_match_the_rollout_rows(store, client):
    run = store.run()
    other = store.run(name="other")
    harness, checkpoint = store.harness(run), store.checkpoint()
    evaluation = store.evaluation(run, harness, checkpoint, n_tasks=len(STATUSES))
    store.rollouts(evaluation, STATUSES)
    # another run's rollouts must not leak into this run's counts
    store.rollouts(store.evaluation(other, harness, checkpoint, n_tasks=3), ["pass"] * 3)

    data = client.get(f"/api/runs/{run.id}").json()

    assert data["run"]["id"] == run.id
    expected = Counter(STATUSES)
    # a pending rollout without a recorded start is waiting for a sandbox: queued
    expected["queued"] = expected.pop("pending")
    assert data["status_counts"] == {
        s: expected[s] for s in ("running", "queued", "pass", "fail", "error", "timeout", "infra")
    }
    # and each count is what the rollout list filtered by that status returns
    for status, n in data["status_counts"].items():
        listed = client.get("/api/rollouts", params={"run": run.id, "status": status}).json()
        assert len(listed["items"]) == n


def test_run_lists_its_evaluations_with_harness_and_checkpoint_names(store, client):
    run = store.run()
    harness, checkpoint = store.harness(run, name="voting.py"), store.checkpoint("smol-lora-1")
    store.evaluation(run, harness, checkpoint, n_tasks=5, k=2, n_done=4, status="running")

    [evaluation] = client.get(f"/api/runs/{run.id}").json()["evaluations"]

    assert evaluation["harness_name"] == "voting.py"
    assert evaluation["checkpoint_name"] == "smol-lora-1"
    assert (evaluation["n_done"], evaluation["n_rollouts"]) == (4, 10)
    assert evaluation["progress"] == 0.4


def test_recent_failures_are_the_newest_failed_rollouts(store, client):
    run = store.run()
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=30)
    rollouts = store.rollouts(evaluation, ["fail", "pass", "error", "timeout", "pending"] * 6)

    failures = client.get(f"/api/runs/{run.id}").json()["recent_failures"]

    failed_ids = [r.id for r in rollouts if r.status in ("fail", "error", "timeout")]
    assert [f["id"] for f in failures] == sorted(failed_ids, reverse=True)[:10]


def test_run_datetimes_carry_their_zone(store, client):
    run = store.run()
    created = client.get(f"/api/runs/{run.id}").json()["run"]["created_at"]
    assert created.endswith("+00:00")


def test_unknown_run_is_404_with_a_message(client):
    response = client.get("/api/runs/12345")
    assert response.status_code == 404
    assert response.json() == {"detail": "Run 12345 not found"}
