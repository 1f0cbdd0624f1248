"""Domains: where tasks, tools and verifiers come from.

A domain provides
- `name`
- `tasks(split)`: the tasks of a split ("train", "harness", "test"), deterministic;
  each `Task` has public fields (what the harness sees) and a hidden gold answer
- `tools`: name -> callable, run server-side through the gateway (empty for arith)
- `score(answer, task) -> float` in [0, 1]; a rollout passes when the score is > 0.5
- `seed_harness`: path of the starting harness file
- `forbidden_modules`: top-level modules a harness may not import (the sandbox is the security
  boundary; this keeps harnesses honest, e.g. no subprocess where the task is pure reasoning)
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol


@dataclass(frozen=True)
class Task:
    id: str
    public: dict[str, Any]  # given to the harness; never contains the answer
    gold: str


class Domain(Protocol):
    name: str
    tools: dict[str, Callable[..., Any]]
    seed_harness: Path
    forbidden_modules: frozenset[str]

    def tasks(self, split: str) -> list[Task]: ...

    def score(self, answer: str | None, task: Task) -> float: ...


SPLITS = ("train", "harness", "test")


def get_domain(name: str) -> Domain:
    from app.domains.arith import Arith

    domains = {"arith": Arith}
    if name not in domains:
        raise ValueError(f"unknown domain {name!r}; known: {', '.join(sorted(domains))}")
    return domains[name]()
