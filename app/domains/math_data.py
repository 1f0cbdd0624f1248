"""Math problems from files: JSONL or parquet rows in the layouts of the public data sets.

Row layouts, told apart by their fields:
- DAPO-Math-17K: `prompt` (a chat list; its user message holds the problem, wrapped in DAPO's
  "Answer:" instructions, which are removed) and `reward_model.ground_truth`
- AIME 2024 / 2025: `problem` and `answer` (or `Problem` and `Answer`)
- GSM8K: `question` and `answer` ending in "#### 42"
- MATH / MATH-500: `problem` and `solution` whose last `\\boxed{}` is the answer (an `answer`
  field, where present, wins: that is the AIME layout)

A row that fits none of them, or lacks a value, stops the load with an error naming the file and
its row number (1-based, as an editor shows it). `hf:owner/name[:split]` reads a Hugging Face
data set instead, when the `datasets` package is installed and the hub reachable.
"""

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.domains.math_answers import extract_boxed


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: str


class MalformedRow(ValueError):
    pass


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise MalformedRow(f"{path} row {number}: not valid JSON ({exc.msg})") from None


def read_parquet(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MalformedRow(
            f"{path}: reading parquet needs pyarrow "
            "(pip install 'whale-workbench[parquet]'), or convert it to JSONL"
        ) from None
    yield from enumerate(pq.read_table(path).to_pylist(), 1)


def read_hub(spec: str) -> Iterator[tuple[int, Any]]:
    """`hf:owner/name[:split]` through the `datasets` package (online only)."""
    name, _, split = spec.removeprefix("hf:").partition(":")
    try:
        import datasets
    except ImportError:
        raise MalformedRow(
            f"{spec}: loading from the Hugging Face hub needs the `datasets` "
            "package; or download the data set and give its file path"
        ) from None
    yield from enumerate(datasets.load_dataset(name, split=split or "train"), 1)


READERS = {".jsonl": read_jsonl, ".parquet": read_parquet}

# DAPO-Math-17K asks for "Answer: ..." on the last line; this domain asks for \boxed{} instead.
_DAPO_HEAD = re.compile(r"^Solve the following math problem step by step\..*?\n\n", re.S)
_DAPO_TAIL = re.compile(r"\n\nRemember to put your answer on its own line after \"Answer:\"\.?\s*$")


def dapo_problem(row: dict) -> tuple[str, str]:
    prompt, reward = row.get("prompt"), row.get("reward_model")
    if not isinstance(prompt, list) or not all(isinstance(m, dict) for m in prompt):
        raise ValueError("`prompt` must be a list of chat messages")
    users = [m.get("content") for m in prompt if m.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        raise ValueError("`prompt` has no user message with text")
    if not isinstance(reward, dict):
        raise ValueError("`reward_model` must be an object with `ground_truth`")
    question = _DAPO_TAIL.sub("", _DAPO_HEAD.sub("", users[-1].strip()))
    return question, _field(reward, "ground_truth")


def aime_problem(row: dict) -> tuple[str, str]:
    return _field(row, "problem", "Problem"), _field(row, "answer", "Answer")


def gsm8k_problem(row: dict) -> tuple[str, str]:
    answer = _field(row, "answer")
    if "####" not in answer:
        raise ValueError("a GSM8K `answer` must end in '#### <number>'")
    return _field(row, "question"), answer.rsplit("####", 1)[1].strip().replace(",", "")


def math_problem(row: dict) -> tuple[str, str]:
    answer = extract_boxed(_field(row, "solution"))
    if answer is None:
        raise ValueError("the `solution` has no \\boxed{} answer")
    return _field(row, "problem"), answer


def _field(row: dict, *names: str) -> str:
    for name in names:
        if name in row:
            value = row[name]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)  # AIME answers are often stored as integers
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"`{name}` must be non-empty text")
            return value.strip()
    raise ValueError(f"missing field `{names[0]}`")


def layout_of(row: dict) -> Any:
    """The converter for a row, chosen by its fields."""
    keys = set(row)
    if "prompt" in keys and "reward_model" in keys:
        return dapo_problem
    if "question" in keys:
        return gsm8k_problem
    if keys & {"answer", "Answer"}:
        return aime_problem
    if "solution" in keys:
        return math_problem
    raise ValueError(
        "fits no known layout (DAPO: prompt + reward_model; AIME: problem + answer; "
        f"GSM8K: question + answer; MATH: problem + solution); fields: {sorted(keys)}"
    )


def _row_id(row: dict, source: str, number: int) -> str:
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    for value in (row.get("id"), row.get("ID"), row.get("unique_id"), extra.get("index")):
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return f"{source}-{number}"


def load_problems(source: str | Path) -> list[Problem]:
    """Every problem of one file (`.jsonl`, `.parquet`) or hub data set (`hf:...`)."""
    spec = str(source)
    if spec.startswith("hf:"):
        rows, where, stem = read_hub(spec), spec, spec.removeprefix("hf:").replace("/", "-")
    else:
        path = Path(spec)
        reader = READERS.get(path.suffix)
        if reader is None:
            raise MalformedRow(
                f"{path}: unknown file type {path.suffix!r}; use {' or '.join(READERS)}"
            )
        if not path.is_file():
            raise FileNotFoundError(f"math data file not found: {path}")
        rows, where, stem = reader(path), str(path), path.stem
    problems = []
    for number, row in rows:
        try:
            if not isinstance(row, dict):
                raise ValueError(f"a row must be a JSON object, not {type(row).__name__}")
            question, answer = layout_of(row)(row)
        except ValueError as exc:
            raise MalformedRow(f"{where} row {number}: {exc}") from None
        problems.append(Problem(_row_id(row, stem, number), question, answer.strip()))
    return problems
