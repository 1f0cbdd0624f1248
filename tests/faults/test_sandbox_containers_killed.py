"""`docker kill` of an evaluation's warm sandbox containers while rollouts run in them, on this
store's containers only (test_docker_engine_restarted.py restarts an engine of its own). The
rollouts that were in them end as `crash`, naming the container's exit; the pool starts a new
container for the rest, and the evaluation completes."""

import json
import sqlite3
import subprocess

import pytest

from sandbox import docker as docker_backend
from sandbox import image
from tests.conftest import MISSING, REPO, WHALE
from tests.loop.conftest import logged, store_invariants
from tests.loop.test_crash import wait_for

STARTED_AND_MORE_TO_COME = """SELECT
    (SELECT count(*) FROM rollout WHERE status != 'pending') > 0
    AND (SELECT count(*) FROM rollout WHERE status = 'pending') > 2"""


@pytest.fixture
def docker_store(whale_env) -> dict[str, str]:
    why = docker_backend.engine_available()
    if why is not None:
        pytest.skip(f"{MISSING}the Docker engine ({why})")
    image.build(say=lambda m: None)
    # two rollouts at a time: some are still to start when the containers die
    return {**whale_env, "WHALE_SANDBOX": "docker", "WHALE_CONCURRENCY": "2"}


def evaluate_through(fault, env: dict[str, str], db, limit: int) -> None:
    """`whale eval` of the arith seed harness on `limit` tasks, k=1, with `fault()` injected once
    some rollouts finished and more are to come; the evaluation still ends with every rollout."""
    seed = REPO / "harness_archive/seeds/arith/seed.py"
    proc = subprocess.Popen(
        [WHALE, "eval", str(seed), "--limit", str(limit), "-k", "1", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(db, STARTED_AND_MORE_TO_COME, timeout=120)
        fault()
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode()[-3000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["n_rollouts"] == limit


def test_killed_sandbox_containers_fail_their_rollouts_and_the_pool_starts_anew(
    tmp_path, docker_store
):
    import docker

    home = tmp_path / "home"
    db = home / "whale.db"

    def kill_containers():
        ours = {"label": f"{docker_backend.LABEL}={docker_backend.owner_label(home)}"}
        killed = docker.from_env().containers.list(filters=ours)
        assert killed, "no sandbox container of this store is running"
        for container in killed:
            container.kill()

    evaluate_through(kill_containers, docker_store, db, limit=6)

    store_invariants(db)  # the evaluation is done, nothing pending, records whole
    con = sqlite3.connect(db)
    rows = con.execute("SELECT id, status, reason, error FROM rollout ORDER BY id").fetchall()
    crashed = [r for r in rows if r[2] == "crash"]
    assert crashed, rows
    for _, status, _, error in crashed:
        assert status == "error" and "the sandbox stopped answering" in error
        # docker's record of the exit (137: SIGKILL), or, before docker has it, the runner gone
        gone = ("container exited with code 137", "its runner server no longer accepts connections")
        assert any(why in error for why in gone), error
    # the rollouts started after the kill ran in a container the pool started for them
    after = [r for r in rows if r[0] > max(c[0] for c in crashed)]
    assert after and not {r[2] for r in after} & {"crash", "sandbox_start", "infrastructure"}, rows
    # the run's log says which sandboxes were lost and why, once each
    lost = logged(db, "sandbox_lost")
    assert 1 <= len(lost) <= len(crashed), lost
    assert all(e.detail["backend"] == "docker" for e in lost), lost
