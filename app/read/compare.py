"""Runs side by side: how good each got on the test split and how many rollouts it took, and
their test curves on one x axis. The compare page, /api/runs/compare and `whale compare` show
these summaries."""

from collections.abc import Sequence
from dataclasses import asdict
from typing import Annotated, Any

import numpy as np
from fastapi import HTTPException, Query
from sqlmodel import Session, col, select

from app.db.queries import task_means
from app.db.schema import Evaluation, Metric, Run
from app.read.config_diff import config_diff
from app.read.curves import (
    X_LABELS,
    intervals,
    label,
    mixed_scales,
    test_points,
    test_scale,
)
from app.read.dashboard import XAxis
from app.read.forks import lineage_curve
from app.read.runs import UnknownRuns, final_pair, get_runs
from app.rollout.usage import rollouts_used
from app.stats import few_tasks, half_widths, paired, paired_interval, seed_interval

MAX_RUNS = 30  # five strategies under six seeds
MAX_CURVES = 10  # the chart has ten colours; a seed group draws as one curve (its seeds faint)
RunIds = Annotated[list[int], Query(description="the runs to compare: ids=1&ids=2...")]
PairedBaseline = Annotated[
    int | None,
    Query(
        le=2**63 - 1,
        description="the run the others' final test scores are paired with: one of ids "
        "(default: the oldest, the lowest id)",
    ),
]


class NotCompared(ValueError):
    """A paired baseline that is not one of the compared runs."""


def selected_point(session: Session, run: Run, points: list[Metric]) -> tuple[Metric | None, str]:
    """The test point chosen without looking at the test split: the (harness, checkpoint) pair
    with the best harness-split (validation) mean@k among those the run tested, the later one
    of equals; the final point when no tested pair has a harness-split score."""
    tested = {e.id: (e.harness_id, e.checkpoint_id) for e in _evaluations(session, points)}
    validation: dict[tuple[int, int], float] = {}
    for e in session.exec(
        select(Evaluation).where(
            Evaluation.run_id == run.id, Evaluation.split == "harness", Evaluation.status == "done"
        )
    ):
        pair = (e.harness_id, e.checkpoint_id)
        validation[pair] = max(validation.get(pair, 0.0), e.mean_at_k or 0.0)
    scored = [p for p in points if tested.get(p.evaluation_id) in validation]
    if not scored:
        return (points[-1] if points else None), "final point"
    # max keeps the first of equals: reversed, the later point wins a tie
    best = max(reversed(scored), key=lambda p: validation[tested[p.evaluation_id]])
    return best, "harness split"


def final_point(session: Session, run: Run, points: list[Metric]) -> tuple[Metric | None, dict]:
    """The test point of the pair the run ended with (the newest of its points), and that pair
    with `tested`. A run without phases (an evaluation) ends on its last point, and so does one
    whose points name no evaluation the store holds (`tested` None: not known)."""
    ended = final_pair(session, run.id)
    last = points[-1] if points else None
    if ended is None:
        return last, {"harness_id": None, "checkpoint_id": None, "tested": last is not None}
    pair = (ended["harness_id"], ended["checkpoint_id"])
    evaluations = _evaluations(session, points)
    if not evaluations:  # points that name no evaluation the store holds: pairs not known
        return last, {"harness_id": pair[0], "checkpoint_id": pair[1], "tested": None}
    tested = {e.id for e in evaluations if (e.harness_id, e.checkpoint_id) == pair}
    final = next((p for p in reversed(points) if p.evaluation_id in tested), None)
    return final, {"harness_id": pair[0], "checkpoint_id": pair[1], "tested": final is not None}


def _evaluations(session: Session, points: list[Metric]) -> list[Evaluation]:
    ids = [p.evaluation_id for p in points if p.evaluation_id is not None]
    return list(session.exec(select(Evaluation).where(col(Evaluation.id).in_(ids))))


def summarize(
    session: Session, run: Run, points: list[Metric] | None = None, ci: dict | None = None
) -> dict:
    """The run's headline figures; its test points and their intervals when already at hand."""
    points = test_points(session, run.id) if points is None else points
    best = max(points, key=lambda p: p.y, default=None)  # max keeps the first of equals
    final, pair = final_point(session, run, points)
    chosen, chosen_by = selected_point(session, run, points)
    ci = intervals(session, points) if ci is None else ci
    return {
        "id": run.id,
        "name": run.name,
        "strategy": run.strategy or run.kind,
        "status": run.status,
        **test_scale(session, run),  # domain, k, scoring: what its mean@k is measured on
        # the headline: the test score of the pair chosen on the harness split, not on test
        "selected": chosen.y if chosen else None,
        "selected_ci": list(ci[chosen.evaluation_id])
        if chosen and chosen.evaluation_id in ci
        else None,
        "selected_by": chosen_by if chosen else None,
        "rollouts_to_selected": chosen.rollouts if chosen else None,
        # the paper's figure: the maximum over test points (chosen on the test split itself)
        "best": best.y if best else None,
        "best_ci": list(ci[best.evaluation_id]) if best and best.evaluation_id in ci else None,
        "rollouts_to_best": best.rollouts if best else None,
        "final": final.y if final else None,
        "final_ci": list(ci[final.evaluation_id]) if final and final.evaluation_id in ci else None,
        "final_evaluation_id": final.evaluation_id if final else None,
        "selected_evaluation_id": chosen.evaluation_id if chosen else None,
        # the test tasks the final score rests on; few_tasks: fewer than app/stats.py's FEW_TASKS
        **tasks_behind(session, final.evaluation_id if final else None),
        # the (harness, checkpoint) pair the run ended with (or holds now, while it runs) and
        # whether it was tested: untested, `final` is None, never another pair's score
        "final_pair": pair,
        "rollouts_used": rollouts_used(session, run.id),
        "test_points": len(points),
        "group": group_of(run),
        "seed": ((run.config or {}).get("experiment") or {}).get("seed"),
    }


def tasks_behind(session: Session, evaluation_id: int | None) -> dict:
    """{"test_tasks": the tasks an evaluation scored, "few_tasks": fewer than FEW_TASKS}."""
    e = session.get(Evaluation, evaluation_id) if evaluation_id is not None else None
    n = e.n_tasks if e is not None else None
    return {"test_tasks": n, "few_tasks": few_tasks(n)}


def paired_evaluations(session: Session, a: int, b: int, compare=paired):
    """Evaluation b against evaluation a on the tasks both scored (app/stats.py: `paired`, or
    `paired_interval` for the interval alone)."""
    k_a, k_b = (session.get(Evaluation, e).k or 1 for e in (a, b))
    return compare(task_means(session, a), task_means(session, b), k_a, k_b)


def paired_with(session: Session, baseline: dict, other: dict) -> dict | None:
    """`other`'s final test evaluation against `baseline`'s, paired on the test tasks both
    scored (app/stats.py); None when either has none or they share no task."""
    a, b = baseline["final_evaluation_id"], other["final_evaluation_id"]
    if a is None or b is None or baseline["id"] == other["id"]:
        return None
    result = paired_evaluations(session, a, b)
    if result is None:
        return None
    return {
        "against": baseline["id"],
        "design": f"paired on {result.n_tasks} shared test tasks; one run each (one seed)",
        **asdict(result),
    }


def baseline_of(run_ids: list[int], baseline: int | None = None) -> int | None:
    """The run the others are paired with: `baseline`, or the oldest run (the lowest id): a
    comparison reads as what newer runs changed, whatever order they were picked in. Raises
    NotCompared for a baseline that is not among the runs."""
    if baseline is None:
        return min(run_ids, default=None)
    if baseline not in run_ids:
        compared = ", ".join(map(str, run_ids))
        raise NotCompared(f"baseline: run {baseline} is not one of the compared runs ({compared})")
    return baseline


def summaries(session: Session, runs: list[Run], baseline: int | None = None) -> list[dict]:
    """One summary per run, each but the baseline (see baseline_of) with its final test score
    compared paired with the baseline's (`paired`; None for the baseline)."""
    rows = [summarize(session, run) for run in runs]
    against = baseline_of([r["id"] for r in rows], baseline)
    base = next((r for r in rows if r["id"] == against), None)
    for row in rows:
        row["paired"] = paired_with(session, base, row) if base and row is not base else None
    return rows


def group_of(run: Run) -> str | None:
    """The seed group a run belongs to (`whale run --seeds`), by its experiment's name."""
    return ((run.config or {}).get("group") or {}).get("name")


def aggregate(rows: list[dict]) -> dict:
    """Summaries of one group's runs as mean and 95% interval over seeds."""
    out: dict[str, Any] = {"n_seeds": len(rows), "runs": [r["id"] for r in rows]}
    for key in ("selected", "best", "final"):
        scored = [r for r in rows if r[key] is not None]
        # no narrower than the runs' own intervals over their (shared) test tasks, on average
        reach = [half_widths(r[key], *(r[f"{key}_ci"] or (None, None))) for r in scored]
        over = seed_interval([r[key] for r in scored], np.mean(reach, axis=0)) if scored else None
        out[f"{key}_mean"] = over.mean if over else None
        out[f"{key}_ci"] = [over.low, over.high] if over and over.low is not None else None
    out["design"] = (
        f"mean over {len(rows)} seeds, one run each; {SEED_INTERVAL}"
        if len(rows) > 1
        else "one seed: no interval over seeds"
    )
    return out


SEED_INTERVAL = "95% t interval over seeds, no narrower than one run's over the test tasks"


def group_summary(session: Session, run_ids: list[int]) -> dict:
    """The group of these runs (one per seed) as mean and interval over seeds."""
    return aggregate(summaries(session, get_runs(session, run_ids)))


def groups(session: Session, rows: list[dict], baseline: int | None = None) -> list[dict]:
    """The seed groups among compared runs, in order of first appearance, each aggregated, and
    each but the baseline's (the group of the baseline run; else the first) paired with it by
    seed (`vs_baseline`)."""
    members: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("group"):
            members.setdefault(row["group"], []).append(row)
    base = next((r["group"] for r in rows if r["id"] == baseline and r.get("group")), None)
    base = base or next(iter(members), None)
    return [
        {
            "group": name,
            "strategy": rs[0]["strategy"],
            "seeds": [r["seed"] for r in rs],
            **aggregate(rs),
            "vs_baseline": None
            if name == base
            else paired_by_seed(session, members[base], rs, base),
        }
        for name, rs in members.items()
    ]


def paired_by_seed(
    session: Session, base: list[dict], other: list[dict], base_name: str
) -> dict | None:
    """`other`'s selected test scores minus `base`'s, seed s against seed s: the mean
    difference, its 95% interval over the seeds both ran (a t interval no narrower than the
    seeds' paired intervals over the test tasks, on average) and the p-value that agrees."""
    a = {r["seed"]: r for r in base if r["selected"] is not None}
    b = {r["seed"]: r for r in other if r["selected"] is not None}
    seeds = sorted(a.keys() & b.keys())
    if not seeds:
        return None
    diffs = [b[s]["selected"] - a[s]["selected"] for s in seeds]
    reach = []
    for s in seeds:
        ids = a[s]["selected_evaluation_id"], b[s]["selected_evaluation_id"]
        on = paired_evaluations(session, *ids, paired_interval) if None not in ids else None
        reach.append(half_widths(*on) if on else (0.0, 0.0))
    over = seed_interval(diffs, np.mean(reach, axis=0), bounds=(-1.0, 1.0))
    return {
        "against": base_name,
        "seeds": seeds,
        "difference": over.mean,
        "low": over.low,
        "high": over.high,
        "p_value": over.p_value,
        "design": f"selected test score, paired by seed over {len(seeds)} seed"
        + (f"s; {SEED_INTERVAL}" if len(seeds) > 1 else ": no interval"),
    }


SEED_BAND = "95% t interval over seeds"  # what seed_bands' band is, as legends say it


def seed_bands(runs: list[Run], curves: list[Sequence[Sequence[float]]]) -> list[dict]:
    """For each seed group among the runs (`whale run --seeds`) with two seeds or more: the
    mean over its seeds at each test point and the 95% t interval over seeds (app/stats.py).
    The seeds share one schedule, so their points align by position, up to the shortest
    curve, each at the seeds' mean x (on wall time their x differ a little). `curves`: each
    run's points in order, (x, y, ...). The compare page and the PNG (app/report/plot.py)
    both draw these, so the two agree."""
    members: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        if group_of(run):
            members.setdefault(group_of(run), []).append(i)
    bands = []
    for name, indexes in members.items():
        if len(indexes) < 2:  # one seed has no spread over seeds: drawn as a plain run
            continue
        seeds = [curves[i] for i in indexes]
        points = []
        for position in range(min(len(c) for c in seeds)):
            # the band is the spread over seeds alone: the runs' own intervals are their bars
            over = seed_interval(c[position][1] for c in seeds)
            mean, low, high = over.mean, over.low, over.high
            x = sum(c[position][0] for c in seeds) / len(seeds)
            points.append({"x": x, "mean": mean, "low": low, "high": high})
        bands.append(
            {
                "group": name,
                "label": f"{name}: mean of {len(indexes)} seeds",  # the band said once, by the chart
                "band": SEED_BAND,
                "n_seeds": len(indexes),
                "runs": [runs[i].id for i in indexes],
                "curves": [label(runs[i]) for i in indexes],  # their keys in "curves"
                "points": points,
            }
        )
    return bands


def compare_runs(session: Session, run_ids: list[int], baseline: int | None = None) -> list[dict]:
    """The summaries of the runs, in the order given, paired with `baseline` (default: the
    oldest); raises UnknownRuns for ids not in the store, NotCompared for a baseline not among
    them."""
    baseline_of(run_ids, baseline)  # refused before any run is read
    return summaries(session, get_runs(session, run_ids), baseline)


def get_comparison(
    s: Session, run_ids: list[int], x: XAxis = "rollouts", baseline: int | None = None
) -> dict[str, Any]:
    if not run_ids:
        raise HTTPException(422, "ids: pick at least one run to compare")
    if len(run_ids) > MAX_RUNS:
        raise HTTPException(422, f"ids: at most {MAX_RUNS} runs at a time, not {len(run_ids)}")
    try:
        baseline = baseline_of(run_ids, baseline)
        runs = get_runs(s, run_ids)
    except NotCompared as exc:
        raise HTTPException(422, str(exc)) from None
    except UnknownRuns as exc:
        raise HTTPException(404, str(exc)) from None
    drawn = len({group_of(run) or run.id for run in runs})
    if drawn > MAX_CURVES:
        raise HTTPException(
            422,
            f"ids: at most {MAX_CURVES} curves at a time (a run, or a seed group of runs, draws "
            f"as one), not {drawn}",
        )
    rows = summaries(s, runs, baseline)
    curves = {label(run): lineage_curve(s, run, x) for run in runs}  # a fork from its fork point
    return {
        "x": x,
        "x_label": X_LABELS[x],
        "baseline": baseline,
        "runs": rows,
        "groups": groups(s, rows, baseline),
        "notes": mixed_scales(rows),
        "curves": curves,
        "config_diff": config_diff(runs),
        "seed_bands": seed_bands(
            runs, [[(p["x"], p["y"]) for p in curves[label(run)]] for run in runs]
        ),
    }
