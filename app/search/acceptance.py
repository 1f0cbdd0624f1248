"""When a harness phase commits a candidate over the incumbent (`[search] acceptance`;
docs/statistics.md, "The commit gate").

A harness phase compares hundreds of candidates with one incumbent on a small split: taking any
candidate whose score went up commits noise. Each rule here sees the per-task mean rewards of the
incumbent and of a candidate, on the same tasks with the same sample indices, and decides:
- `greedy` (the paper's): commit when the candidate's mean is higher;
- `paired`: commit when a one-sided sign-flip permutation test of the per-task differences
  rejects "not better" at `false_commit`, on every task of the split;
- `sequential`: the tasks in a seeded order, a betting e-process over the differences (a
  mixture over fixed bets, anytime-valid by Ville's inequality): commit as soon as the wealth
  reaches 1 / false_commit; give up as soon as it can no longer get there even if every task
  left were a win. The candidate's evaluation stops there, so hopeless and clearly better
  candidates cost fewer rollouts than a fixed-size test.
"""

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from app.stats import sign_flip

RULES = ("greedy", "paired", "sequential")
BETS = (0.05, 0.1, 0.2, 0.3, 0.5)  # the fractions of wealth bet per task, mixed equally


@dataclass(frozen=True)
class Decision:
    commit: bool
    rule: str
    statistic: float  # greedy: mean difference; paired: p-value; sequential: wealth
    n_tasks: int  # tasks the decision used (sequential: where it stopped)
    why: str  # "better", "not better", "evidence", "too little evidence", "hopeless"

    def record(self) -> dict:
        return asdict(self)


def greedy(incumbent: dict[str, float], candidate: dict[str, float]) -> Decision:
    shared = sorted(incumbent.keys() & candidate.keys())
    difference = sum(candidate[t] - incumbent[t] for t in shared) / max(len(shared), 1)
    better = difference > 0
    return Decision(better, "greedy", difference, len(shared), "better" if better else "not better")


def paired_gate(
    incumbent: dict[str, float], candidate: dict[str, float], level: float, seed: int = 0
) -> Decision:
    result = sign_flip(incumbent, candidate, seed=seed, alternative="greater")
    if result is None:
        return Decision(False, "paired", 1.0, 0, "too little evidence")
    n_tasks, difference, p_value = result
    commit = p_value <= level and difference > 0
    why = "evidence" if commit else "too little evidence"
    return Decision(commit, "paired", p_value, n_tasks, why)


def sequential(differences: Sequence[float], total: int, level: float) -> Decision | None:
    """The decision on the differences seen so far (candidate minus incumbent, in the test's
    task order) out of `total` tasks; None while neither commit nor give-up is reached and
    tasks remain."""
    target = 1 / level
    logs = [0.0] * len(BETS)
    wealth = 1.0
    for t, d in enumerate(differences, 1):
        logs = [w + math.log1p(bet * d) for w, bet in zip(logs, BETS)]
        wealth = sum(math.exp(w) for w in logs) / len(BETS)
        if wealth >= target:
            return Decision(True, "sequential", wealth, t, "evidence")
        left = total - t
        reachable = sum(math.exp(w + left * math.log1p(b)) for w, b in zip(logs, BETS)) / len(BETS)
        if reachable < target:
            return Decision(False, "sequential", wealth, t, "hopeless")
    if len(differences) >= total:
        return Decision(False, "sequential", wealth, total, "too little evidence")
    return None


def decide(
    rule: str,
    incumbent: dict[str, float],
    candidate: dict[str, float],
    level: float,
    order: Sequence[str] = (),
    seed: int = 0,
) -> Decision:
    """The rule's decision once the candidate's evaluation is over (for `sequential`, over the
    tasks of `order` it reached)."""
    if rule == "greedy":
        return greedy(incumbent, candidate)
    if rule == "paired":
        return paired_gate(incumbent, candidate, level, seed)
    found = sequential_on(incumbent, candidate, order, level)
    seen = sum(t in candidate and t in incumbent for t in order)
    return found or Decision(False, "sequential", 1.0, seen, "too little evidence")


def sequential_on(
    incumbent: dict[str, float], candidate: dict[str, float], order: Sequence[str], level: float
) -> Decision | None:
    """`sequential` on the tasks of `order` both have scored, in that order (None: go on)."""
    seen = [t for t in order if t in candidate and t in incumbent]
    return sequential([candidate[t] - incumbent[t] for t in seen], len(order), level)
