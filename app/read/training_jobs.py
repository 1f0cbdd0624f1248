"""Training jobs (RFT steps): one job with its counts, loss curve, accepted rollouts and the
weight phase it belongs to, and a run's weight phases - each with its jobs, the checkpoints they
made and its accept rate - for the run page.
"""

from typing import Any

from sqlmodel import Session, col, select

from app.db.schema import Checkpoint, Evaluation, Harness, Phase, Run, TrainingJob
from app.read.checkpoints import checkpoint_ref
from app.read.common import NotFound, as_dict, phase_ref, step_fields, step_numbers
from app.read.evaluations import evaluation_rows
from app.read.metrics import series
from app.read.rollouts import list_rollouts

# A job in these states is still changing: its page polls until it leaves them.
LIVE_STATUSES = ("sampling", "training")
N_ACCEPTED_SHOWN = 5
# An RFT step's parts, in order, as app/training/rft.py times them (job.timings).
TIMING_PARTS = {
    "sampling_s": "sampling",
    "scoring_s": "scoring",
    "startup_s": "trainer start",
    "training_s": "training",
    "saving_s": "saving",
    "sync_s": "weight sync",
}


def time_split(job: TrainingJob) -> list[dict[str, Any]]:
    """Where the step's time went: seconds per part it has reached (none for a job recorded
    before steps were timed)."""
    timings = job.timings or {}
    return [
        {"part": label, "key": key, "seconds": timings[key]}
        for key, label in TIMING_PARTS.items()
        if key in timings
    ]


def token_sources(job: TrainingJob) -> dict[str, Any] | None:
    """What the job trained on (app/training/examples.py): its examples made of the token ids
    the model sampled and those rendered through the chat template, and of the calls with ids,
    those whose rendering would have given other ids (drift). None until it has trained."""
    if job.n_from_ids is None:
        return None
    checked, drift = job.n_drift_checked or 0, job.n_drift or 0
    rendered = job.n_rendered or 0
    return {
        "from_ids": job.n_from_ids,
        "rendered": rendered,
        "drift": drift,
        "drift_checked": checked,
        "drift_rate": drift / checked if checked else None,
        "fell_back": (
            f"{rendered} example{'s' if rendered != 1 else ''} rendered through the chat "
            "template and tokenized again: the model server returned no token ids for their calls"
            if rendered
            else None
        ),
    }


def job_row(
    job: TrainingJob, checkpoints: dict[int, Checkpoint], numbers: dict[str, Any]
) -> dict[str, Any]:
    """A job with its step's numbers (step_numbers), its accept rate and the checkpoints it
    read and wrote (from `checkpoints`). `started_at`: when its sampling began (the row's
    creation)."""
    out = checkpoints.get(job.checkpoint_out_id)
    row = as_dict(job)
    return {
        **row,
        **numbers,
        "started_at": row["created_at"],
        "accept_rate": job.n_accepted / job.n_rollouts if job.n_rollouts else None,
        "checkpoint_in": checkpoint_ref(checkpoints[job.checkpoint_in_id]),
        "checkpoint_out": checkpoint_ref(out) if out else None,
        "live": job.status in LIVE_STATUSES,
    }


def _checkpoints(
    s: Session, jobs: list[TrainingJob], more: set[int] = frozenset()
) -> dict[int, Checkpoint]:
    ids = {job.checkpoint_in_id for job in jobs} | {job.checkpoint_out_id for job in jobs} | more
    found = s.exec(select(Checkpoint).where(col(Checkpoint.id).in_(ids - {None})))
    return {c.id: c for c in found}


def _sampling_evaluation(s: Session, job: TrainingJob) -> dict[str, Any] | None:
    """The evaluation that sampled the job's rollouts on the train split.

    The job names it once sampling ends; while it samples, it is the first train-split
    evaluation of the same run, harness and checkpoint started after the job.
    """
    if job.evaluation_id is not None:
        where = [Evaluation.id == job.evaluation_id]
    elif job.status == "sampling":
        where = [
            Evaluation.run_id == job.run_id,
            Evaluation.harness_id == job.harness_id,
            Evaluation.checkpoint_id == job.checkpoint_in_id,
            Evaluation.split == "train",
            Evaluation.created_at >= job.created_at,
        ]
    else:
        return None
    rows = evaluation_rows(s, *where)
    return rows[0] if rows else None


def _accepted_rollouts(s: Session, evaluation_id: int | None) -> list[dict[str, Any]]:
    """The first accepted (passing) rollouts of the sampling, in task order."""
    if evaluation_id is None:
        return []
    return list_rollouts(s, evaluation=evaluation_id, status="pass")["items"][:N_ACCEPTED_SHOWN]


def get_training_job(s: Session, job_id: int) -> dict[str, Any]:
    job = s.get(TrainingJob, job_id)
    if job is None:
        raise NotFound("training job", job_id)
    run = s.get(Run, job.run_id)
    harness = s.get(Harness, job.harness_id)
    losses = series(s, job.run_id, ["train/loss"], training_job_id=job.id)["train/loss"]
    sampling = _sampling_evaluation(s, job)
    return {
        "job": job_row(job, _checkpoints(s, [job]), step_numbers(s, job)),
        # the mean of the batch losses so far; the job's own `loss` once it is done
        "mean_loss": job.loss
        if job.loss is not None
        else (sum(p["y"] for p in losses) / len(losses) if losses else None),
        "run": {"id": run.id, "name": run.name, "status": run.status},
        # "weight phase 2"; None for a step of `whale train`, which has no phase row
        "phase": phase_ref(s.get(Phase, job.phase_id) if job.phase_id else None),
        "harness": {"id": harness.id, "name": harness.name},
        "sampling_evaluation": sampling,
        "loss_curve": losses,
        "time_split": time_split(job),
        "tokens": token_sources(job),
        # what the job trained on: the list of these is /rollouts?evaluation=E&status=pass
        "accepted_rollouts": _accepted_rollouts(s, job.evaluation_id),
    }


def get_weight_phases(s: Session, run_id: int) -> list[dict[str, Any]]:
    """The run's weight phases in order, one section each (as the harness phases have theirs):
    its RFT steps, the checkpoint it started from and those its steps made, and its accept rate.
    The steps of a run without phase rows (`whale train`) are one section whose `phase` is None.
    Empty for a run without training."""
    phases = s.exec(
        select(Phase).where(Phase.run_id == run_id, Phase.kind == "weight").order_by(Phase.id)
    ).all()
    jobs = s.exec(
        select(TrainingJob).where(TrainingJob.run_id == run_id).order_by(TrainingJob.id)
    ).all()
    by_phase: dict[int | None, list[TrainingJob]] = {}
    for job in jobs:
        by_phase.setdefault(job.phase_id, []).append(job)
    starts = {p.checkpoint_in_id for p in phases if p.checkpoint_in_id is not None}
    checkpoints = _checkpoints(s, jobs, starts)
    sections = [_weight_section(None, by_phase[None], checkpoints)] if None in by_phase else []
    sections += [_weight_section(p, by_phase.get(p.id, []), checkpoints) for p in phases]
    return sections


def _weight_section(
    phase: Phase | None, jobs: list[TrainingJob], checkpoints: dict[int, Checkpoint]
) -> dict[str, Any]:
    start = phase.checkpoint_in_id if phase and phase.checkpoint_in_id else None
    if start is None and jobs:
        start = jobs[0].checkpoint_in_id
    made = [checkpoints[j.checkpoint_out_id] for j in jobs if j.checkpoint_out_id in checkpoints]
    sampled = sum(j.n_rollouts for j in jobs)
    accepted = sum(j.n_accepted for j in jobs)
    return {
        "phase": as_dict(phase) if phase else None,
        "jobs": [
            job_row(job, checkpoints, step_fields(job.step, *((i, phase.round) if phase else ())))
            for i, job in enumerate(jobs, 1)
        ],
        "rollouts_used": sampled,
        "n_accepted": accepted,
        # over the phase's steps: accepted rollouts / sampled ones
        "accept_rate": accepted / sampled if sampled else None,
        "checkpoint_in": checkpoint_ref(checkpoints[start]) if start in checkpoints else None,
        "checkpoints_made": [checkpoint_ref(c) for c in made],
    }
