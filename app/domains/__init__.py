"""Domains: where tasks, tools and verifiers come from.

A domain is a class with
- `name`
- `tasks(split)`: the tasks of a split ("train", "harness", "test"), deterministic;
  each `Task` has public fields (what the harness sees) and a hidden gold answer
- `tools`: name -> callable, run server-side through the gateway (empty for arith)
- `score(answer, task) -> float` in [0, 1]; a rollout passes when the score is > 0.5
- `seed_harness`: path of the starting harness file
- `forbidden_modules`: top-level modules a harness may not import (the sandbox is the security
  boundary; this keeps harnesses honest, e.g. no subprocess where the task is pure reasoning)
- optionally `episode(task) -> Episode`: for a domain whose tools keep state per rollout (a
  chess board), the tools and the scorer of one rollout
- optionally `sandbox_tools`: name -> limits of tools that run inside the sandbox instead of
  through the gateway (math's `python`: {"timeout_s", "memory_mb"}; see sandbox/runner.py)
- optionally `skill`: the path of a markdown file for the proposers (the coding agent's
  SKILL.md and the LLM proposer's prompt): the domain's tasks, tools and scoring, what a good
  harness change looks like there and what is off limits. The built-in ones are in
  app/domains/skills/.
- optionally `scorings`: the names of its scoring modes, the default first; `score` and
  `episode` then take `scoring=` one of them. The paper's domains have `lenient` (the
  workbench's verifier) and `paper` (the release's rules, app/domains/paper_scoring.py). A
  domain without them has one mode, "default".

Domains are found through the Python entry point group `whale.domains` (name = "module:Class"),
so a package of the user's adds one by declaring it in its own pyproject.toml; the built-in
domains are declared the same way in this project's.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

ENTRY_POINTS = "whale.domains"
SPLITS = ("train", "harness", "test")


@dataclass(frozen=True)
class Task:
    id: str
    public: dict[str, Any]  # given to the harness; never contains the answer
    gold: str


class Episode(Protocol):
    """One rollout's environment: the tools its harness may call and how its answer scores."""

    tools: dict[str, Callable[..., Any]]

    def score(self, answer: str | None) -> float: ...


class Domain(Protocol):
    name: str
    tools: dict[str, Callable[..., Any]]
    seed_harness: Path
    forbidden_modules: frozenset[str]

    def tasks(self, split: str) -> list[Task]: ...

    def score(self, answer: str | None, task: Task) -> float: ...


DEFAULT_SCORING = "default"
SKILLS = Path(__file__).parent / "skills"


def skill_of(domain: Domain) -> str:
    """The domain's guide for proposers (its `skill` file), or "" when it has none."""
    path = getattr(domain, "skill", None)
    return Path(path).read_text().strip() if path else ""


def scorings(domain: Domain) -> tuple[str, ...]:
    """The domain's scoring modes, its default first."""
    return tuple(getattr(domain, "scorings", (DEFAULT_SCORING,)))


def scoring_of(domain: Domain, asked: str | None) -> str:
    """The mode to score by: the one asked (checked), else the domain's default."""
    modes = scorings(domain)
    if asked is None:
        return modes[0]
    if asked not in modes:
        raise ValueError(
            f"scoring {asked!r}: the {domain.name} domain scores by {', '.join(modes)}"
        )
    return asked


def _mode(domain: Domain, scoring: str | None) -> dict[str, str]:
    """The keyword a domain's score and episode take, for domains that have modes."""
    return {"scoring": scoring_of(domain, scoring)} if hasattr(domain, "scorings") else {}


@dataclass
class _Shared:
    """The episode of a domain without per-rollout state: its tools and its scorer."""

    domain: Domain
    task: Task
    scoring: str | None = None

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        return self.domain.tools

    def score(self, answer: str | None) -> float:
        return self.domain.score(answer, self.task, **_mode(self.domain, self.scoring))


def episode(domain: Domain, task: Task, scoring: str | None = None) -> Episode:
    make = getattr(domain, "episode", None)
    return make(task, **_mode(domain, scoring)) if make else _Shared(domain, task, scoring)


class UnknownDomain(ValueError):
    pass


def known_domains() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINTS))


@cache
def get_domain(name: str) -> Domain:
    """The domain registered under `name` (one instance per process: loading data is slow)."""
    found = [ep for ep in entry_points(group=ENTRY_POINTS) if ep.name == name]
    if not found:
        raise UnknownDomain(
            f"unknown domain {name!r}; known: {', '.join(known_domains()) or 'none'}"
            f" (domains register under the entry point group {ENTRY_POINTS!r})"
        )
    try:
        return found[0].load()()
    except Exception as exc:  # a broken plugin names itself, not a traceback from importlib
        raise UnknownDomain(
            f"domain {name!r} ({found[0].value}) failed to load: {type(exc).__name__}: {exc}"
        ) from exc
