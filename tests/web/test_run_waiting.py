"""What the run page says while a live run is held up: just started and nothing finished yet,
or its model server down (crashed and restarting, or given up on), with since when; and the
model server's crashes and restarts as lines of its event log."""

import html
import re
from datetime import timedelta

from app.db.schema import Event, Run, now


def started_run(store, seconds_ago: float = 12) -> tuple[Run, object]:
    """A loop run started a few seconds ago whose first test evaluation has queued rollouts."""
    run = store.write(
        Run(
            name="fresh",
            kind="experiment",
            domain="arith",
            status="running",
            strategy="whale",
            desired="running",
            created_at=now() - timedelta(seconds=seconds_ago),
        )
    )
    evaluation = store.evaluation(run, store.harness(run), store.checkpoint(), n_tasks=4, k=2)
    store.rollouts(evaluation, ["pending"] * 8)
    return run, evaluation


def waiting_line(page: str) -> str:
    found = re.search(r'<p class="notice" id="waiting" role="status">(.*?)</p>', page, re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split()) if found else ""


def test_a_run_just_started_says_it_is_starting_and_for_how_long(store, client):
    run, evaluation = started_run(store)
    d = client.get(f"/api/runs/{run.id}").json()["dashboard"]
    assert d["waiting"]["on"] == "start" and d["waiting"]["why"] is None
    assert d["activity"] == f"test evaluation of harness {evaluation.harness_id}: 0 / 8 rollouts"
    line = waiting_line(client.get(f"/runs/{run.id}").text)
    assert line.startswith("starting: no rollout has finished yet (since ")
    seconds = int(re.search(r", (\d+) s ago\)", line).group(1))
    assert 12 <= seconds < 60

    (first, *_) = store.rollouts(evaluation, ["pass"])  # the first one is in
    assert first.status == "pass"
    assert client.get(f"/api/runs/{run.id}").json()["dashboard"]["waiting"] is None
    assert 'id="waiting"' not in client.get(f"/runs/{run.id}").text


def test_a_crashed_model_server_is_what_the_run_waits_for_until_it_is_back(store, client):
    run, evaluation = started_run(store)
    store.rollouts(evaluation, ["pass"])
    why = "local model server was killed by SIGKILL; restarting it (log: /x/model-server.log)"
    store.write(Event(run_id=run.id, kind="model_server_exited", detail={"why": why, "pid": 7}))
    d = client.get(f"/api/runs/{run.id}").json()["dashboard"]
    assert d["waiting"]["on"] == "model_server" and d["waiting"]["why"] == why
    page = client.get(f"/runs/{run.id}").text
    line = waiting_line(page)
    assert line.startswith("waiting for the model server to come back: rollouts wait")
    assert line.endswith(why)
    assert why in html.unescape(page[page.index('id="events"') :])  # and in the log

    store.write(Event(run_id=run.id, kind="model_server_restarted", detail={"down_s": 4.2}))
    d = client.get(f"/api/runs/{run.id}").json()["dashboard"]
    assert d["waiting"] is None
    assert d["events"][0]["text"] == "the model server is back (down 4.2 s)"


def test_a_model_server_given_up_on_is_said_to_be_down(store, client):
    run, _ = started_run(store)
    why = "local model server exited with code 1: 4 crashes in 300s; not restarting it again"
    store.write(Event(run_id=run.id, kind="model_server_gave_up", detail={"why": why}))
    line = waiting_line(client.get(f"/runs/{run.id}").text)
    assert line.startswith("the model server is down and is not restarted again") and why in line


def test_a_finished_run_waits_for_nothing(store, client):
    run, _ = started_run(store)
    store.write_values(run, status="done", finished_at=now())
    assert client.get(f"/api/runs/{run.id}").json()["dashboard"]["waiting"] is None


def test_a_server_started_on_unfinished_runs_says_they_wait_for_the_model_to_load(store, client):
    run, evaluation = started_run(store)
    store.rollouts(evaluation, ["pass"])
    store.write(Event(run_id=run.id, kind="model_loading", detail={"backend": "local"}))
    d = client.get(f"/api/runs/{run.id}").json()["dashboard"]
    assert d["waiting"]["on"] == "model_server"
    line = waiting_line(client.get(f"/runs/{run.id}").text)
    assert line.startswith("waiting for the model server to load (local backend)")
    store.write(Event(run_id=run.id, kind="model_ready", detail={"load_s": 41.5}))
    assert client.get(f"/api/runs/{run.id}").json()["dashboard"]["waiting"] is None
    page = client.get(f"/runs/{run.id}").text
    assert "the model server is up (loaded in 41.5 s)" in page
