"""Steering a run of `whale serve` over its API: start, pause (nothing new starts), resume,
force a phase, stop; bad experiments and conflicting actions are refused with the reason."""

import json
import sqlite3
import time
from datetime import UTC, datetime

import httpx
import pytest

from tests.conftest import AUTH, REPO, csrf_headers, whale, whale_serve
from tests.loop.conftest import quick_toml
from tests.loop.test_crash import wait_for


def finished_rollouts(db) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT count(*) FROM rollout WHERE status != 'pending'").fetchone()[0]
    finally:
        con.close()


def started_since(db, moment: datetime) -> list[int]:
    """Rollouts that started after `moment` (UTC, as the store writes it)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, started_at FROM rollout WHERE started_at IS NOT NULL")
        return [i for i, at in rows if datetime.fromisoformat(at) > moment]
    finally:
        con.close()


def settled(db, quiet_s: float = 8, timeout: float = 180) -> int:
    """The finished-rollout count once it has not moved for `quiet_s`."""
    count, since, deadline = finished_rollouts(db), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "rollouts kept finishing while paused"
        time.sleep(1)
        now = finished_rollouts(db)
        if now != count:
            count, since = now, time.monotonic()
    return count


@pytest.mark.slow
def test_start_pause_resume_force_stop_over_the_api(tmp_path, whale_env):
    db = tmp_path / "home" / "whale.db"
    # At most 8 rollouts in flight: when the pause comes, those still finish (queued behind each
    # other in the CPU model server); with 32 they could take longer than the quiet window.
    with whale_serve({**whale_env, "WHALE_CONCURRENCY": "8"}) as url:
        csrf = csrf_headers(url)
        bad = httpx.post(
            url + "/api/runs",
            headers=csrf,
            json={"experiment": 'name = "x"\n[budget]\nrollout = 5'},
        )
        assert (
            bad.status_code == 422 and "budget.rollout: Extra inputs are not permitted" in bad.text
        )

        # over HTTP the harness comes as code (a server path would be refused)
        seed = (REPO / "harness_archive" / "seeds" / "arith" / "seed.py").read_text()
        text = f"harness_code = {json.dumps(seed)}\n" + quick_toml(
            "steered", rollouts=400, rft={"samples_per_prompt": 4}
        )
        started = httpx.post(
            url + "/api/runs", headers=csrf, json={"experiment": text}, timeout=300
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["run"]["id"]
        first = started.json()["run"]["config"]["start"]["harness_id"]
        assert (
            httpx.get(f"{url}/api/harnesses/{first}", headers=AUTH).json()["harness"]["code"]
            == seed
        )

        def act(action, **body):
            return httpx.post(
                f"{url}/api/runs/{run_id}/{action}",
                headers=csrf,
                json={"reason": "test", **body},
                timeout=30,
            )

        def status():
            return httpx.get(f"{url}/api/runs/{run_id}", headers=AUTH, timeout=30).json()["run"][
                "status"
            ]

        wait_for(db, "SELECT count(*) > 3 FROM rollout WHERE status != 'pending'")

        assert act("pause").status_code == 200
        wait_for(db, f"SELECT count(*) FROM run WHERE id = {run_id} AND status = 'paused'", 60)
        paused_at = datetime.now(UTC).replace(tzinfo=None)
        before = settled(db, quiet_s=15)  # the rollouts in flight have finished...
        time.sleep(8)
        assert status() == "paused" and started_since(db, paused_at) == []  # ...and none started
        again = act("pause")
        assert again.status_code == 409 and "already paused" in again.json()["detail"]

        assert act("resume").status_code == 200
        wait_for(db, f"SELECT count(*) > {before} FROM rollout WHERE status != 'pending'", 120)
        assert status() == "running"

        assert act("force", kind="harness").status_code == 200
        # Landing inside a phase, the force ends it ('manual'); landing between two (during a
        # test point) it picks the next one. Either way the next phase is a harness phase.
        applied = "(SELECT created_at FROM event WHERE kind = 'control_applied')"
        wait_for(db, f"SELECT count(*) FROM phase WHERE created_at > {applied}", 300)
        con = sqlite3.connect(db)
        ended, forced = (
            con.execute(
                f"SELECT kind, ended_reason FROM phase WHERE created_at {op} {applied} "
                f"ORDER BY id {order} LIMIT 1"
            ).fetchone()
            for op, order in (("<", "DESC"), (">", "ASC"))
        )
        con.close()
        assert ended[1] is not None and forced[0] == "harness", (ended, forced)

        assert act("stop").status_code == 200
        wait_for(db, f"SELECT count(*) FROM run WHERE id = {run_id} AND status = 'stopped'", 300)
        # a stopped run leaves nothing behind: no running evaluation or phase, no pending
        # rollout, and the phase says the stop ended it (whale check: every invariant holds)
        con = sqlite3.connect(db)
        left = con.execute(
            """SELECT (SELECT count(*) FROM evaluation WHERE status = 'running'),
                      (SELECT count(*) FROM rollout WHERE status = 'pending'),
                      (SELECT count(*) FROM phase WHERE status = 'running')"""
        ).fetchone()
        # the rollouts in flight at the stop finished as rollouts do: none was cut off
        cut = con.execute(
            "SELECT count(*) FROM rollout "
            "WHERE reason IN ('crash', 'infrastructure') OR error LIKE '%stopped answering%'"
        ).fetchone()
        last = con.execute("SELECT ended_reason FROM phase ORDER BY id DESC LIMIT 1").fetchone()
        con.close()
        assert left == (0, 0, 0) and last == ("stopped",) and cut == (0,)
        checked = whale("check", str(run_id), env=whale_env, timeout=60)
        assert checked.returncode == 0, checked.stdout
        late = act("pause")
        assert late.status_code == 409 and "the run is stopped" in late.json()["detail"]
        events = httpx.get(f"{url}/api/runs/{run_id}/events", headers=AUTH).json()
    kinds = [(e["kind"], (e["detail"] or {}).get("action")) for e in events]
    assert ("control", "pause") in kinds and ("control_refused", "pause") in kinds
    assert ("control_applied", "force") in kinds, kinds
    assert kinds[-2:] == [("run_end", None), ("control_refused", "pause")]


# Two rollouts in flight and the rest queued: each rollout holds its slot for a second and a
# half, and answers right by itself, so the step accepts all and trains.
SLOW = """
import time

def run(task, llm, tools):
    llm.chat([{"role": "user", "content": task["question"]}], max_tokens=4)
    time.sleep(1.5)
    return str(eval(task["question"].removeprefix("What is ").rstrip("?")))
"""


@pytest.mark.slow
def test_pause_and_stop_say_what_they_wait_for_mid_evaluation_and_mid_training(tmp_path, whale_env):
    """Through `whale serve` as the buttons do: a pause asked while an RFT step samples says
    "pausing: N rollouts in flight" at once and until they end, starting none of those queued;
    resumed, a stop asked while the step trains says the training ends first, and the run then
    stops with no new training job and ends on the checkpoint its tables show."""
    db = tmp_path / "home" / "whale.db"
    text = f"harness_code = {json.dumps(SLOW)}\n" + quick_toml(
        "held", "weight_only", rollouts=400, rft={"prompts_per_step": 4, "samples_per_prompt": 3}
    )
    with whale_serve({**whale_env, "WHALE_CONCURRENCY": "2"}) as url:
        csrf = csrf_headers(url)
        started = httpx.post(
            url + "/api/runs", headers=csrf, json={"experiment": text}, timeout=300
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["run"]["id"]

        def act(action):
            reply = httpx.post(
                f"{url}/api/runs/{run_id}/{action}", headers=csrf, json={"reason": "t"}, timeout=30
            )
            assert reply.status_code == 200, reply.text

        def dashboard():
            page = httpx.get(f"{url}/api/runs/{run_id}", headers=AUTH, timeout=30).json()
            return page["dashboard"]

        # mid-evaluation: the step's sampling has rollouts running and others queued
        wait_for(
            db,
            "SELECT (SELECT count(*) FROM rollout WHERE status = 'pending'"
            " AND started_at IS NOT NULL) >= 1 AND (SELECT count(*) FROM rollout"
            " WHERE status = 'pending' AND started_at IS NULL) >= 1",
            120,
        )
        act("pause")
        held = dashboard()
        assert held["run"]["shown_status"] == "pausing", held["run"]
        assert held["activity"].startswith("pausing: ") and "in flight" in held["activity"]

        def pending() -> tuple[int, int]:
            """(running, queued) rollouts, as the store has them."""
            con = sqlite3.connect(db)
            try:
                return con.execute(
                    "SELECT count(started_at), count(*) - count(started_at) FROM rollout"
                    " WHERE status = 'pending'"
                ).fetchone()
            finally:
                con.close()

        # "pausing" while any runs, "paused" once none does; the queued ones never start
        deadline = time.monotonic() + 60
        while (shown := dashboard()["run"]["shown_status"]) != "paused":
            assert shown == "pausing" and time.monotonic() < deadline, shown
            time.sleep(0.3)
        running, queued = pending()
        assert running == 0 and queued >= 1
        time.sleep(3)
        assert pending() == (0, queued)

        # mid-training: resumed, the sampling ends and the step trains; a stop then waits for it
        act("resume")
        wait_for(db, "SELECT count(*) FROM training_job WHERE status = 'training'", 300)
        asked = datetime.now(UTC).replace(tzinfo=None)  # as the store writes its times
        act("stop")
        held = dashboard()
        assert held["run"]["shown_status"] == "stopping", held["run"]
        # While the step still trains, the page names what the stop waits for; a bare
        # "stopping" only once the training has ended (it may have, between the two requests).
        con = sqlite3.connect(db)
        training = con.execute("SELECT count(*) FROM training_job WHERE status = 'training'")
        still_training = training.fetchone()[0] > 0
        con.close()
        if still_training or held["activity"] != "stopping":
            assert held["activity"] == (
                "stopping: training (RFT step 1 of weight phase 1, step 1 of the run) ends first"
            ), held
        wait_for(db, f"SELECT count(*) FROM run WHERE id = {run_id} AND status = 'stopped'", 300)
        con = sqlite3.connect(db)
        jobs = con.execute("SELECT status, checkpoint_out_id FROM training_job").fetchall()
        last_phase = con.execute(
            "SELECT checkpoint_out_id FROM phase ORDER BY id DESC LIMIT 1"
        ).fetchone()
        con.close()
        # no training job began after the stop, and the run ends on the step's checkpoint
        assert [status for status, _ in jobs] == ["done"], jobs
        assert last_phase == (jobs[0][1],)
        # nor anything else: the step's test point (after_phase) is not created once it ends
        con = sqlite3.connect(db)
        late = con.execute("SELECT id, created_at FROM evaluation").fetchall()
        con.close()
        assert [i for i, at in late if datetime.fromisoformat(at) > asked] == [], late
