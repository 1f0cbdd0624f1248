"""The strategies at the same rollout budget with the demo model, several seeds each.

    .venv/bin/python -m benchmarks.strategies [--seeds 0,1,2] [--home DIR] [experiments/stories-*.toml ...]
    .venv/bin/python -m benchmarks.strategies experiments/arith-{whale,weight-only,harness-only,stagewise,fast-slow}.toml
    .venv/bin/python -m benchmarks.strategies --harness harness_archive/seeds/arith/postfix.py
    .venv/bin/python -m benchmarks.strategies --domain arith-glyphs
    .venv/bin/python -m benchmarks.strategies --budgets 256,512,1024

`--harness` starts every experiment from that harness instead of the domain's seed, e.g. the
postfix seed (its docstring says what it was meant to show); `--domain` runs them on another
domain, e.g. arith-glyphs (app/domains/arith.py says why). Either way the experiment files are
copied into the store with the line changed and the harness's or domain's name added to theirs.

The default is the six `experiments/stories-*.toml`: the domain built so that both the harness
and the weights matter (docs/stories.md). It prints its estimate of the wall time first.

`--budgets` runs every experiment at each of these rollout budgets (copies of the files with
`[budget] rollouts` changed and `-bN` added to their names) and adds a figure of the selected
test mean@k against the budget, one line per strategy with its band over seeds
(docs/strategies-budgets-<domain>.png), a table of paired differences per budget, and where
each WHALE run's rollouts went (weight phases, harness phases, test; accepted per RFT step).

Runs each experiment with `whale run --seeds` into one store (default: a fresh temporary one),
then prints each strategy's mean over seeds with its interval, every strategy's difference from
the first one paired by seed, writes the accuracy-vs-rollouts figure (seed bands) to
docs/strategies.png and writes the tables to docs/benchmarks.md.

A long sweep can take several sittings: run it again with the same `--home` and arguments, and
the runs the store has finished are kept, an interrupted one resumes and the rest run; the
tables cover them all, and the wall time is the runs' own, read from the store's start, resume,
interruption and end events (the time between sittings is not counted). A store holds the runs
of one commit's code: the first sitting writes its commit to `--home`'s benchmark.json, and a
sitting whose checkout runs other code is refused, so a section never mixes two versions of what
the runs execute. A later sitting may differ from that commit only outside the run code
(NOT_RUN_CODE: docs, tests, the benchmarks' own reporting), and the experiment files copied into
the store must be unchanged; the section names both commits.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, commit, parse, report, table

DEFAULT = [
    "stories-whale",
    "stories-whale-adaptive",
    "stories-weight-only",
    "stories-harness-only",
    "stories-stagewise",
    "stories-fast-slow",
]
# The trainer's and a run's fixed costs with the demo model on 2 cores (docs/stories.md): an
# estimate, not a promise; the report says the wall time each run really took. The rollout rate
# is measured (`measured_rate`) unless --rate gives one.
SECONDS_PER_RFT_STEP = 15.0
SECONDS_PER_RUN = 40.0  # model server, trainer start, records
RATE_SIZES = (8, 32)  # tasks of the two timed evaluations, k = 2 each


def measured_rate(domain: str, env: dict, whale: str | None = None) -> float:
    """Rollouts per second of the domain's seed harness on this machine now, from two
    evaluations of different sizes: the difference leaves the model server's start out.
    `whale` may be another checkout's command, to compare engines."""
    from app.domains import get_domain

    whale = whale or str(Path(sys.executable).with_name("whale"))
    seed = str(get_domain(domain).seed_harness)
    walls = []
    for tasks in RATE_SIZES:
        start = time.monotonic()
        subprocess.run(
            [whale, "eval", seed, "--domain", domain, "--split", "train"]
            + ["--limit", str(tasks), "-k", "2", "--json"],
            env=env,
            stdout=subprocess.DEVNULL,
            check=True,
        )
        walls.append(time.monotonic() - start)
    return 2 * (RATE_SIZES[1] - RATE_SIZES[0]) / max(walls[1] - walls[0], 1e-3)


def estimate_seconds(path: Path, seeds: int, rate: float) -> float:
    """Roughly how long `seeds` runs of the experiment take: its budget and test rollouts at
    `rate` rollouts/s, its RFT steps, and a fixed start. Test points are guessed as one per phase."""
    from app.loop.experiment_file import load

    experiment, _ = load(path)
    e, budget, test = experiment, experiment.budget.rollouts or 0, experiment.test
    step = e.rft.prompts_per_step * e.rft.samples_per_prompt
    rule = e.switching
    adaptive = rule.rule == "adaptive"  # guessed at its phases' minimum lengths
    weight_steps = (
        rule.weight_burn_in + rule.weight_patience if adaptive else rule.weight_steps_per_phase
    )
    iterations = rule.harness_min_iterations if adaptive else rule.proposing_iterations_per_phase
    weight_phase = weight_steps * step
    harness_phase = iterations * e.search.candidates * e.search.tasks
    share = {"weight_only": 1.0, "harness_only": 0.0}.get(e.strategy, 0.5)
    phases = {"stagewise": 2}.get(
        e.strategy, budget / (share * weight_phase + (1 - share) * harness_phase)
    )
    test_rollouts = (int(test.at_start) + phases * int(test.after_phase)) * test.tasks * test.k
    rft_steps = share * budget / step
    one = (budget + test_rollouts) / rate + rft_steps * SECONDS_PER_RFT_STEP
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
    parser.add_argument(
        "--budgets", default=None, help="rollout budgets to sweep, e.g. 256,512,1024"
    )
    parser.add_argument("--estimate", action="store_true", help="print the estimate and stop")
    parser.add_argument(
        "--rate", type=float, help="rollouts/s for the estimate (default: measured here)"
    )
    parser.add_argument(
        "--whale", help="the `whale` command that measures the rate (another checkout's engine)"
    )
    args = parse(parser, stamps=lambda a: not a.estimate)
    home = args.home or Path(tempfile.mkdtemp(prefix="whale-strategies-"))
    tag = args.harness.stem if args.harness else args.domain or ""
    if args.harness or args.domain:
        harness = args.harness.resolve() if args.harness else None
        args.experiments = [
            variant(p, home, tag, harness=harness, domain=args.domain) for p in args.experiments
        ]
    budgets = [int(b) for b in args.budgets.split(",")] if args.budgets else [None]
    sweep = {
        b: [variant(p, home, f"b{b}", budget=b) if b else p for p in args.experiments]
        for b in budgets
    }
    env = {**os.environ, "WHALE_HOME": str(home)}
    n_seeds = len(args.seeds.split(","))
    files = [p for paths in sweep.values() for p in paths]
    domain = args.domain or _domain_of(args.experiments[0])
    if args.rate is None:
        print(f"measuring the rollout rate of {domain}'s seed harness here...", flush=True)
    rate = args.rate or measured_rate(domain, env, args.whale)
    guess = sum(estimate_seconds(p, n_seeds, rate) for p in files)
    print(
        f"estimate: {len(files) * n_seeds} runs, about {guess / 60:.0f} minutes here "
        f"({rate:.2f} rollouts/s, {SECONDS_PER_RFT_STEP:.0f} s per RFT step)",
        flush=True,
    )
    if args.estimate:
        return
    pinned = pin_store(home)
    run_ids = {b: run_all(paths, args.seeds, env, home) for b, paths in sweep.items()}
    every_run = [i for ids in run_ids.values() for i in ids]
    wall = (
        f"the runs' own wall time {run_minutes(home / 'whale.db', every_run):.0f} minutes "
        f"(estimated {guess / 60:.0f}); runs made with the code of commit {pinned}"
    )

    where = f"{domain} from the {tag} seed harness" if args.harness else domain
    if not args.budgets:
        ids = run_ids[None]
        figure = REPO / "docs" / f"strategies-{tag or domain}.png"
        groups, by_id = compare(ids, env, figure)
        report(
            f"Strategies at equal rollout budget, seeds ({where}, demo model)",
            strategy_table(groups, by_id)
            + "\n\n"
            + difference_table(groups)
            + f"\n\n![accuracy vs rollouts]({figure.name})\n\nstore: {home}; runs {ids}; {wall}",
        )
        return
    report(
        f"Strategies across rollout budgets, seeds ({where}, demo model)",
        budget_sweep_body(run_ids, env, home, domain) + f"\n\nstore: {home}; {wall}",
    )


def run_all(paths: list[Path], seeds: str, env: dict, home: Path) -> list[int]:
    """`whale run --seeds` each experiment into the store, but for the seeds the store has
    already finished; the runs' ids, by experiment and seed."""
    whale = str(Path(sys.executable).with_name("whale"))
    wanted = [int(s) for s in seeds.split(",")]
    run_ids = []
    for path in paths:
        done = finished_runs(home, path, wanted)
        rest = [s for s in wanted if s not in done]
        kept = f"; seeds {sorted(done)} finished earlier (runs {sorted(done.values())})"
        print(f"== {path.name}, seeds {rest} (store {home}{kept if done else ''})", flush=True)
        if rest:
            code, out = run_passing_sigterm(
                [whale, "run", str(path), "--seeds", ",".join(map(str, rest)), "--json"], env
            )
            if code != 0:
                sys.exit(f"{path.name} ended with exit {code}: the same command resumes the sweep")
            runs = json.loads(out.strip().splitlines()[-1])["runs"]
            done.update(zip(rest, [r["run_id"] for r in runs], strict=True))
        run_ids += [done[s] for s in wanted]
    return run_ids


def run_passing_sigterm(command: list[str], env: dict) -> tuple[int, str]:
    """Run `command`, its stdout captured; a SIGTERM sent to this script goes to it too and is
    waited for: `whale run` then records its run as interrupted (the next sitting resumes it),
    where the default would end this script alone and leave the run going on without it."""
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as proc:
        previous = signal.signal(signal.SIGTERM, lambda signum, _: proc.send_signal(signum))
        try:
            out, _ = proc.communicate()
        finally:
            signal.signal(signal.SIGTERM, previous)
    return proc.returncode, out


def finished_runs(home: Path, path: Path, seeds: list[int]) -> dict[int, int]:
    """Seed -> id of the run of this experiment file and seed that the store has finished: the
    same name and the same file (the config hash `whale run` resumes by)."""
    db = home / "whale.db"
    if not db.exists():
        return {}
    from sqlmodel import select

    from app.db import open_engine, read_session
    from app.db.schema import Run
    from app.loop.experiment_file import config_hash, parse

    text = path.read_text()
    names = {parse(text, str(path), seed=s).name: s for s in seeds}
    engine = open_engine(db)
    try:
        with read_session(engine) as s:
            runs = s.exec(select(Run).where(Run.status == "done").order_by(Run.id)).all()
            return {
                names[r.name]: r.id
                for r in runs
                if r.name in names and (r.config or {}).get("hash") == config_hash(text)
            }
    finally:
        engine.dispose()


# Paths a later sitting's checkout may change (git pathspecs): what the runs execute is
# everything else (the workbench, sandbox, harnesses, experiment files, dependencies).
NOT_RUN_CODE = ("docs", "tests", "benchmarks", "*.md")


def pin_store(home: Path, repo: Path = REPO) -> str:
    """Tie the store to the code its runs are made with (benchmark.json: the first sitting's
    commit); refuse a checkout whose run code differs from it. Returns that commit."""
    head, _ = commit(repo)
    marker = home / "benchmark.json"
    pinned = json.loads(marker.read_text())["commit"] if marker.exists() else head
    if pinned != head and not same_run_code(pinned, repo):
        sys.exit(
            f"{home} holds runs made at commit {pinned}; this checkout ({head}) runs other code "
            f"(git diff {pinned} outside {', '.join(NOT_RUN_CODE)}): a section would mix the "
            "two. Check out that commit, or start another --home"
        )
    home.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"commit": pinned}))
    return pinned


def same_run_code(pinned: str, repo: Path = REPO) -> bool:
    """Whether HEAD differs from `pinned` only in NOT_RUN_CODE (an unknown commit: no)."""
    excluded = [f":(exclude){path}" for path in NOT_RUN_CODE]
    diff = subprocess.run(
        ["git", "diff", "--quiet", pinned, "HEAD", "--", ".", *excluded],
        cwd=repo,
        capture_output=True,
    )
    return diff.returncode == 0


def run_minutes(db: Path, run_ids: list[int]) -> float:
    """Minutes the runs ran, from the store: from each start or resume to the next interruption
    or end. Sittings' gaps are not counted; a run killed without an interruption event counts to
    its last event before it resumed."""
    import sqlite3
    from datetime import datetime

    total = 0.0
    with sqlite3.connect(db) as con:
        for run_id in run_ids:
            since = last = None
            for kind, at in con.execute(
                "SELECT kind, created_at FROM event WHERE run_id = ? ORDER BY id", (run_id,)
            ):
                at = datetime.fromisoformat(at)
                if kind in ("run_start", "run_resumed"):
                    if since is not None:  # killed with no word: it ran to its last event
                        total += (last - since).total_seconds()
                    since = at
                elif kind in ("run_interrupted", "run_end") and since is not None:
                    total += (at - since).total_seconds()
                    since = None
                last = at
            if since is not None:
                total += (last - since).total_seconds()
    return total / 60


def compare(run_ids: list[int], env: dict, figure: Path | None = None) -> tuple[list, dict]:
    """`whale compare --json` of the runs against the first: its seed groups and runs by id.
    Without `figure`, the plot `whale compare` always draws goes to a temporary folder: as
    compare.png in the working directory, an untracked file, it made the tree dirty and the
    section unwritable."""
    whale = str(Path(sys.executable).with_name("whale"))
    with tempfile.TemporaryDirectory() as scratch:
        plot = figure or Path(scratch) / "compare.png"
        command = [whale, "compare", *map(str, run_ids), "--baseline", str(run_ids[0])]
        proc = subprocess.run(
            [*command, "--plot", str(plot), "--json"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
    compared = json.loads(proc.stdout)
    return compared["groups"], {r["id"]: r for r in compared["runs"]}


def budget_sweep_body(run_ids: dict[int, list[int]], env: dict, home: Path, domain: str) -> str:
    """Per budget the strategy and difference tables, the figure against the budget, where the
    WHALE runs' rollouts went, and which commit wrote the prediction the sweep is judged by."""
    by_budget, parts = {}, []
    for budget, ids in run_ids.items():
        groups, by_id = compare(ids, env)
        by_budget[budget] = groups
        parts.append(
            f"### {budget} rollouts per run\n\n"
            + strategy_table(groups, by_id)
            + "\n\n"
            + difference_table(groups)
        )
    figure = REPO / "docs" / f"strategies-budgets-{domain}.png"
    plot_budget_sweep(by_budget, figure)
    whale_runs = [i for ids in run_ids.values() for i in ids]
    return (
        f"Prediction: docs/stories.md, written in commit {prediction_commit()} before the runs.\n\n"
        + f"![selected test mean@k against the budget]({figure.name})\n\n"
        + "\n\n".join(parts)
        + "\n\n### Where the WHALE runs' rollouts went\n\n"
        + allocation_table(home / "whale.db", whale_runs)
    )


def prediction_commit() -> str:
    """The commit that added the sweep's prediction to docs/stories.md, read from git."""
    found = subprocess.run(
        ["git", "log", "--reverse", "--format=%h", "-S", "Prediction for the budget sweep"]
        + ["--", "docs/stories.md"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return (found.stdout.split() or ["(not committed)"])[0]


def _domain_of(experiment: Path) -> str:
    return re.search(r'(?m)^domain = "([^"]+)"', experiment.read_text()).group(1)


def variant(
    experiment: Path,
    home: Path,
    tag: str,
    harness: Path | None = None,
    domain: str | None = None,
    budget: int | None = None,
) -> Path:
    """A copy of the experiment file in `home` that starts from `harness`, runs on `domain`
    and/or has a rollout budget of `budget`, its name suffixed with `tag`."""
    text = experiment.read_text()
    text, named = re.subn(r'(?m)^name = "([^"]+)"', rf'name = "\1-{tag}"', text)

    def lines(match: re.Match) -> str:
        new = f"domain = {json.dumps(domain)}" if domain else match.group(0)
        return new + (f"\nharness = {json.dumps(str(harness))}" if harness else "")

    text, placed = re.subn(r"(?m)^domain = .*$", lines, text)
    assert named == placed == 1, f"{experiment}: no name or domain line"
    if budget is not None:
        text, budgeted = re.subn(
            r"(?ms)^(\[budget\]\n(?:(?!\[).*?\n)*?)rollouts = \d+",
            rf"\g<1>rollouts = {budget}",
            text,
        )
        assert budgeted == 1, f"{experiment}: no [budget] rollouts line"
    home.mkdir(parents=True, exist_ok=True)
    copy = home / f"{experiment.stem}-{tag}.toml"
    if copy.exists() and copy.read_text() != text:  # a later sitting: its runs' file is kept
        sys.exit(
            f"{copy} differs from the copy of {experiment} this checkout makes: the store's "
            "runs were made from the earlier one. Start another --home"
        )
    copy.write_text(text)
    return copy


def _line_name(group: dict) -> str:
    """A sweep group's experiment name without the budget's `-bN`: one line per strategy."""
    return re.sub(r"-b\d+$", "", group["group"])


def plot_budget_sweep(by_budget: dict[int, list[dict]], path: Path) -> dict[str, list]:
    """Selected test mean@k against the rollout budget, a line per strategy with its 95% t band
    over seeds; writes the PNG and returns what it plotted: {line: [(budget, mean, low, high)]}."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lines: dict[str, list] = {}
    for budget, groups in sorted(by_budget.items()):
        for g in groups:
            low, high = g["selected_ci"] or (g["selected_mean"], g["selected_mean"])
            lines.setdefault(_line_name(g), []).append((budget, g["selected_mean"], low, high))
    fig = Figure(figsize=(7, 4.5), dpi=200, layout="constrained")
    ax = fig.add_subplot()
    colors = colormaps["tab10"]
    for i, (name, points) in enumerate(lines.items()):
        xs, ys, lows, highs = zip(*points)
        ax.plot(xs, ys, marker="os^DvP*Xhp"[i % 10], color=colors(i), label=name)
        ax.fill_between(xs, lows, highs, color=colors(i), alpha=0.15, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(by_budget), [str(b) for b in sorted(by_budget)])
    ax.set_xlabel("rollout budget per run")
    ax.set_ylabel("selected test mean@k")
    ax.set_ylim(0, 1)
    ax.set_title("Selected test mean@k against the budget (band: 95% t interval over seeds)")
    ax.grid(alpha=0.3, linewidth=0.6)
    ax.legend(fontsize=7, ncols=2, loc="upper left")
    FigureCanvasAgg(fig).print_png(str(path))
    return lines


def allocation_table(db: Path, run_ids: list[int]) -> str:
    """For each WHALE run: rollouts in weight phases, harness phases and tests, and the accepted
    rollouts of each RFT step (accepted/sampled), read from the store."""
    import sqlite3

    con = sqlite3.connect(db)
    rows = []
    for run_id in run_ids:
        name, strategy = con.execute(
            "SELECT name, strategy FROM run WHERE id = ?", (run_id,)
        ).fetchone()
        if strategy != "whale":
            continue
        used = dict(
            con.execute(
                "SELECT kind, SUM(rollouts) FROM phase WHERE run_id = ? GROUP BY kind", (run_id,)
            ).fetchall()
        )
        (tested,) = con.execute(
            "SELECT COALESCE(SUM(n_done), 0) FROM evaluation WHERE run_id = ? AND split = 'test'",
            (run_id,),
        ).fetchone()
        steps = con.execute(
            "SELECT n_accepted, n_rollouts FROM training_job WHERE run_id = ? ORDER BY id",
            (run_id,),
        ).fetchall()
        phases = con.execute(
            "SELECT kind FROM phase WHERE run_id = ? ORDER BY id", (run_id,)
        ).fetchall()
        rows.append(
            [
                f"{run_id} {name}",
                used.get("weight", 0),
                used.get("harness", 0),
                tested,
                "".join("W" if k == "weight" else "H" for (k,) in phases),
                " ".join(f"{a}/{n}" for a, n in steps) or "-",
            ]
        )
    return table(
        [
            "run",
            "weight-phase rollouts",
            "harness-phase rollouts",
            "test rollouts",
            "phases",
            "accepted/sampled per RFT step",
        ],
        rows,
    )


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
                g["group"],
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
            rows.append([g["group"], 0, "-", "-", "-"])
            continue
        interval = f" [{d['low']:+.3f}, {d['high']:+.3f}]" if d["low"] is not None else ""
        real = d["low"] is not None and (d["low"] > 0 or d["high"] < 0)
        p = f"{d['p_value']:.3f}" if d["p_value"] is not None else "-"
        rows.append(
            [
                g["group"],
                len(d["seeds"]),
                f"{d['difference']:+.3f}{interval}",
                p,
                "yes" if real else "no",
            ]
        )
    return table(
        [
            f"strategy minus {groups[0]['group']}",
            "paired seeds",
            "difference of selected, mean [95% t]",
            "paired t-test p",
            "interval excludes 0",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
