"""math: competition-style problems answered in \\boxed{}, with a Python interpreter as the tool.

Data: the train file(s) give the `train` and `harness` splits, the test file(s) the `test` split.
By default these are the generated samples shipped in data/math/; WHALE_MATH_TRAIN and
WHALE_MATH_TEST name other files (several joined with the path separator ":"), e.g.
DAPO-Math-17K for train and AIME 2024 + 2025 for test (formats: app/domains/math_data.py).

Splits are deterministic and disjoint: a train-file problem whose question also appears in the
test files is dropped, duplicates are kept once, and the harness split is the first
WHALE_MATH_HARNESS_SIZE (default 256, at most a quarter of the pool) train-file problems in the
order of a hash of their question, so it does not depend on the order of the files.

The `python` tool runs inside the sandbox, in a child process of its own, limited to
WHALE_MATH_PYTHON_TIMEOUT_S seconds (default 10; the paper: 30) and WHALE_MATH_PYTHON_MEMORY_MB
of address space (default 512; the paper: 1024). The verifier is app/domains/math_answers.py
(`lenient`, the default) or the release's strict box check (`paper`, app/domains/paper_scoring.py).
"""

import hashlib
import os
import re

from app import ROOT
from app.domains import SKILLS, SPLITS, Task
from app.domains.math_answers import score as score_reply
from app.domains.math_data import Problem, load_problems
from app.domains.paper_scoring import math_score

DATA = ROOT / "data" / "math"
DEFAULT_HARNESS_SIZE = 256


def _sources(variable: str, default: str) -> list[str]:
    value = os.environ.get(variable, "").strip()
    return [p for p in value.split(os.pathsep) if p] if value else [str(DATA / default)]


def _key(question: str) -> str:
    return re.sub(r"\s+", " ", question).strip().lower()


def _load(sources: list[str]) -> list[Problem]:
    problems, seen = [], set()
    for source in sources:
        for problem in load_problems(source):
            if _key(problem.question) not in seen:
                seen.add(_key(problem.question))
                problems.append(problem)
    return problems


def make_splits(
    train: list[Problem], test: list[Problem], harness_size: int
) -> dict[str, list[Problem]]:
    held_out = {_key(p.question) for p in test}
    pool = [p for p in train if _key(p.question) not in held_out]
    pool.sort(key=lambda p: hashlib.sha256(_key(p.question).encode()).hexdigest())
    n = min(harness_size, len(pool) // 4)
    return {"train": pool[n:], "harness": pool[:n], "test": test}


class MathProblems:
    name = "math"
    tools: dict = {}  # the one tool, python, runs inside the sandbox (sandbox_tools)
    # Code runs through tools.python, in its own limited process: not in the harness process.
    forbidden_modules = frozenset({"subprocess", "multiprocessing", "ctypes"})
    seed_harness = ROOT / "harness_archive" / "seeds" / "math" / "seed.py"
    skill = SKILLS / "math.md"
    # lenient: app/domains/math_answers.py; paper: the release's strict box (paper_scoring.py)
    scorings = ("lenient", "paper")

    def __init__(self):
        self.sandbox_tools = {
            "python": {
                "timeout_s": float(os.environ.get("WHALE_MATH_PYTHON_TIMEOUT_S", 10)),
                "memory_mb": int(os.environ.get("WHALE_MATH_PYTHON_MEMORY_MB", 512)),
            }
        }
        harness_size = int(os.environ.get("WHALE_MATH_HARNESS_SIZE", DEFAULT_HARNESS_SIZE))
        splits = make_splits(
            _load(_sources("WHALE_MATH_TRAIN", "train.jsonl")),
            _load(_sources("WHALE_MATH_TEST", "test.jsonl")),
            harness_size,
        )
        self._splits = {
            split: [
                Task(f"{split}-{i}", {"question": p.question}, p.answer)
                for i, p in enumerate(problems)
            ]
            for split, problems in splits.items()
        }

    def tasks(self, split: str) -> list[Task]:
        if split not in self._splits:
            raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
        return self._splits[split]

    def score(self, answer: str | None, task: Task, scoring: str = "lenient") -> float:
        """1.0 when the last \\boxed{} of the answer is equivalent to the gold answer (lenient)
        or holds exactly it, within the reply's last 100 characters (paper)."""
        if scoring == "paper":
            return math_score(answer, task.gold)
        return score_reply(answer, task.gold)
