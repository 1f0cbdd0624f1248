"""Broken and hostile harnesses, evaluated the way a user would (`whale eval --json`) while
`whale serve` runs over the same store: each ends as a failed rollout with its reason recorded,
the evaluation finishes, and the server keeps serving."""

import os
import sqlite3
import subprocess
import textwrap

import httpx
import pytest

from tests.conftest import AUTH, WHALE, whale_eval_json, whale_serve

# the module's tests share one `whale serve` for the module: under xdist they run on one worker
pytestmark = pytest.mark.xdist_group("bad-input")


@pytest.fixture(scope="module")
def store(tmp_path_factory, model_server, model_cache):
    home = tmp_path_factory.mktemp("bad-input") / "home"
    env = {
        **os.environ,
        "WHALE_HOME": str(home),
        "WHALE_MODEL_CACHE": str(model_cache),
        "WHALE_LLM_URL": model_server.base_url,
        "WHALE_LLM_MODEL": model_server.model,
        "WHALE_ROLLOUT_TIMEOUT": "3",
    }
    with whale_serve(env) as url:
        yield env, url, home


CASES = {
    "syntax_error": ("def run(task, llm, tools)\n    return 1\n", "line 1"),
    "exception": ("def run(task, llm, tools):\n    return int('seven')\n", "ValueError"),
    "timeout": ("def run(task, llm, tools):\n    while True:\n        pass\n", "3s"),
    "output_limit": (
        "import os\ndef run(task, llm, tools):\n    os.write(1, b'x' * 3_000_000)\n    return 1\n",
        "output limit",
    ),
    "unknown_tool": ("def run(task, llm, tools):\n    return tools.search('q')\n", "'search'"),
}


@pytest.mark.parametrize("reason", CASES)
def test_bad_harness_fails_with_its_reason(store, tmp_path, reason):
    env, url, home = store
    code, detail = CASES[reason]
    harness = tmp_path / f"{reason}.py"
    harness.write_text(code)
    out = whale_eval_json(harness, env, "--limit", "2", "-k", "1")
    assert out["n_rollouts"] == 2
    assert out["mean_at_k"] == 0.0
    assert out["reasons"] == {reason: 2}
    assert set(out["statuses"]) <= {"error", "timeout"}
    with sqlite3.connect(home / "whale.db") as db:
        rows = db.execute(
            "SELECT reason, error FROM rollout WHERE run_id = ?", (out["run_id"],)
        ).fetchall()
    assert len(rows) == 2
    assert all(r == reason and detail in e for r, e in rows), rows
    # the server saw the new run and is still up
    runs = httpx.get(f"{url}/api/runs", headers=AUTH, timeout=10).json()["runs"]
    assert out["run_id"] in {r["id"] for r in runs}


def test_a_harness_failing_on_some_tasks_still_scores_the_others(store, tmp_path):
    env, url, home = store
    harness = tmp_path / "flaky.py"
    harness.write_text(
        textwrap.dedent("""
        def run(task, llm, tools):
            a, op, b = task["question"].removeprefix("What is ").rstrip("?").split()
            if op == "-":
                raise RuntimeError("no subtraction today")
            a, b = int(a), int(b)
            return a + b if op == "+" else a * b
    """)
    )
    out = whale_eval_json(harness, env, "--limit", "12", "-k", "1")
    assert out["n_rollouts"] == 12
    n_errors = out["statuses"].get("error", 0)
    assert 0 < n_errors < 12
    assert out["statuses"]["pass"] == 12 - n_errors
    assert out["mean_at_k"] == pytest.approx((12 - n_errors) / 12)
    # its 95% interval over the 12 tasks: around the score, inside [0, 1]
    low, high = out["ci"]
    assert 0.0 <= low < out["mean_at_k"] < high <= 1.0


def test_bad_command_line_input_is_named(store, tmp_path):
    env = {**store[0], "COLUMNS": "300"}  # one line per message in the error box
    harness = tmp_path / "h.py"
    harness.write_text("def run(task, llm, tools):\n    return 1\n")
    for args, message in [
        (["--domain", "checkers"], "unknown domain 'checkers'"),
        (["--split", "dev"], "unknown split 'dev'"),
        (["--sandbox", "vm"], "sandbox 'vm'"),
    ]:
        proc = subprocess.run(
            [WHALE, "eval", str(harness), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2
        assert message in proc.stderr
    missing = subprocess.run(
        [WHALE, "eval", str(tmp_path / "nope.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
