"""The math domain: loaders for each data layout, the \\boxed{} verifier, the sandboxed python
tool, and a real evaluation of the seed harness with the demo model."""

import json
import sqlite3
import subprocess
import sys
import zlib

import pytest

from app.domains import SPLITS, get_domain
from app.domains.math_answers import extract_boxed, score, to_expression
from app.domains.math_data import MalformedRow, load_problems
from app.domains.math_problems import DATA, MathProblems
from tests.conftest import MISSING, REPO, whale_eval_json

DAPO_WRAPPED = (
    "Solve the following math problem step by step. The last line of your response "
    "should be of the form Answer: $Answer (without quotes) where $Answer is the "
    "answer to the problem.\n\nWhat is $6 \\times 7$?\n\nRemember to put your answer "
    'on its own line after "Answer:".'
)
ROWS = {
    "dapo": [
        {
            "data_source": "x",
            "prompt": [{"role": "user", "content": DAPO_WRAPPED}],
            "reward_model": {"ground_truth": "42", "style": "rule-lm"},
            "extra_info": {"index": "a1b2"},
        }
    ],
    "aime": [
        {"id": 60, "problem": "Find $n$.", "answer": "204"},
        {"ID": "2024-I-2", "Problem": "Find $m$.", "Solution": "...", "Answer": 25},
    ],
    "gsm8k": [
        {
            "question": "Tom has 3 bags of 1,000 beans. How many beans?",
            "answer": "3 * 1000 = 3000\n#### 3,000",
        }
    ],
    "math": [
        {
            "problem": "Simplify $\\frac{2}{4}$.",
            "solution": "Halve: $\\boxed{\\frac{1}{2}}$.",
            "level": "Level 1",
            "type": "Algebra",
        }
    ],
}
EXPECTED = {
    "dapo": [("a1b2", "What is $6 \\times 7$?", "42")],
    "aime": [("60", "Find $n$.", "204"), ("2024-I-2", "Find $m$.", "25")],
    "gsm8k": [("gsm8k-1", "Tom has 3 bags of 1,000 beans. How many beans?", "3000")],
    "math": [("math-1", "Simplify $\\frac{2}{4}$.", "\\frac{1}{2}")],
}


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# Loaders ----------------------------------------------------------------------------------------


def test_shipped_samples_give_disjoint_fixed_splits_that_hide_the_answer():
    a, b = MathProblems(), MathProblems()
    sizes = {split: len(a.tasks(split)) for split in SPLITS}
    assert sizes == {"train": 240, "harness": 80, "test": 64}
    questions = {}
    for split in SPLITS:
        assert a.tasks(split) == b.tasks(split)
        questions[split] = {t.public["question"] for t in a.tasks(split)}
        assert len(questions[split]) == sizes[split]
        for task in a.tasks(split):
            assert set(task.public) == {"question"}
            assert "Answer:" not in task.public["question"]  # DAPO's wrapper is removed
            # every shipped answer is one the verifier can read, and matches itself boxed
            assert to_expression(task.gold) is not None
            assert a.score(f"so \\boxed{{{task.gold}}}", task) == 1.0
    assert not questions["train"] & questions["harness"]
    assert not (questions["train"] | questions["harness"]) & questions["test"]
    assert get_domain("math").tasks("test")[0].gold == a.tasks("test")[0].gold


def test_the_generator_reproduces_the_shipped_samples(tmp_path):
    subprocess.run(
        [sys.executable, str(REPO / "scripts/make_math_problems.py"), str(tmp_path)], check=True
    )
    for name in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes()


@pytest.mark.parametrize("layout", sorted(ROWS))
def test_each_jsonl_layout_loads(tmp_path, layout):
    problems = load_problems(write_jsonl(tmp_path / f"{layout}.jsonl", ROWS[layout]))
    assert [(p.id, p.question, p.answer) for p in problems] == EXPECTED[layout]


@pytest.mark.parametrize("layout", sorted(ROWS))
def test_each_layout_loads_from_parquet(tmp_path, layout):
    pq = pytest.importorskip("pyarrow.parquet", reason=f"{MISSING}pyarrow")
    import pyarrow

    path = tmp_path / f"{layout}.parquet"
    rows = ROWS[layout][:1]  # one row: parquet columns have one type each
    pq.write_table(pyarrow.Table.from_pylist(rows), path)
    assert [(p.id, p.question, p.answer) for p in load_problems(path)] == EXPECTED[layout][:1]


@pytest.mark.parametrize(
    "rows, says",
    [
        (
            ['{"problem": "a", "answer": "1"}', "", '{"problem": "b", "answer": '],
            "row 3: not valid JSON",
        ),
        ([{"problem": "a", "answer": "1"}, {"problem": "b"}], "row 2: fits no known layout"),
        ([{"problem": "a", "answer": ""}], "row 1: `answer` must be non-empty text"),
        ([{"Problem": "a", "answer": "1"}, {"Answer": "2"}], "row 2: missing field `problem`"),
        (
            [{"question": "q", "answer": "just 12"}],
            "row 1: a GSM8K `answer` must end in '#### <number>'",
        ),
        (
            [{"problem": "p", "solution": "it is 4"}],
            "row 1: the `solution` has no \\boxed{} answer",
        ),
        (
            [{"problem": "p", "solution": "\\boxed{4"}],
            "row 1: the `solution` has no \\boxed{} answer",
        ),
        (
            [{"prompt": "text, not chat", "reward_model": {"ground_truth": "1"}}],
            "row 1: `prompt` must be a list of chat messages",
        ),
        (
            [{"prompt": [{"role": "user", "content": "q"}], "reward_model": {}}],
            "row 1: missing field `ground_truth`",
        ),
        (["[1, 2]"], "row 1: a row must be a JSON object, not list"),
    ],
)
def test_a_malformed_row_is_named_with_its_file_and_number(tmp_path, rows, says):
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(MalformedRow) as err:
        load_problems(path)
    assert str(err.value).startswith(f"{path} {says}")


def test_a_malformed_parquet_row_is_named(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason=f"{MISSING}pyarrow")
    import pyarrow

    path = tmp_path / "aime.parquet"
    pq.write_table(
        pyarrow.Table.from_pylist(
            [{"problem": "a", "answer": "1"}, {"problem": "b", "answer": None}]
        ),
        path,
    )
    with pytest.raises(MalformedRow, match=r"aime.parquet row 2: `answer` must be non-empty text"):
        load_problems(path)


def test_unknown_file_types_and_missing_files_are_refused(tmp_path):
    with pytest.raises(MalformedRow, match=r"unknown file type '.csv'; use .jsonl or .parquet"):
        load_problems(tmp_path / "x.csv")
    with pytest.raises(FileNotFoundError, match="math data file not found"):
        load_problems(tmp_path / "missing.jsonl")


def test_files_from_the_environment_make_disjoint_splits_independent_of_order(
    tmp_path, monkeypatch
):
    train = [{"problem": f"Problem {i}?", "answer": str(i)} for i in range(40)]
    write_jsonl(tmp_path / "a.jsonl", train[:25])
    write_jsonl(tmp_path / "b.jsonl", train[20:])  # 5 duplicates across the two files
    write_jsonl(tmp_path / "aime24.jsonl", [{"problem": "Problem 3?", "answer": "3"}])
    write_jsonl(tmp_path / "aime25.jsonl", [{"problem": "Problem 7?", "answer": "7"}])
    monkeypatch.setenv(
        "WHALE_MATH_TEST", f"{tmp_path / 'aime24.jsonl'}:{tmp_path / 'aime25.jsonl'}"
    )
    monkeypatch.setenv("WHALE_MATH_HARNESS_SIZE", "5")
    splits = []
    for order in ("a.jsonl:b.jsonl", "b.jsonl:a.jsonl"):
        monkeypatch.setenv(
            "WHALE_MATH_TRAIN", ":".join(str(tmp_path / f) for f in order.split(":"))
        )
        domain = MathProblems()
        splits.append(
            {s: [(t.public["question"], t.gold) for t in domain.tasks(s)] for s in SPLITS}
        )
    by_a, by_b = splits
    assert [q for q, _ in by_a["test"]] == ["Problem 3?", "Problem 7?"]
    assert len(by_a["harness"]) == 5 and len(by_a["train"]) == 40 - 2 - 5
    assert by_a["harness"] == by_b["harness"]  # the harness split does not depend on file order
    assert sorted(by_a["train"]) == sorted(by_b["train"])
    pool = {q for q, _ in by_a["train"] + by_a["harness"]}
    assert len(pool) == 38 and not pool & {"Problem 3?", "Problem 7?"}


# Verifier ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, gold, expected",
    [
        ("so it is \\boxed{\\frac{1}{2}}", "0.5", 1),
        ("\\boxed{1/2}", "\\frac{1}{2}", 1),
        ("\\boxed{ 42 }", "42", 1),
        ("\\boxed{42.0}", "42", 1),
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\sqrt{2}/2", 1),
        ("\\boxed{\\dfrac{3}{4}}", "\\frac34", 1),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1),
        ("\\boxed{-\\frac{3}{11}}", "-3/11", 1),
        ("\\fbox{7}", "7", 1),
        ("\\boxed{90^\\circ}", "90", 1),
        ("\\boxed{5\\text{ cm}}", "5", 1),
        ("\\boxed{1,000}", "1000", 1),
        ("\\boxed{3, -2}", "-2, 3", 1),  # a list of roots matches in any order
        ("\\boxed{x^2+2x+1}", "(x+1)^2", 1),
        ("\\boxed{\\pi/2}", "\\frac{\\pi}{2}", 1),
        ("\\boxed{x=3}", "3", 1),  # "x = 3" answers "what is x": its right-hand side counts
        ("the answer is 42", "42", 0),  # no \boxed{}: nothing to grade
        ("first \\boxed{42}, no wait: \\boxed{41}", "42", 0),  # the last \boxed{} counts
        ("first \\boxed{41}, no wait: \\boxed{42}", "42", 1),
        ("\\boxed{\\frac{1}{2}", "0.5", 0),  # braces never close
        ("\\boxed{43}", "42", 0),
        ("\\boxed{0.333}", "\\frac{1}{3}", 0),  # close is not equal
        ("\\boxed{}", "0", 0),
        ("\\boxed{x=3}", "x=4", 0),
        ("\\boxed{__import__('os').system('true')}", "0", 0),  # never evaluated
        ("\\boxed{9^{9^{9^{9999}}}}", "1", 0),  # refused, not computed
    ],
)
def test_verifier(reply, gold, expected):
    assert score(reply, gold) == expected


def test_extraction_keeps_nested_braces():
    assert extract_boxed("a \\boxed{1} b \\boxed{\\frac{\\sqrt{2}}{2}} c") == "\\frac{\\sqrt{2}}{2}"
    assert extract_boxed(None) is None


# The python tool, through a real sandbox --------------------------------------------------------

TOOL_HARNESS = """
import json

def run(task, llm, tools):
    results = {
        "print": tools.python("print(sum(range(101)))"),
        "error": tools.python("1/0"),
        "timeout": tools.python("import time\\nprint('started', flush=True)\\ntime.sleep(60)"),
        "memory": tools.python("x = bytearray(2 * 1024**3)\\nprint('allocated')"),
        # the harness may not import subprocess; the code it runs through the tool may
        "child": tools.python("import subprocess, sys\\n"
                              "print(subprocess.run([sys.executable, '-c', 'print(5)'],"
                              " capture_output=True, text=True).stdout.strip())"),
    }
    return json.dumps(results)
"""


@pytest.fixture(params=["process", "docker"])
def tool_backend(request):
    if request.param == "docker":
        from sandbox import docker as docker_backend
        from sandbox import image

        why = docker_backend.engine_available()
        if why is not None:
            pytest.skip(f"{MISSING}the Docker engine ({why})")
        image.build(say=lambda m: None)
    return request.param


def unpack(blob: bytes):
    """A step's request or response as stored: zlib-compressed JSON."""
    return json.loads(zlib.decompress(blob))


def rows_of(home, run_id: int, table: str) -> list[dict]:
    with sqlite3.connect(home / "whale.db") as db:
        db.row_factory = sqlite3.Row
        if table == "rollout":
            query = "SELECT * FROM rollout WHERE run_id = ? ORDER BY id"
        else:
            query = (
                "SELECT step.* FROM step JOIN rollout ON rollout.id = step.rollout_id "
                "WHERE rollout.run_id = ? ORDER BY step.rollout_id, step.idx"
            )
        return [dict(r) for r in db.execute(query, (run_id,))]


def test_python_tool_runs_in_the_sandbox_under_limits_and_is_traced(
    tmp_path, whale_env, tool_backend
):
    harness = tmp_path / "tool_harness.py"
    harness.write_text(TOOL_HARNESS)
    env = {**whale_env, "WHALE_MATH_PYTHON_TIMEOUT_S": "2", "WHALE_MATH_PYTHON_MEMORY_MB": "256"}
    out = whale_eval_json(
        harness, env, "--domain", "math", "--sandbox", tool_backend, "--limit", "1", "-k", "1"
    )
    home = tmp_path / "home"
    (rollout,) = rows_of(home, out["run_id"], "rollout")
    assert rollout["reason"] is None, rollout["error"]
    results = json.loads(rollout["answer"])
    assert results["print"] == {
        "stdout": "5050\n",
        "stderr": "",
        "exit_code": 0,
        "timed_out": False,
    }
    assert results["error"]["exit_code"] == 1 and "ZeroDivisionError" in results["error"]["stderr"]
    timeout = results["timeout"]
    assert timeout["timed_out"] and timeout["stdout"] == "started\n"
    assert "timed out after 2s" in timeout["stderr"]
    assert results["memory"]["exit_code"] == 1 and "MemoryError" in results["memory"]["stderr"]
    assert results["child"]["stdout"] == "5\n"
    steps = rows_of(home, out["run_id"], "step")
    assert [(s["kind"], s["tool"]) for s in steps] == [("tool", "python")] * 5
    first = steps[0]
    assert unpack(first["request"]) == {"args": ["print(sum(range(101)))"], "kwargs": {}}
    assert unpack(first["response"])["result"]["stdout"] == "5050\n"
    assert 2000 <= steps[2]["latency_ms"] < 30000  # it took its 2 s (and not its whole 60)


def test_the_harness_itself_may_not_import_subprocess(tmp_path, whale_env):
    harness = tmp_path / "sneaky.py"
    harness.write_text("import subprocess\ndef run(task, llm, tools):\n    return 1\n")
    out = whale_eval_json(harness, whale_env, "--domain", "math", "--limit", "1", "-k", "1")
    assert out["reasons"] == {"forbidden_import": 1}


# A real evaluation ------------------------------------------------------------------------------


def test_seed_harness_real_evaluation(tmp_path, whale_env):
    # The seed as shipped, with its MAX_TOKENS knob lowered: the demo model on a shared CPU takes
    # minutes for 512 tokens, and what is tested here is the path, not the model's accuracy.
    seed = (REPO / "harness_archive/seeds/math/seed.py").read_text()
    assert "\nMAX_TOKENS = 512\n" in seed
    harness = tmp_path / "seed.py"
    harness.write_text(seed.replace("\nMAX_TOKENS = 512\n", "\nMAX_TOKENS = 64\n"))
    out = whale_eval_json(harness, whale_env, "--domain", "math", "--limit", "2", "-k", "1")
    assert out["n_rollouts"] == 2 and 0.0 <= out["mean_at_k"] <= 1.0
    rollouts = rows_of(tmp_path / "home", out["run_id"], "rollout")
    assert all(r["status"] in ("pass", "fail") for r in rollouts), [r["error"] for r in rollouts]
    steps = rows_of(tmp_path / "home", out["run_id"], "step")
    assert {s["kind"] for s in steps} <= {"model", "tool"} and steps[0]["kind"] == "model"
    # at most two model turns, and a second turn only after a python call
    for r in rollouts:
        kinds = [s["kind"] for s in steps if s["rollout_id"] == r["id"]]
        assert kinds in (["model"], ["model", "tool", "model"]), kinds
