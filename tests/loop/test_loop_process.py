"""`whale serve` is two processes: the web answers pages, the loop process beside it drives the
runs. A run posted over HTTP is stored at once and started by the loop process; the loop process
killed mid-run is started again while the pages keep answering, and the run resumes; SIGTERM to
the server stops both, the run's log says why, and the next server resumes the run."""

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from app.interrupts import GRACE_S
from app.loop.driver import DRIVER_EVENTS
from tests.conftest import AUTH, REPO, csrf_headers
from tests.loop.conftest import logged, quick_toml, store_invariants
from tests.loop.test_crash import serve, wait_for


def loop_processes(server_pid: int) -> list[int]:
    """The server's children running the loop worker (`python -m app.loop`)."""
    found = []
    for task in Path(f"/proc/{server_pid}/task").iterdir():
        for kid in (task / "children").read_text().split():
            try:
                cmd = Path(f"/proc/{kid}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            if b"app.loop" in cmd:
                found.append(int(kid))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone too
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_the_loop_runs_beside_the_pages_restarts_when_killed_and_stops_with_the_server(
    tmp_path, whale_env
):
    db = tmp_path / "home" / "whale.db"
    seed = (REPO / "harness_archive" / "seeds" / "arith" / "seed.py").read_text()
    text = f"harness_code = {json.dumps(seed)}\n" + quick_toml(
        "beside", "harness_only", rollouts=24, search={"tasks": 4}
    )
    proc, url = serve(whale_env)
    try:
        (worker,) = loop_processes(proc.pid)
        started = httpx.post(
            url + "/api/runs", headers=csrf_headers(url), json={"experiment": text}, timeout=30
        )
        assert started.status_code == 201, started.text
        run = started.json()["run"]
        # stored as submitted: its first harness is recorded, the loop process begins it
        assert run["status"] == "created" and run["config"]["start"]["checkpoint_id"] is None
        wait_for(db, "SELECT count(*) >= 2 FROM rollout WHERE status != 'pending'")

        os.kill(worker, signal.SIGKILL)  # a bug, an OOM kill: the pages do not notice
        page = httpx.get(f"{url}/api/runs/{run['id']}", headers=AUTH, timeout=30)
        assert page.status_code == 200 and page.json()["run"]["status"] == "running"
        deadline = time.monotonic() + 60
        while not [p for p in loop_processes(proc.pid) if p != worker]:
            assert time.monotonic() < deadline, "the loop process was not started again"
            time.sleep(0.2)
        # resumed, then stopped mid-run by a SIGTERM to the server (systemd, docker stop)
        wait_for(db, "SELECT count(*) >= 1 FROM event WHERE kind = 'run_resumed'", timeout=60)
        wait_for(db, "SELECT count(*) >= 6 FROM rollout WHERE status != 'pending'")
        (second,) = loop_processes(proc.pid)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(GRACE_S + 15)
    finally:
        proc.kill()
        proc.wait()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert code == 0, stderr[-2000:]
    assert "the loop process exited with code -9; starting it again" in stderr
    assert not alive(second), "the loop process outlived the server"

    proc, url = serve(whale_env)  # the next server resumes the run to its end
    try:
        wait_for(db, f"SELECT count(*) FROM run WHERE id = {run['id']} AND status = 'done'")
    finally:
        proc.terminate()
        proc.wait(GRACE_S + 15)
        stderr += proc.stderr.read().decode()
        proc.stderr.close()
    store_invariants(db)
    drivers = [(e.kind, e.detail) for e in logged(db, *DRIVER_EVENTS)]
    assert [k for k, _ in drivers] == [
        "run_start",
        "run_resumed",  # after the kill of the loop process: no word from it
        "run_interrupted",
        "run_resumed",
    ], (drivers, stderr[-3000:])
    assert "did not record" in drivers[1][1]["after"]
    assert drivers[2][1]["why"] == drivers[3][1]["after"] == "the server shut down"
