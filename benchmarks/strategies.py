"""The five strategies at the same rollout budget on arith with the demo model.

    .venv/bin/python benchmarks/strategies.py [--home DIR] [experiments/arith-*.toml ...]

Runs each experiment with `whale run` into one store (default: a fresh temporary one), then
prints the comparison, writes the accuracy-vs-rollouts figure to docs/strategies.png and
appends the table to docs/benchmarks.md. Run it again with the same --home after an
interruption: the interrupted run resumes (finished ones would run again: list only the rest).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

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
    parser.add_argument("--home", type=Path, default=None, help="WHALE_HOME for the runs")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="whale-strategies-"))
    env = {**os.environ, "WHALE_HOME": str(home)}
    whale = str(Path(sys.executable).with_name("whale"))
    run_ids = []
    for path in args.experiments:
        print(f"== {path.name} (store {home})", flush=True)
        proc = subprocess.run(
            [whale, "run", str(path), "--json"], env=env, stdout=subprocess.PIPE, text=True
        )
        if proc.returncode != 0:
            sys.exit(f"{path.name} failed (exit {proc.returncode})")
        run_ids.append(json.loads(proc.stdout.strip().splitlines()[-1])["run_id"])
    figure = REPO / "docs" / "strategies.png"
    proc = subprocess.run(
        [whale, "compare", *map(str, run_ids), "--plot", str(figure), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    rows = json.loads(proc.stdout)["runs"]
    ci = lambda v: f" [{v[0]:.3f}, {v[1]:.3f}]" if v else ""  # noqa: E731
    body = table(
        [
            "strategy",
            "selected test mean@k [95%]",
            "chosen by",
            "max over test",
            "rollouts to max",
            "final",
            "rollouts used",
            "test points",
        ],
        [
            [
                r["strategy"],
                f"{r['selected']:.3f}{ci(r['selected_ci'])}",
                r["selected_by"],
                f"{r['best']:.3f}",
                r["rollouts_to_best"],
                f"{r['final']:.3f}",
                r["rollouts_used"],
                r["test_points"],
            ]
            for r in rows
        ],
    )
    report(
        "Strategies at equal rollout budget (arith, demo model)",
        body + f"\n\n![accuracy vs rollouts](strategies.png)\n\nstore: {home}; runs {run_ids}",
    )


if __name__ == "__main__":
    main()
