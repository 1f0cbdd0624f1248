"""`whale demo --quick` as a user runs it (its own model server), checked through the JSON API."""

import asyncio
import os
import re
import subprocess

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.server import create_app
from app.workbench import Workbench
from tests.conftest import AUTH, WEB_TOKEN, WHALE, free_port

# the module's tests share one `whale demo` for the module: under xdist they run on one worker
pytestmark = pytest.mark.xdist_group("demo")


@pytest.fixture(scope="module")
def demo(tmp_path_factory, model_cache):
    home = tmp_path_factory.mktemp("demo") / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHALE_LLM")}
    env.update(WHALE_HOME=str(home), WHALE_MODEL_CACHE=str(model_cache))
    proc = subprocess.run(
        [WHALE, "demo", "--quick", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    workbench = Workbench(Settings(home=home, model_cache=model_cache), say=lambda m: None)
    app = create_app(workbench, token=WEB_TOKEN)
    with TestClient(app, base_url="http://localhost", headers=AUTH) as client:
        yield proc, client
    asyncio.run(workbench.stop())


def all_rollouts(client, run_id: int) -> list[dict]:
    items, after = [], None
    while True:
        data = client.get("/api/rollouts", params={"run": run_id, "after": after}).json()
        items += data["items"]
        if data["next_after"] is None:
            return items
        after = data["next_after"]


def test_demo_prints_mean_at_k_and_stores_a_consistent_evaluation(demo):
    proc, client = demo
    printed = re.search(
        r"mean@2 = ([0-9.]+) \[([0-9.]+), ([0-9.]+)\] \(95%, over the tasks\) on test "
        r"\(16 tasks x k=2",
        proc.stdout,
    )
    assert printed, proc.stdout
    # its UI needs the access token printed with its address, as `whale serve`'s does
    assert re.search(r"UI: http://127\.0\.0\.1:\d+/\?token=[\w-]{32,}", proc.stderr), proc.stderr
    (run,) = client.get("/api/runs").json()["runs"]
    assert run["status"] == "done"
    detail = client.get(f"/api/runs/{run['id']}").json()
    (evaluation,) = detail["evaluations"]
    assert (evaluation["split"], evaluation["k"], evaluation["n_tasks"]) == ("test", 2, 16)
    assert evaluation["status"] == "done"
    assert f"{evaluation['mean_at_k']:.3f}" == printed.group(1)
    # its 95% interval over the 16 tasks, as stored with the evaluation
    assert (f"{evaluation['ci_low']:.3f}", f"{evaluation['ci_high']:.3f}") == printed.groups()[1:]
    assert evaluation["ci_low"] <= evaluation["mean_at_k"] <= evaluation["ci_high"]
    # what every call ran under is stored with the evaluation: the defaults of the embedded model
    assert evaluation["generation"] == {
        "backend": "local",
        "max_calls": 32,
        "max_tokens": 16384,
        "max_tokens_per_call": 1024,
        "infra_retries": 2,
    }

    rollouts = all_rollouts(client, run["id"])
    assert len(rollouts) == 32
    assert sum(detail["status_counts"].values()) == 32
    # mean@k is the mean of the stored rewards, and each status agrees with its reward
    rewards = [r["reward"] for r in rollouts]
    assert evaluation["mean_at_k"] == pytest.approx(sum(rewards) / len(rewards))
    assert all((r["status"] == "pass") == (r["reward"] == 1.0) for r in rollouts)
    # the seed harness answers with the model: every rollout ends as a pass or a fail
    broken = [(r["id"], r["reason"]) for r in rollouts if r["status"] not in ("pass", "fail")]
    assert not broken, [
        client.get(f"/api/rollouts/{i}").json()["rollout"]["error"] for i, _ in broken
    ]


def test_every_model_call_is_a_recorded_step(demo):
    _, client = demo
    (run,) = client.get("/api/runs").json()["runs"]
    tokens = 0
    for item in all_rollouts(client, run["id"]):
        trace = client.get(f"/api/rollouts/{item['id']}").json()
        steps = trace["steps"]
        assert len(steps) == trace["rollout"]["turns"] == 1  # the seed harness calls once
        (step,) = steps
        assert step["kind"] == "model"
        assert step["request"]["messages"][-1] == {"role": "user", "content": item["question"]}
        assert step["response"]["message"]["content"]
        assert step["completion_tokens"] == trace["rollout"]["completion_tokens"] > 0
        tokens += step["prompt_tokens"] + step["completion_tokens"]
        assert trace["rollout"]["gold"] == item["gold"]
    (evaluation,) = client.get(f"/api/runs/{run['id']}").json()["evaluations"]
    assert evaluation["total_tokens"] == tokens
