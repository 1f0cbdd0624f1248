"""The five strategies at the same rollout budget with the demo model, several seeds each.

    .venv/bin/python -m benchmarks.strategies [--seeds 0,1,2] [--home DIR] [experiments/stories-*.toml ...]
    .venv/bin/python -m benchmarks.strategies experiments/arith-{whale,weight-only,harness-only,stagewise,fast-slow}.toml
    .venv/bin/python -m benchmarks.strategies --harness harness_archive/seeds/arith/postfix.py
    .venv/bin/python -m benchmarks.strategies --domain arith-glyphs

`--harness` starts every experiment from that harness instead of the domain's seed, e.g. the
postfix seed (its docstring says what it was meant to show); `--domain` runs them on another
domain, e.g. arith-glyphs (app/domains/arith.py says why). Either way the experiment files are
copied into the store with the line changed and the harness's or domain's name added to theirs.

The default is the five `experiments/stories-*.toml`: the domain built so that both the harness
and the weights matter (docs/stories.md). It prints its estimate of the wall time first.

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
import time
from pathlib import Path

from benchmarks.common import REPO, report, table

DEFAULT = [
    "stories-whale",
    "stories-weight-only",
    "stories-harness-only",
    "stories-stagewise",
    "stories-fast-slow",
]
# Rates of the demo model on the local backend, 2 cores (docs/stories.md): an estimate, not a
# promise; the report says the wall time each run really took.
ROLLOUTS_PER_S = 3.0
SECONDS_PER_RFT_STEP = 15.0
SECONDS_PER_RUN = 40.0  # model server, trainer start, records


def estimate_seconds(path: Path, seeds: int) -> float:
    """Roughly how long `seeds` runs of the experiment take: its budget and test rollouts at
    ROLLOUTS_PER_S, its RFT steps, and a fixed start. Test points are guessed as one per phase."""
    from app.loop.experiment import load

    experiment, _ = load(path)
    e, budget, test = experiment, experiment.budget.rollouts or 0, experiment.test
    step = e.rft.prompts_per_step * e.rft.samples_per_prompt
    weight_phase = e.switching.weight_steps * step
    harness_phase = e.switching.proposing_iterations * e.search.candidates * e.search.tasks
    share = {"weight_only": 1.0, "harness_only": 0.0}.get(e.strategy, 0.5)
    phases = {"stagewise": 2}.get(
        e.strategy, budget / (share * weight_phase + (1 - share) * harness_phase)
    )
    test_rollouts = (int(test.at_start) + phases * int(test.after_phase)) * test.tasks * test.k
    rft_steps = share * budget / step
    one = (budget + test_rollouts) / ROLLOUTS_PER_S + rft_steps * SECONDS_PER_RFT_STEP
    return seeds * (one + SECONDS_PER_RUN)


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
    n_seeds = len(args.seeds.split(","))
    guess = sum(estimate_seconds(p, n_seeds) for p in args.experiments)
    print(
        f"estimate: {len(args.experiments) * n_seeds} runs, about {guess / 60:.0f} minutes on a "
        f"2-core machine ({ROLLOUTS_PER_S} rollouts/s, {SECONDS_PER_RFT_STEP:.0f} s per RFT step)",
        flush=True,
    )
    run_ids, started = [], time.monotonic()
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

    domain = args.domain or _domain_of(args.experiments[0])
    where = f"{domain} from the {tag} seed harness" if args.harness else domain
    figure = REPO / "docs" / f"strategies-{tag or domain}.png"
    proc = subprocess.run(
        [whale, "compare", *map(str, run_ids), "--baseline", str(run_ids[0])]
        + ["--plot", str(figure), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    compared = json.loads(proc.stdout)
    by_id = {r["id"]: r for r in compared["runs"]}
    groups = compared["groups"]

    report(
        f"Strategies at equal rollout budget, seeds ({where}, demo model)",
        strategy_table(groups, by_id)
        + "\n\n"
        + difference_table(groups)
        + f"\n\n![accuracy vs rollouts]({figure.name})\n\nstore: {home}; runs {run_ids}; "
        f"wall time {(time.monotonic() - started) / 60:.0f} minutes (estimated {guess / 60:.0f})",
    )


def _domain_of(experiment: Path) -> str:
    return re.search(r'(?m)^domain = "([^"]+)"', experiment.read_text()).group(1)


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


def difference_table(groups: list[dict]) -> str:
    """Each strategy's selected score minus the first strategy's, paired by seed, as
    `whale compare` computes it (app/read/compare.py paired_by_seed)."""
    rows = []
    for g in groups[1:]:
        d = g["vs_baseline"]
        if d is None:  # no seed run by both
            rows.append([g["strategy"], 0, "-", "-", "-"])
            continue
        interval = f" [{d['low']:+.3f}, {d['high']:+.3f}]" if d["low"] is not None else ""
        real = d["low"] is not None and (d["low"] > 0 or d["high"] < 0)
        p = f"{d['p_value']:.3f}" if d["p_value"] is not None else "-"
        rows.append(
            [
                g["strategy"],
                len(d["seeds"]),
                f"{d['difference']:+.3f}{interval}",
                p,
                "yes" if real else "no",
            ]
        )
    return table(
        [
            f"strategy minus {groups[0]['strategy']}",
            "paired seeds",
            "difference of selected, mean [95% t]",
            "paired t-test p",
            "interval excludes 0",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
