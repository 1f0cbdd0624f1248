"""The commit gate's rules on simulated harness phases: false commits and rollouts spent.

    .venv/bin/python -m benchmarks.commit_gate [--repeats 2000] [--tasks 64] [--level 0.05]

Each repetition draws an incumbent harness (per-task pass probabilities spread from almost never
to almost always, Beta(0.5, 0.5)) and five candidates scored on the same tasks, one rollout per
task as in the paper: one truly better (+0.15 pass probability on every task), two equal, two
worse (-0.10). Each rule (app/search/acceptance.py) decides on each candidate; the table reports
how often it commits an equal candidate (per equal candidate: what `false_commit` bounds, a
candidate no better than the incumbent; an equal one is the hardest case), the same for a worse
one, how often it commits the better one, and the rollouts each candidate cost.
"""

import argparse
import random

from app.search.acceptance import RULES, decide

SHIFTS = (0.15, 0.0, 0.0, -0.10, -0.10)  # the candidates' change in pass probability


def simulate(
    repeats: int, n_tasks: int, level: float, seed: int = 0, shifts: tuple = SHIFTS
) -> dict[str, dict]:
    """Per rule: equal_commits and worse_commits (the share of equal, and of worse, candidates
    committed: false commits, each per candidate of its kind), power (the share of better ones
    committed), rollouts (mean per candidate); a share of no candidates is None. `shifts`: the
    candidates of each phase (the default: one better, two equal, two worse)."""
    rng = random.Random(seed)
    kinds = ("better", "equal", "worse")
    counts = {r: {"rollouts": 0, **{f"{k}_commits": 0 for k in kinds}} for r in RULES}
    tasks = [f"t{i}" for i in range(n_tasks)]
    for rep in range(repeats):
        difficulty = [rng.betavariate(0.5, 0.5) for _ in tasks]
        incumbent = {t: float(rng.random() < p) for t, p in zip(tasks, difficulty)}
        order = rng.sample(tasks, n_tasks)
        for c, shift in enumerate(shifts):
            candidate = {
                t: float(rng.random() < min(1.0, max(0.0, p + shift)))
                for t, p in zip(tasks, difficulty)
            }
            for rule in RULES:
                decision = decide(rule, incumbent, candidate, level, order, seed=rep * 10 + c)
                tally = counts[rule]
                tally["rollouts"] += decision.n_tasks
                tally[f"{kind_of(shift)}_commits"] += decision.commit
    candidates = {k: repeats * sum(kind_of(s) == k for s in shifts) for k in kinds}

    def share(t: dict, kind: str) -> float | None:
        return t[f"{kind}_commits"] / candidates[kind] if candidates[kind] else None

    return {
        rule: {
            "equal_commits": share(t, "equal"),
            "worse_commits": share(t, "worse"),
            "power": share(t, "better"),
            "rollouts": t["rollouts"] / (repeats * len(shifts)),
            "candidates": candidates,
        }
        for rule, t in counts.items()
    }


def kind_of(shift: float) -> str:
    return "better" if shift > 0 else "equal" if shift == 0 else "worse"


def main() -> None:
    from benchmarks.common import parse, report, table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--level", type=float, default=0.05)
    args = parse(parser)
    results = simulate(args.repeats, args.tasks, args.level)
    body = table(
        [
            "rule",
            "false commits per equal candidate",
            "false commits per worse candidate",
            "better one committed",
            "rollouts per candidate",
        ],
        [
            [
                rule,
                f"{r['equal_commits']:.3f}",
                f"{r['worse_commits']:.3f}",
                f"{r['power']:.3f}",
                f"{r['rollouts']:.1f}",
            ]
            for rule, r in results.items()
        ],
    )
    for rule, r in results.items():
        print(rule, r, flush=True)
    report(
        f"Commit gate: {args.repeats} simulated phases, {args.tasks} tasks, level {args.level}",
        body,
        notes=f"Command: `.venv/bin/python -m benchmarks.commit_gate --repeats {args.repeats} "
        f"--tasks {args.tasks} --level {args.level}`. {__doc__.split(chr(10), 3)[3].strip()}",
    )


if __name__ == "__main__":
    main()
