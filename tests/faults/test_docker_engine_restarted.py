"""A restart of the Docker engine itself in the middle of an evaluation. The suite's engine is
shared by every test, so this one starts an engine of its own (its own socket, data and state
folders and network namespace, no bridge network: sandboxes have none), loads the sandbox image
into it and points the workbench at it with DOCKER_HOST. Restarted, the engine kills the
containers it ran: the rollouts in them end as `crash`; those that asked for a container while it
was down are tried again once it answers (infrastructure failures, `[rollout] infra_retries`), in
containers the pool starts anew, and the evaluation completes."""

import asyncio
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from sandbox import docker as docker_backend
from sandbox import image
from sandbox.docker import DockerLauncher
from tests.conftest import MISSING, REPO
from tests.faults.test_sandbox_containers_killed import evaluate_through
from tests.loop.conftest import store_invariants


class Engine:
    """A dockerd of this test's own, which it can stop and start again on the same state."""

    def __init__(self, root: Path):
        self.root = root
        self.host = f"unix://{root}/docker.sock"
        self.proc: subprocess.Popen | None = None
        self.image = ""  # the sandbox image's tag, once loaded

    def start(self) -> None:
        import docker

        self.proc = subprocess.Popen(
            [
                # a network namespace of its own: started without a bridge, dockerd deletes
                # the host's docker0, which the suite's engine needs to build images
                "unshare",
                "--net",
                "dockerd",
                f"--host={self.host}",
                f"--data-root={self.root}/data",
                f"--exec-root={self.root}/exec",
                f"--pidfile={self.root}/docker.pid",
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
            ],
            stdout=open(self.root / "dockerd.log", "ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                docker.DockerClient(base_url=self.host, timeout=2).ping()
                return
            except docker.errors.DockerException:
                assert self.proc.poll() is None, (self.root / "dockerd.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the test's Docker engine did not start"
                time.sleep(0.2)

    def stop(self) -> None:
        """What `systemctl restart docker` does first: SIGTERM, and dockerd stops what it runs."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)


@pytest.fixture
def own_engine(whale_env):
    if docker_backend.engine_available() is not None or shutil.which("dockerd") is None:
        pytest.skip(f"{MISSING}the Docker engine")
    tag = image.build(say=lambda m: None)
    host_bridge = Path("/sys/class/net/docker0").exists()  # the suite's engine's; left alone
    # a short path: a unix socket's path has at most 107 bytes
    engine = Engine(Path(tempfile.mkdtemp(prefix="whale-dockerd-", dir="/tmp")))
    engine.start()
    try:
        save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "-H", engine.host, "load", "-q"],
            stdin=save.stdout,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        assert save.wait() == 0
        engine.image = tag
        yield engine
    finally:
        engine.stop()
        shutil.rmtree(engine.root, ignore_errors=True)
    assert Path("/sys/class/net/docker0").exists() == host_bridge, "the host's docker0 was removed"


def test_a_docker_engine_restart_mid_evaluation_fails_the_rollouts_it_hit_and_the_rest_run(
    tmp_path, whale_env, own_engine
):
    db = tmp_path / "home" / "whale.db"
    env = {
        **whale_env,
        "WHALE_SANDBOX": "docker",
        "DOCKER_HOST": own_engine.host,
        "WHALE_CONCURRENCY": "2",  # two at a time: some are still to start at the restart
    }

    def restart():
        own_engine.stop()
        time.sleep(2)  # the engine stays down a moment, as in a real restart
        own_engine.start()

    evaluate_through(restart, env, db, limit=8)

    store_invariants(db)  # the evaluation is done, nothing pending, records whole
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT id, status, reason, error, attempts FROM rollout ORDER BY id"
    ).fetchall()
    crashed = [r for r in rows if r[2] == "crash"]
    assert crashed, rows  # the ones running when the engine stopped its containers
    for _, status, _, error, _ in crashed:
        assert status == "error" and "the sandbox stopped answering" in error, error
    # a rollout that asked for a container while the engine was down was tried again once it
    # answered, and ran: none is left `infra` for want of a sandbox
    assert [r for r in rows if r[2] in ("sandbox_start", "infrastructure")] == [], rows
    retried = [r for r in rows if r[4] > 1]
    assert retried and all(r[1] in ("pass", "fail") for r in retried), rows
    after = [r for r in rows if r[0] > max(c[0] for c in crashed)]
    assert after and all(r[1] in ("pass", "fail") for r in after), rows
    # the log tells it: sandboxes lost, sandboxes failing to start, starting again
    kinds = [k for (k,) in con.execute("SELECT kind FROM event ORDER BY id")]
    assert "sandbox_lost" in kinds, kinds
    assert kinds.index("sandbox_start_failing") < kinds.index("sandbox_start_back"), kinds


def test_a_runner_container_reads_as_gone_while_its_engine_does_not_answer(
    tmp_path, monkeypatch, own_engine
):
    """A rollout whose runner stopped answering asks the launcher why: with the engine down that
    question must answer (the container is taken as gone), not raise out of the evaluation."""
    monkeypatch.setenv("DOCKER_HOST", own_engine.host)
    launcher = DockerLauncher(own_engine.image, owner="engine-down-test")
    harness, gateway, control = tmp_path / "harness.py", tmp_path / "gateway.sock", tmp_path / "c"
    harness.write_text((REPO / "harness_archive/seeds/arith/seed.py").read_text())
    gateway.touch()
    control.mkdir()
    container = asyncio.run(launcher.start(harness, gateway, control))
    assert launcher.exited(container) is None and launcher.unavailable() is None

    own_engine.stop()
    assert "the Docker engine does not answer" in launcher.exited(container)
    assert "the Docker engine does not answer" in launcher.unavailable()

    own_engine.start()  # the restarted engine stopped the container; it says so again
    assert launcher.unavailable() is None
    assert launcher.exited(container).startswith("container exited with code")
