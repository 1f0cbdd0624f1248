"""A rollout's score does not depend on how busy the machine is: its time limit counts the
harness's own time, not the wait on model calls; admission follows the model server's queue;
infrastructure failures are retried, then left out of mean@k with their count."""

import asyncio
import multiprocessing
import os
import sqlite3
import statistics
import time

import pytest

from app.llm.client import ChatEndpoint
from app.llm.local import LocalModelServer, prepare_model
from app.rollout.admission import Admission, ServerQueue, waiting_requests
from tests.conftest import REPO, whale_eval_json
from tests.openai_stub import openai_stub

SEED = REPO / "harness_archive/seeds/arith/seed.py"

# Three model calls of 60 tokens take seconds on the demo model; the harness itself, milliseconds.
CHATTY = """
def run(task, llm, tools):
    for _ in range(3):
        llm.chat([{"role": "user", "content": "Count from 1 to 100."}], max_tokens=60)
    return "0"
"""
SLEEPY = """
import time
def run(task, llm, tools):
    time.sleep(6)
    return "0"
"""
ONE_CALL = """
def run(task, llm, tools):
    return llm.chat([{"role": "user", "content": task["question"]}]).content
"""


def rollouts(home, run_id: int) -> list[dict]:
    with sqlite3.connect(home / "whale.db") as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM rollout WHERE run_id = ? ORDER BY id", (run_id,))
        return [dict(r) for r in rows]


def test_waiting_on_the_model_is_not_the_harness_s_time(whale_env, tmp_path):
    env = {**whale_env, "WHALE_ROLLOUT_TIMEOUT": "1"}
    harness = tmp_path / "chatty.py"
    harness.write_text(CHATTY)
    out = whale_eval_json(harness, env, "--domain", "arith", "--limit", "2", "-k", "1")
    assert out["statuses"] == {"fail": 2}, out  # answered "0": wrong, but not out of time
    for rollout in rollouts(tmp_path / "home", out["run_id"]):
        assert rollout["turns"] == 3
        # the wall clock passed the 1 s limit; the harness's own share of it did not
        assert rollout["wall_s"] > 1.0 > rollout["harness_s"], rollout
        assert rollout["model_wait_s"] > 1.0
        assert rollout["harness_s"] + rollout["model_wait_s"] == pytest.approx(rollout["wall_s"])
        assert rollout["attempts"] == 1 and rollout["started_at"] is not None


def test_a_harness_stuck_in_its_own_code_still_times_out(whale_env, tmp_path):
    env = {**whale_env, "WHALE_ROLLOUT_TIMEOUT": "1"}
    harness = tmp_path / "sleepy.py"
    harness.write_text(SLEEPY)
    started = time.monotonic()
    out = whale_eval_json(harness, env, "--domain", "arith", "--limit", "2", "-k", "1")
    assert out["statuses"] == {"timeout": 2}, out
    (first, second) = rollouts(tmp_path / "home", out["run_id"])
    assert "harness time limit of 1s exceeded" in first["error"], first["error"]
    assert first["wall_s"] < 5  # stopped at the limit, not after the 6 s sleep
    assert time.monotonic() - started < 60


def test_infrastructure_failures_are_retried_then_left_out(whale_env, tmp_path):
    # One rollout at a time, so the script is consumed in order: the first rollout's first try
    # gets a 503 and its second try an answer; the second rollout gets 503s on all three tries.
    with openai_stub([503, "4", 503, 503, 503]) as (url, seen):
        env = {
            **whale_env,
            "WHALE_LLM_URL": url,
            "WHALE_LLM_MODEL": "hosted-model",
            "WHALE_CONCURRENCY": "1",
        }
        harness = tmp_path / "one_call.py"
        harness.write_text(ONE_CALL)
        out = whale_eval_json(harness, env, "--domain", "arith", "--limit", "2", "-k", "1")
    assert len(seen) == 5
    first, second = rollouts(tmp_path / "home", out["run_id"])
    assert first["attempts"] == 2 and first["status"] in ("pass", "fail"), first
    assert second["attempts"] == 3 and second["status"] == "infra", second
    assert second["reason"] == "infrastructure" and "503" in second["error"]
    assert "after 3 tries" in second["error"]
    assert out["n_infra"] == 1 and out["statuses"]["infra"] == 1
    # mean@k is the first rollout's reward alone: the infrastructure failure is not a 0
    assert out["mean_at_k"] == first["reward"]
    with sqlite3.connect(tmp_path / "home" / "whale.db") as db:
        (steps,) = db.execute(
            "SELECT count(*) FROM step WHERE rollout_id = ?", (first["id"],)
        ).fetchone()
    assert steps == 1  # the failed try's step was dropped with it


VLLM_METRICS = """# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3.5-9B"} 7.0
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3.5-9B"} 32.0
"""


def test_the_queue_is_read_from_vllm_and_local_metrics():
    assert waiting_requests(VLLM_METRICS) == 7
    assert waiting_requests("whale:num_requests_waiting 3\n") == 3
    assert waiting_requests("# a server without a queue metric\nup 1\n") is None


def test_admission_holds_rollouts_while_the_server_has_a_queue(model_cache, tmp_path):
    """A local server that decodes one request at a time, twelve calls: told of its queue,
    admission lets the first six go (its upper bound) and then keeps the rest to what the
    server takes (one decoding, one next); told nothing, all twelve go at once."""
    os.environ["WHALE_LOCAL_MAX_BATCH"] = "1"
    try:
        server = LocalModelServer(prepare_model(model_cache), tmp_path / "model.log")
        server.start()
    finally:
        del os.environ["WHALE_LOCAL_MAX_BATCH"]

    async def twelve_calls(admission: Admission) -> list[int]:
        """Rollouts in flight as each call entered its slot, in the order they entered."""
        endpoint = ChatEndpoint(server.base_url, server.model)
        entered = []

        async def call():
            async with admission.slot():
                entered.append(admission.in_flight)
                answer = await endpoint.chat(
                    server.model, [{"role": "user", "content": "Hi"}], max_tokens=8
                )
                assert answer["choices"][0]["message"]["content"]

        try:
            await asyncio.gather(*(call() for _ in range(12)))
        finally:
            await endpoint.close()
        return entered

    try:
        queue = ServerQueue([server.base_url])
        held = Admission(6, queue)
        entered = asyncio.run(twelve_calls(held))
        assert queue.available  # the local server reports its queue
        free = Admission(12, None)
        asyncio.run(twelve_calls(free))
    finally:
        server.stop()
    assert entered[:6] == [1, 2, 3, 4, 5, 6]
    assert max(entered[6:]) <= 4, entered  # two taken, and two more while the queue is empty
    assert held.held_s > 0
    assert free.peak == 12


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.slow
def test_scores_do_not_move_when_the_machine_is_busy(whale_env, tmp_path):
    """The arith seed at temperature 0 (so that both runs draw the same answers), 6 tasks x
    k=2 with a 4 s harness-time limit, alone and then beside two processes spinning on the two
    cores: the same statuses, and the busy mean@k within the quiet one's interval."""
    from app.search.knobs import with_knob

    greedy = tmp_path / "greedy.py"
    greedy.write_text(with_knob(SEED.read_text(), "TEMPERATURE", 0.0))
    base = {**whale_env, "WHALE_ROLLOUT_TIMEOUT": "4"}
    args = ("--limit", "6", "-k", "2")
    quiet = whale_eval_json(greedy, {**base, "WHALE_HOME": str(tmp_path / "quiet")}, *args)
    hogs = [multiprocessing.Process(target=_spin, args=(600,), daemon=True) for _ in range(2)]
    for hog in hogs:
        hog.start()
    try:
        busy = whale_eval_json(greedy, {**base, "WHALE_HOME": str(tmp_path / "busy")}, *args)
    finally:
        for hog in hogs:
            hog.kill()
    for out in (quiet, busy):
        assert set(out["statuses"]) <= {"pass", "fail"}, out  # no timeout, error or infra
        assert out["n_rollouts"] == 12
    busy_rows = rollouts(tmp_path / "busy", busy["run_id"])
    quiet_rows = rollouts(tmp_path / "quiet", quiet["run_id"])
    # the load was real: rollouts took longer on the wall clock than their limit allows (the
    # quiet run is not compared: beside another xdist worker it is not quiet either)
    assert max(r["wall_s"] for r in busy_rows) > 4.0
    # greedy answers do not depend on the load (a batch's padding may, rarely, flip one)
    same = sum(q["answer"] == b["answer"] for q, b in zip(quiet_rows, busy_rows))
    assert same >= 11, [(q["answer"], b["answer"]) for q, b in zip(quiet_rows, busy_rows)]
    # the busy score lies within the quiet one's 95% interval over tasks (at least one
    # rollout's worth wide)
    per_task: dict[str, list[float]] = {}
    for r in quiet_rows:
        per_task.setdefault(r["task_id"], []).append(r["reward"])
    means = [statistics.mean(v) for v in per_task.values()]
    half = 1.96 * statistics.stdev(means) / len(means) ** 0.5
    assert abs(busy["mean_at_k"] - quiet["mean_at_k"]) <= max(half, 1 / 12), (quiet, busy)
