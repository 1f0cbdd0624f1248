"""The commit gate's rules on simulated harness phases: false commits and rollouts spent.

    .venv/bin/python -m benchmarks.commit_gate [--repeats 2000] [--tasks 64] [--level 0.05]

Each repetition draws an incumbent harness (per-task pass probabilities spread from almost never
to almost always, Beta(0.5, 0.5)) and five candidates scored on the same tasks, one rollout per
task as in the paper: one truly better (+0.15 pass probability on every task), two equal, two
worse (-0.10). Each rule (app/search/acceptance.py) decides on each candidate; the table reports
how often it commits a candidate that is not better (per candidate: what `false_commit` bounds),
how often it commits the better one, and the rollouts each candidate cost.
"""

import argparse
import random

from app.search.acceptance import RULES, decide

SHIFTS = (0.15, 0.0, 0.0, -0.10, -0.10)  # the candidates' change in pass probability


def simulate(repeats: int, n_tasks: int, level: float, seed: int = 0) -> dict[str, dict]:
    """Per rule: false_commits (share of equal-or-worse candidates committed), power (share of
    better ones committed), rollouts (mean per candidate)."""
    rng = random.Random(seed)
    counts = {r: {"null": 0, "null_commits": 0, "better_commits": 0, "rollouts": 0} for r in RULES}
    tasks = [f"t{i}" for i in range(n_tasks)]
    for rep in range(repeats):
        difficulty = [rng.betavariate(0.5, 0.5) for _ in tasks]
        incumbent = {t: float(rng.random() < p) for t, p in zip(tasks, difficulty)}
        order = rng.sample(tasks, n_tasks)
        for c, shift in enumerate(SHIFTS):
            candidate = {
                t: float(rng.random() < min(1.0, max(0.0, p + shift)))
                for t, p in zip(tasks, difficulty)
            }
            for rule in RULES:
                decision = decide(rule, incumbent, candidate, level, order, seed=rep * 10 + c)
                tally = counts[rule]
                tally["rollouts"] += decision.n_tasks
                if shift > 0:
                    tally["better_commits"] += decision.commit
                else:
                    tally["null"] += 1
                    tally["null_commits"] += decision.commit
    better = repeats * sum(s > 0 for s in SHIFTS)
    return {
        rule: {
            "false_commits": t["null_commits"] / t["null"],
            "power": t["better_commits"] / better,
            "rollouts": t["rollouts"] / (repeats * len(SHIFTS)),
        }
        for rule, t in counts.items()
    }


def main() -> None:
    from benchmarks.common import report, table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--level", type=float, default=0.05)
    args = parser.parse_args()
    results = simulate(args.repeats, args.tasks, args.level)
    body = table(
        [
            "rule",
            "false commits (per null candidate)",
            "better one committed",
            "rollouts per candidate",
        ],
        [
            [rule, f"{r['false_commits']:.3f}", f"{r['power']:.3f}", f"{r['rollouts']:.1f}"]
            for rule, r in results.items()
        ],
    )
    report(
        f"Commit gate: {args.repeats} simulated phases, {args.tasks} tasks, level {args.level}",
        body,
        notes=f"Command: `.venv/bin/python -m benchmarks.commit_gate --repeats {args.repeats} "
        f"--tasks {args.tasks} --level {args.level}`. {__doc__.split(chr(10), 3)[3].strip()}",
    )


if __name__ == "__main__":
    main()
