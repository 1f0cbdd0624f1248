"""What a run asked to pause or stop says while the rollouts it started still run: "pausing" or
"stopping" with how many are in flight, on its page and in its JSON at once, then "paused";
the rollout list tells running from queued; the runs list's figures and words agree with the
run page's."""

import html
import re

from app import control
from app.db.schema import Checkpoint, Phase, Run, TrainingJob, now
from app.phases import close_open_work


def loop_run(
    store, status: str = "running", budget: dict | None = None, desired: str = "running"
) -> Run:
    return store.write(
        Run(
            name="steered",
            kind="experiment",
            domain="arith",
            status=status,
            strategy="whale",
            desired=desired,
            config={"experiment": {"budget": budget or {}}},
        )
    )


def running_weight_phase(store, run: Run, harness, checkpoint) -> Phase:
    return store.write(
        Phase(
            run_id=run.id,
            kind="weight",
            round=1,
            status="running",
            harness_in_id=harness.id,
            checkpoint_in_id=checkpoint.id,
        )
    )


def mid_evaluation(store, run: Run, running: int, queued: int):
    """An evaluation with `running` rollouts in sandboxes (started) and `queued` waiting."""
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=8, k=1)
    rollouts = store.rollouts(evaluation, ["pending"] * (running + queued))
    for rollout in rollouts[:running]:
        store.write_values(rollout, started_at=now())
    return evaluation, rollouts


def ask(store, run: Run, action: str) -> None:
    store.writer.submit(
        lambda s: control._request(s, run.id, action, {"action": action}, {})
    ).result()


def text_of(page: str, id_: str) -> str:
    found = re.search(rf'id="{id_}"[^>]*>(.*?)</', page, re.S)
    return html.unescape(found.group(1)).strip() if found else ""


def badge(page: str) -> str:
    return re.search(r'<p class="run-status"><span class="badge[^"]*">([^<]*)<', page).group(1)


def test_a_stop_says_at_once_what_it_waits_for(store, client):
    run = loop_run(store)
    _, rollouts = mid_evaluation(store, run, running=3, queued=5)
    ask(store, run, "stop")

    dashboard = client.get(f"/api/runs/{run.id}").json()["dashboard"]
    assert dashboard["run"]["shown_status"] == "stopping"
    assert dashboard["activity"] == "stopping: waiting for 3 rollouts in flight"
    page = client.get(f"/runs/{run.id}").text
    assert badge(page) == "stopping"
    assert text_of(page, "activity") == "stopping: waiting for 3 rollouts in flight"

    for rollout in rollouts[:3]:
        store.write_values(rollout, status="pass", finished_at=now())
    dashboard = client.get(f"/api/runs/{run.id}").json()["dashboard"]
    assert dashboard["activity"] == "stopping"


def test_a_pause_says_pausing_until_the_rollouts_in_flight_are_done(store, client):
    run = loop_run(store)
    _, rollouts = mid_evaluation(store, run, running=5, queued=3)
    ask(store, run, "pause")
    store.write_values(run, status="paused")  # what the loop does at once (app/loop/driver.py)

    dashboard = client.get(f"/api/runs/{run.id}").json()["dashboard"]
    assert dashboard["run"]["shown_status"] == "pausing"
    assert dashboard["activity"] == "pausing: 5 rollouts in flight"
    assert badge(client.get(f"/runs/{run.id}").text) == "pausing"
    assert client.get("/api/runs").json()["runs"][0]["shown_status"] == "pausing"

    for rollout in rollouts[:4]:
        store.write_values(rollout, status="fail", finished_at=now())
    assert client.get(f"/api/runs/{run.id}").json()["dashboard"]["activity"] == (
        "pausing: 1 rollout in flight"
    )
    store.write_values(rollouts[4], status="pass", finished_at=now())
    dashboard = client.get(f"/api/runs/{run.id}").json()["dashboard"]
    assert dashboard["run"]["shown_status"] == "paused"
    assert dashboard["activity"].startswith("paused: no rollout is running")
    assert badge(client.get(f"/runs/{run.id}").text) == "paused"


def test_running_and_queued_rollouts_are_counted_and_filtered_apart(store, client):
    run = loop_run(store)
    evaluation, rollouts = mid_evaluation(store, run, running=3, queued=5)
    store.write_values(rollouts[-1], status="pass", finished_at=now())

    data = client.get("/api/rollouts", params={"run": run.id}).json()
    assert (data["status_counts"]["running"], data["status_counts"]["queued"]) == (3, 4)
    assert "pending" not in data["status_counts"]
    assert sum(data["status_counts"].values()) == 8
    states = {item["id"]: item["state"] for item in data["items"]}
    assert [states[r.id] for r in rollouts] == ["running"] * 3 + ["queued"] * 4 + ["pass"]
    for state, n in (("running", 3), ("queued", 4), ("pending", 7)):
        listed = client.get("/api/rollouts", params={"run": run.id, "status": state}).json()
        assert len(listed["items"]) == n, state
    one = client.get(f"/api/rollouts/{rollouts[0].id}").json()["rollout"]
    assert one["state"] == "running" and one["started_at"] is not None


def test_the_runs_list_counts_rollouts_as_the_budget_does_and_names_phases(store, client):
    run = loop_run(store, status="done", budget={"rollouts": 256})
    # five finished test rollouts: reporting, not spending
    test = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=5, status="done")
    store.write_values(test, n_done=5)
    store.rollouts(test, ["pass"] * 5)
    store.write(Phase(run_id=run.id, kind="weight", round=1, status="running"))

    row = client.get("/api/runs").json()["runs"][0]
    budget = client.get(f"/api/runs/{run.id}").json()["dashboard"]["budgets"]
    rollouts = next(b for b in budget if b["name"] == "rollouts")
    assert (row["rollouts_used"], row["rollouts_left"]) == (rollouts["used"], rollouts["left"])
    assert (row["rollouts_used"], row["rollouts_left"]) == (0, 256)
    assert row["phase"] == "weight phase 1"
    page = client.get("/runs").text
    assert "weight phase 1" in page and ">5<" not in page


def test_a_stopped_weight_phase_hands_on_its_last_trained_checkpoint(store, client):
    run = loop_run(store)
    harness, base = store.harness(run), store.checkpoint()
    phase = running_weight_phase(store, run, harness, base)
    trained = store.write(Checkpoint(name="step-1", kind="lora", run_id=run.id))
    store.write(
        TrainingJob(
            run_id=run.id,
            harness_id=harness.id,
            checkpoint_in_id=base.id,
            step=0,
            phase_id=phase.id,
            status="done",
            checkpoint_out_id=trained.id,
        ),
        TrainingJob(
            run_id=run.id,
            harness_id=harness.id,
            checkpoint_in_id=trained.id,
            step=1,
            phase_id=phase.id,
            status="training",
        ),
    )
    store.writer.submit(
        lambda s: close_open_work(s, run.id, "stopped", "stopped by request")
    ).result()

    data = client.get(f"/api/runs/{run.id}").json()
    assert data["final"]["checkpoint_id"] == trained.id
    assert data["final"]["checkpoint_from"]["kind"] == "weight"
    [section] = data["weight_phases"]
    jobs = section["jobs"]
    done = [j for j in jobs if j["status"] == "done"]
    assert [j["checkpoint_out_id"] for j in done] == [data["final"]["checkpoint_id"]]
    summary = " ".join(
        re.sub(r"<[^>]+>", " ", text_of_dd(client.get(f"/runs/{run.id}").text)).split()
    )
    assert f"checkpoint {trained.id} (from weight phase 1)" in summary
    # the run still runs (the loop has not closed it): its pair is "current", and untested
    assert "last finished phase: weight phase 1; untested" in summary
    assert ">current</dt>" in client.get(f"/runs/{run.id}").text


def text_of_dd(page: str) -> str:
    return re.search(r'<dd id="final-pair">(.*?)</dd>', page, re.S).group(1)
