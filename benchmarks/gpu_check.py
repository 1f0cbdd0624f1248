"""The figures of benchmarks/gpu_check.sh, from its store: called by the script, not by hand.

Reads the JSON that `whale eval --json` and `whale run --json` printed (eval.out, run.out in the
store folder) and the store's evaluations, phases and training jobs for their timings, prints a
table and adds it to docs/benchmarks.md (a CPU rehearsal only prints it).
"""

import argparse
import json
import os
from collections import Counter
from pathlib import Path

from sqlmodel import func, select

from app.db import open_engine, read_session
from app.db.schema import Evaluation, Phase, Rollout, Run, SearchIteration, TrainingJob
from benchmarks.common import parse, report, table


def seconds(row) -> float:
    return (row.finished_at - row.created_at).total_seconds() if row.finished_at else 0.0


def sampling(evaluations: list[Evaluation], counts: Counter) -> tuple[int, float]:
    """(rollouts, seconds while any of their evaluations ran: candidates run side by side)."""
    busy, end = 0.0, None
    for e in sorted((e for e in evaluations if e.finished_at), key=lambda e: e.created_at):
        start = max(e.created_at, end) if end else e.created_at
        busy += max((e.finished_at - start).total_seconds(), 0.0)
        end = max(e.finished_at, end) if end else e.finished_at
    return sum(counts[e.id] for e in evaluations), busy


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("s" if n != 1 else "")


def row(what: str, wall: float, rollouts: int | None = None, busy: float = 0.0, result: str = ""):
    rate = f"{rollouts / busy:.1f}" if rollouts and busy else ""
    return [what, f"{wall:.1f}", rollouts if rollouts is not None else "", rate, result]


def figures(s, eval_out: dict, run_out: dict, walls: list[float]) -> tuple[list[list], dict]:
    eval_run, loop_run = eval_out["run_id"], run_out["run_id"]
    evaluations = s.exec(
        select(Evaluation)
        .where(Evaluation.run_id.in_((eval_run, loop_run)))
        .order_by(Evaluation.id)
    ).all()
    counts = Counter(
        dict(
            s.exec(
                select(Rollout.evaluation_id, func.count())
                .where(Rollout.run_id.in_((eval_run, loop_run)))
                .group_by(Rollout.evaluation_id)
            ).all()
        )
    )
    phases = s.exec(select(Phase).where(Phase.run_id == loop_run).order_by(Phase.id)).all()
    jobs = s.exec(select(TrainingJob).where(TrainingJob.run_id == loop_run)).all()
    iterations = s.exec(
        select(SearchIteration)
        .where(SearchIteration.run_id == loop_run)
        .order_by(SearchIteration.id)
    ).all()

    first = next(e for e in evaluations if e.run_id == eval_run)
    n, busy = sampling([first], counts)
    rows = [
        row("model folder ready (converted once, then cached)", walls[0]),
        row("whale eval: vLLM start and workbench setup", walls[1] - seconds(s.get(Run, eval_run))),
        row(
            f"whale eval: arith seed, {first.n_tasks} test tasks x k={first.k}",
            seconds(first),
            n,
            busy,
            f"mean@{first.k} {first.mean_at_k:.3f}",
        ),
    ]

    loop = [e for e in evaluations if e.run_id == loop_run]
    tests = [e for e in loop if e.split == "test"]
    rows.append(
        row("whale run: vLLM start and workbench setup", walls[2] - seconds(s.get(Run, loop_run)))
    )
    # Test points and phases in the order they ran.
    for item in sorted(tests + list(phases), key=lambda r: r.created_at):
        if isinstance(item, Evaluation):
            n, busy = sampling([item], counts)
            rows.append(
                row(
                    f"test: harness {item.harness_id}, checkpoint {item.checkpoint_id}",
                    seconds(item),
                    n,
                    busy,
                    f"mean@{item.k} {item.mean_at_k:.3f}",
                )
            )
            continue
        n, busy = sampling([e for e in loop if e.phase_id == item.id], counts)
        if item.kind == "weight":
            steps = [j for j in jobs if j.phase_id == item.id]
            accepted = sum(j.n_accepted for j in steps)
            losses = ", ".join(f"{j.loss:.3f}" for j in steps if j.loss is not None) or "-"
            what = f"weight phase: {plural(len(steps), 'RFT step')}"
            result = f"accepted {accepted}/{sum(j.n_rollouts for j in steps)}; loss {losses}"
        else:
            its = [i for i in iterations if i.phase_id == item.id]
            what = f"harness phase: {plural(len(its) - 1, 'iteration')}"
            result = (
                f"harness-split success {its[0].best_success or 0:.3f} -> "
                f"{its[-1].best_success or 0:.3f}"
            )
        rows.append(row(what, seconds(item), n, busy, result))
    rows.append(row("whole check", walls[3]))
    before, after = run_out["test_points"][0], run_out["test_points"][-1]
    summary = {
        "before": before["mean_at_k"],
        "after": after["mean_at_k"],
        "k": tests[0].k,
        "tasks": tests[0].n_tasks,
    }
    return rows, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--gpu", required=True, help="what ran the model")
    parser.add_argument("--vllm", required=True, help="vLLM version and build")
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--cpu", default="0")
    parser.add_argument(
        "--walls",
        type=float,
        nargs=3,
        required=True,
        metavar=("MODEL", "EVAL", "RUN"),
        help="seconds each step took",
    )
    parser.add_argument("--total", type=float, required=True, help="seconds the whole check took")
    args = parse(parser)

    eval_out = json.loads((args.home / "eval.out").read_text())
    run_out = json.loads((args.home / "run.out").read_text())
    engine = open_engine(args.home / "whale.db")
    try:
        with read_session(engine) as s:
            rows, f = figures(s, eval_out, run_out, [*args.walls, args.total])
    finally:
        engine.dispose()
    body = table(["step", "wall s", "rollouts", "rollouts/s", "result"], rows)
    setting = (
        f"{args.gpu}; vLLM {args.vllm}; SmolLM2-135M-Instruct (the embedded model); "
        f"sandbox {os.environ.get('WHALE_SANDBOX', 'auto')}, "
        f"concurrency {os.environ.get('WHALE_CONCURRENCY', 32)}"
    )
    notes = (
        f"Test mean@{f['k']} on {f['tasks']} arith tasks: {f['before']:.3f} before, "
        f"{f['after']:.3f} after one WHALE round ({args.experiment}, run "
        f"{run_out['run_id']}). rollouts/s: rollouts over the time their evaluations took "
        "(vLLM start, training and proposing not counted). "
        "Produced by `bash benchmarks/gpu_check.sh`."
    )
    if args.cpu == "1":  # a rehearsal proves the script, its figures say nothing about GPUs
        print(
            f"\n## GPU check (CPU rehearsal, not added to docs/benchmarks.md)\n{setting}\n\n"
            f"{body}\n\n{notes}"
        )
    else:
        report("GPU check", f"{setting}\n\n{body}", notes)


if __name__ == "__main__":
    main()
