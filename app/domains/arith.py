"""arith: small arithmetic word-free problems with exact integer answers.

Generated from a fixed seed, so every machine sees the same train/harness/test splits.
"""

import random
import re

from app import ROOT
from app.domains import SKILLS, SPLITS, Task

SPLIT_SIZES = {"train": 512, "harness": 64, "test": 64}
_SEED = 20260


def _problem(rng: random.Random) -> tuple[str, int]:
    kind = rng.choice(["add", "add", "sub", "mul"])
    if kind == "add":
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f"{a} + {b}", a + b
    if kind == "sub":
        a, b = sorted((rng.randint(10, 99), rng.randint(10, 99)), reverse=True)
        return f"{a} - {b}", a - b
    a, b = rng.randint(2, 9), rng.randint(2, 12)
    return f"{a} * {b}", a * b


def _generate(operators: dict[str, str] | None = None) -> dict[str, list[Task]]:
    """The three splits; `operators` rewrites each operator of the questions (never the gold)."""
    rng = random.Random(_SEED)
    seen: set[str] = set()
    splits: dict[str, list[Task]] = {s: [] for s in SPLITS}
    for split in SPLITS:  # splits are disjoint: an expression appears in one split only
        while len(splits[split]) < SPLIT_SIZES[split]:
            expr, value = _problem(rng)
            if expr in seen:
                continue
            seen.add(expr)
            i = len(splits[split])
            for op, glyph in (operators or {}).items():
                expr = expr.replace(f" {op} ", f" {glyph} ")
            question = f"What is {expr}?"
            splits[split].append(Task(f"{split}-{i}", {"question": question}, str(value)))
    return splits


_NUMBER = re.compile(r"-?\d+")


class Arith:
    name = "arith"
    tools: dict = {}
    # Pure arithmetic: no child processes or native code.
    forbidden_modules = frozenset({"subprocess", "multiprocessing", "ctypes"})
    seed_harness = ROOT / "harness_archive" / "seeds" / "arith" / "seed.py"
    skill = SKILLS / "arith.md"

    def __init__(self):
        self._splits = _generate()

    def tasks(self, split: str) -> list[Task]:
        if split not in self._splits:
            raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
        return self._splits[split]

    def score(self, answer: str | None, task: Task) -> float:
        """1.0 when the last integer in the answer equals the gold value."""
        if answer is None:
            return 0.0
        numbers = _NUMBER.findall(answer.replace(",", ""))
        return float(bool(numbers) and numbers[-1] == task.gold)


# arith-glyphs: the same problems with the operators written as glyphs the model has no reason
# to read as arithmetic. Nothing the harness is told (question, skill) says which glyph is which
# operation: only the gold answers carry it, so a model can learn it from rewards (RFT) while
# no prompt or decoding knob can state it. The weights should matter here (docs/benchmarks.md).
GLYPHS = {"+": "#", "-": "@", "*": "&"}


class ArithGlyphs(Arith):
    name = "arith-glyphs"
    skill = SKILLS / "arith-glyphs.md"

    def __init__(self):
        self._splits = _generate(GLYPHS)
