"""Checkpoints: one checkpoint with the job that made it, its lineage, children and evaluations."""

from pathlib import Path
from typing import Any

from sqlmodel import Session, select

from app.db.schema import Checkpoint, Evaluation, TrainingJob
from app.read.common import NotFound, as_dict, step_numbers
from app.read.evaluations import evaluation_rows
from app.read.weights_download import download_of
from app.training.job import OPTIMIZER_FILE


def checkpoint_ref(checkpoint: Checkpoint) -> dict[str, Any]:
    """What a link to a checkpoint shows."""
    return {
        "id": checkpoint.id,
        "name": checkpoint.name,
        "kind": checkpoint.kind,
        "training_job_id": checkpoint.training_job_id,
        "weights_dropped": checkpoint.weights_dropped_at is not None,
    }


def lineage(s: Session, checkpoint: Checkpoint) -> list[dict[str, Any]]:
    """The checkpoint and its ancestors, base first: the chain of trainings that led to it."""
    chain, seen = [checkpoint], {checkpoint.id}
    while chain[-1].parent_id is not None and chain[-1].parent_id not in seen:  # no loops
        parent = s.get(Checkpoint, chain[-1].parent_id)
        if parent is None:
            break
        chain.append(parent)
        seen.add(parent.id)
    return [checkpoint_ref(c) for c in reversed(chain)]


def mean_at_k_by_split(evaluations: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per split, the newest finished evaluation's mean@k and the harness it was measured with
    (evaluations given newest first): a checkpoint's score is a pair's score."""
    by_split: dict[str, dict[str, Any]] = {}
    for e in evaluations:
        if e["status"] == "done" and e["split"] not in by_split:
            by_split[e["split"]] = {
                "mean_at_k": e["mean_at_k"],
                "ci_low": e["ci_low"],
                "ci_high": e["ci_high"],
                "k": e["k"],
                "evaluation_id": e["id"],
                "harness_id": e["harness_id"],
                "harness_name": e["harness_name"],
            }
    return by_split


def get_checkpoint(s: Session, checkpoint_id: int) -> dict[str, Any]:
    checkpoint = s.get(Checkpoint, checkpoint_id)
    if checkpoint is None:
        raise NotFound("checkpoint", checkpoint_id)
    job = s.get(TrainingJob, checkpoint.training_job_id) if checkpoint.training_job_id else None
    children = s.exec(
        select(Checkpoint).where(Checkpoint.parent_id == checkpoint_id).order_by(Checkpoint.id)
    )
    evaluations = evaluation_rows(s, Evaluation.checkpoint_id == checkpoint_id)[::-1]
    optimizer = Path(checkpoint.path) / OPTIMIZER_FILE if checkpoint.path else None
    return {
        "checkpoint": as_dict(checkpoint),
        "training_job": None
        if job is None
        else {
            "id": job.id,
            "run_id": job.run_id,
            "step": job.step,
            **step_numbers(s, job),
            "status": job.status,
            "checkpoint_in_id": job.checkpoint_in_id,
        },
        "lineage": lineage(s, checkpoint),
        "children": [checkpoint_ref(c) for c in children],
        "mean_at_k_by_split": mean_at_k_by_split(evaluations),
        "evaluations": evaluations,
        # retention ([rft] keep_last, keep_every, max_disk_gb) deletes the weights of some
        # trained checkpoints; the row and all that refers to it stay
        "weights": {
            "dropped": checkpoint.weights_dropped_at is not None,
            "dropped_at": as_dict(checkpoint)["weights_dropped_at"],
            # the AdamW state a next step would continue; retention keeps the newest one only
            "optimizer_bytes": optimizer.stat().st_size
            if optimizer and optimizer.is_file()
            else None,
        },
        # its folder as a tar (GET the url), or why it cannot be had
        "download": download_of(checkpoint),
    }
