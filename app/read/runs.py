"""Runs: the list with a summary of each run, one run with its evaluations and failures, and
the lookup every report uses so unknown ids are refused the same way."""

from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.db.schema import Evaluation, Phase, Run
from app.read.annotations import note_line, run_annotations, runs_tagged
from app.read.common import NotFound, as_dict
from app.read.dashboard import LIVE_STATUSES, budgets, shown_status
from app.read.evaluations import evaluation_rows
from app.read.harness_phases import get_harness_phases
from app.read.rollouts import recent_failures, status_counts
from app.read.training_jobs import get_weight_phases


class UnknownRuns(LookupError):
    """Some of the requested run ids are not in the store."""

    def __init__(self, ids: list[int]):
        self.ids = ids
        super().__init__(f"no run {', '.join(map(str, ids))} in this store")


def get_runs(session: Session, run_ids: list[int]) -> list[Run]:
    """The runs in the order asked; raises UnknownRuns naming every missing id."""
    found = {run.id: run for run in session.exec(select(Run).where(Run.id.in_(run_ids)))}
    missing = [i for i in dict.fromkeys(run_ids) if i not in found]
    if missing:
        raise UnknownRuns(missing)
    return [found[i] for i in run_ids]


def list_runs(s: Session, tag: str | None = None) -> list[dict[str, Any]]:
    """Every run (`tag`: those tagged so), newest first, summarised from its evaluations, with
    its tags and its note's first line.

    The evaluation rows already carry what the list needs (tasks x k, progress), so the list
    never touches the rollout table, however many rollouts there are.
    """
    summary = (
        select(
            Evaluation.run_id,
            func.count().label("n_evaluations"),
            func.sum(Evaluation.n_tasks * Evaluation.k).label("n_rollouts"),
            func.sum(Evaluation.n_done).label("n_done"),
        )
        .group_by(Evaluation.run_id)
        .subquery()
    )
    query = (
        select(Run, summary.c.n_evaluations, summary.c.n_rollouts, summary.c.n_done)
        .outerjoin(summary, summary.c.run_id == Run.id)
        .order_by(col(Run.id).desc())
    )
    if tag is not None:
        query = query.where(col(Run.id).in_(runs_tagged(tag)))
    rows = s.exec(query).all()
    annotations = run_annotations(s, [run.id for run, *_ in rows])
    return [
        {
            **as_dict(run),
            "n_evaluations": n_evaluations or 0,
            "n_rollouts": n_rollouts or 0,
            "n_done": n_done or 0,
            **_progress(s, run),
            "tags": annotations[run.id]["tags"],
            "note_line": note_line(annotations[run.id]["note"]),
        }
        for run, n_evaluations, n_rollouts, n_done in rows
    ]


def best_test(s: Session, run_id: int) -> dict[str, Any]:
    """The run's best finished test-split evaluation: its mean@k and 95% interval. Only the
    test split: a one-task smoke check or a harness-split score is no result to show."""
    best = s.exec(
        select(Evaluation)
        .where(
            Evaluation.run_id == run_id,
            Evaluation.split == "test",
            Evaluation.status == "done",
            col(Evaluation.mean_at_k).is_not(None),
        )
        .order_by(col(Evaluation.mean_at_k).desc(), Evaluation.id)
        .limit(1)
    ).first()
    if best is None:
        return {"best_test": None, "best_test_ci": None, "best_test_evaluation_id": None}
    interval = None if best.ci_low is None else [best.ci_low, best.ci_high]
    return {
        "best_test": best.mean_at_k,
        "best_test_ci": interval,
        "best_test_evaluation_id": best.id,
    }


def _progress(s: Session, run: Run) -> dict[str, Any]:
    """Where a run is: its latest phase, best test mean@k, rollouts used and left (the run
    page's rollout budget line, test rollouts not counted). A few indexed lookups per run, none
    over its rollouts."""
    phase = s.exec(
        select(Phase).where(Phase.run_id == run.id).order_by(col(Phase.id).desc())
    ).first()
    rollouts = next(line for line in budgets(s, run) if line["name"] == "rollouts")
    return {
        "phase": f"{phase.kind} phase {phase.round}" if phase else None,
        "shown_status": shown_status(s, run),
        "live": run.status in LIVE_STATUSES,
        **best_test(s, run.id),
        "rollouts_used": rollouts["used"],
        "rollouts_left": rollouts["left"],
    }


def final_pair(s: Session, run_id: int) -> dict[str, Any] | None:
    """The harness and checkpoint the run ended with (while it runs: the pair its finished
    phases handed on), the phase each came from (None for the incoming ones) and the pair's
    test score (`test`, None where it was not tested): what a paper would report."""
    phases = s.exec(
        select(Phase).where(Phase.run_id == run_id, Phase.status == "done").order_by(Phase.id)
    ).all()
    if not phases:
        return None
    final = {"harness_id": phases[0].harness_in_id, "harness_from": None}
    final |= {"checkpoint_id": phases[0].checkpoint_in_id, "checkpoint_from": None}
    for phase in phases:
        came = {"id": phase.id, "kind": phase.kind, "round": phase.round}
        if phase.harness_out_id and phase.harness_out_id != final["harness_id"]:
            final |= {"harness_id": phase.harness_out_id, "harness_from": came}
        if phase.checkpoint_out_id and phase.checkpoint_out_id != final["checkpoint_id"]:
            final |= {"checkpoint_id": phase.checkpoint_out_id, "checkpoint_from": came}
    last = phases[-1]
    return {
        **final,
        "last_phase": {"id": last.id, "kind": last.kind, "round": last.round},
        "test": _pair_test(s, run_id, final["harness_id"], final["checkpoint_id"]),
    }


def _pair_test(s: Session, run_id: int, harness_id: int, checkpoint_id: int) -> dict | None:
    """The pair's newest finished test evaluation in the run (mean@k, interval); None: untested."""
    e = s.exec(
        select(Evaluation)
        .where(
            Evaluation.run_id == run_id,
            Evaluation.split == "test",
            Evaluation.status == "done",
            Evaluation.harness_id == harness_id,
            Evaluation.checkpoint_id == checkpoint_id,
        )
        .order_by(col(Evaluation.id).desc())
    ).first()
    if e is None:
        return None
    return {"evaluation_id": e.id, "mean_at_k": e.mean_at_k, "k": e.k, "ci": [e.ci_low, e.ci_high]}


def get_run(s: Session, run_id: int) -> dict[str, Any]:
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound("run", run_id)
    return {
        "run": as_dict(run),
        "evaluations": evaluation_rows(s, Evaluation.run_id == run_id),
        "status_counts": status_counts(s, run_id=run_id),
        "recent_failures": recent_failures(s, run_id),
        "weight_phases": get_weight_phases(s, run_id),  # empty for a run without training
        "harness_phases": get_harness_phases(s, run_id),
        "final": final_pair(s, run_id),  # None before a phase has ended
        "annotations": run_annotations(s, [run_id])[run_id],  # its tags and note
    }
