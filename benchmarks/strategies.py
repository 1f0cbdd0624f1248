"""The five strategies at the same rollout budget on arith with the demo model, several seeds each.

    .venv/bin/python -m benchmarks.strategies [--seeds 0,1,2] [--home DIR] [experiments/arith-*.toml ...]
    .venv/bin/python -m benchmarks.strategies --harness harness_archive/seeds/arith/postfix.py
    .venv/bin/python -m benchmarks.strategies --domain arith-glyphs

`--harness` starts every experiment from that harness instead of the domain's seed, e.g. the
postfix seed (its docstring says what it was meant to show); `--domain` runs them on another
domain, e.g. arith-glyphs (app/domains/arith.py says why). Either way the experiment files are
copied into the store with the line changed and the harness's or domain's name added to theirs.

Runs each experiment with `whale run --seeds` into one store (default: a fresh temporary one),
then prints each strategy's mean over seeds with its interval, every strategy's difference from
the first one paired by seed, writes the accuracy-vs-rollouts figure (seed bands) to
docs/strategies.png and writes the tables to docs/benchmarks.md. Run it again with the same
--home after an interruption: the interrupted run resumes (finished ones would run again: list
only the rest).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from app.stats import seed_interval
from benchmarks.common import REPO, report, table

DEFAULT = [
    "arith-whale",
    "arith-weight-only",
    "arith-harness-only",
    "arith-stagewise",
    "arith-fast-slow",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "experiments",
        nargs="*",
        type=Path,
        default=[REPO / "experiments" / f"{n}.toml" for n in DEFAULT],
    )
    parser.add_argument("--seeds", default="0,1,2", help="one run per seed and experiment")
    parser.add_argument("--home", type=Path, default=None, help="WHALE_HOME for the runs")
    parser.add_argument("--harness", type=Path, default=None, help="the incoming harness")
    parser.add_argument("--domain", default=None, help="the domain, instead of the files' own")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="whale-strategies-"))
    tag = args.harness.stem if args.harness else args.domain or ""
    if args.harness or args.domain:
        harness = args.harness.resolve() if args.harness else None
        args.experiments = [variant(p, home, tag, harness, args.domain) for p in args.experiments]
    env = {**os.environ, "WHALE_HOME": str(home)}
    whale = str(Path(sys.executable).with_name("whale"))
    run_ids = []
    for path in args.experiments:
        print(f"== {path.name}, seeds {args.seeds} (store {home})", flush=True)
        proc = subprocess.run(
            [whale, "run", str(path), "--seeds", args.seeds, "--json"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        if proc.returncode != 0:
            sys.exit(f"{path.name} failed (exit {proc.returncode})")
        run_ids += [r["run_id"] for r in json.loads(proc.stdout.strip().splitlines()[-1])["runs"]]
    figure = REPO / "docs" / (f"strategies-{tag}.png" if tag else "strategies.png")
    proc = subprocess.run(
        [whale, "compare", *map(str, run_ids), "--plot", str(figure), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    compared = json.loads(proc.stdout)
    by_id = {r["id"]: r for r in compared["runs"]}
    groups = compared["groups"]
    where = f"arith from the {tag} seed harness" if args.harness else args.domain or "arith"
    report(
        f"Strategies at equal rollout budget, seeds ({where}, demo model)",
        strategy_table(groups, by_id)
        + "\n\n"
        + difference_table(groups, by_id)
        + f"\n\n![accuracy vs rollouts]({figure.name})\n\nstore: {home}; runs {run_ids}",
    )


def variant(
    experiment: Path, home: Path, tag: str, harness: Path | None, domain: str | None
) -> Path:
    """A copy of the experiment file in `home` that starts from `harness` and/or runs on
    `domain`, its name suffixed with `tag`."""
    text = experiment.read_text()
    text, named = re.subn(r'(?m)^name = "([^"]+)"', rf'name = "\1-{tag}"', text)

    def lines(match: re.Match) -> str:
        new = f"domain = {json.dumps(domain)}" if domain else match.group(0)
        return new + (f"\nharness = {json.dumps(str(harness))}" if harness else "")

    text, placed = re.subn(r"(?m)^domain = .*$", lines, text)
    assert named == placed == 1, f"{experiment}: no name or domain line"
    home.mkdir(parents=True, exist_ok=True)
    copy = home / f"{experiment.stem}-{tag}.toml"
    copy.write_text(text)
    return copy


def _ci(low_high) -> str:
    return f" [{low_high[0]:.3f}, {low_high[1]:.3f}]" if low_high else ""


def _selected(group: dict, by_id: dict) -> list[float]:
    """The group's selected test scores, one per seed, in seed order."""
    return [by_id[i]["selected"] for i in group["runs"]]


def strategy_table(groups: list[dict], by_id: dict) -> str:
    return table(
        [
            "strategy",
            "seeds",
            "selected test mean@k, mean [95% t over seeds]",
            "per seed",
            "max over test, mean",
            "final, mean",
            "rollouts used, mean",
        ],
        [
            [
                g["strategy"],
                g["n_seeds"],
                f"{g['selected_mean']:.3f}{_ci(g['selected_ci'])}",
                " / ".join(f"{v:.3f}" for v in _selected(g, by_id)),
                f"{g['best_mean']:.3f}",
                f"{g['final_mean']:.3f}",
                round(sum(by_id[i]["rollouts_used"] for i in g["runs"]) / g["n_seeds"]),
            ]
            for g in groups
        ],
    )


def difference_table(groups: list[dict], by_id: dict) -> str:
    """Each strategy's selected score minus the first strategy's, paired by seed (seed s of one
    against seed s of the other), with the 95% t interval and the paired t-test over seeds."""
    from scipy import stats

    first, rows = groups[0], []
    base = _selected(first, by_id)
    for g in groups[1:]:
        other = _selected(g, by_id)
        n = min(len(base), len(other))
        diffs = [b - a for a, b in zip(base[:n], other[:n])]
        mean, ci = seed_interval(diffs)
        p = stats.ttest_rel(other[:n], base[:n]).pvalue if n > 1 and any(diffs) else 1.0
        real = "yes" if ci and (ci[0] > 0 or ci[1] < 0) else "no"
        rows.append([g["strategy"], n, f"{mean:+.3f}{_ci(ci)}", f"{p:.3f}", real])
    return table(
        [
            f"strategy minus {first['strategy']}",
            "paired seeds",
            "difference of selected, mean [95% t]",
            "paired t-test p",
            "interval excludes 0",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
