"""The JSON API: one route per page of the UI, returning the data that page shows.

Malformed parameters (an id that is not an integer, an unknown status, page < 1) are refused
by FastAPI's validation with a 422 and a message; unknown ids answer 404.
"""
from fastapi import APIRouter

from app.api.checkpoints import get_checkpoint
from app.api.common import EvaluationFilter, Page, RowId, RunFilter, SessionDep, StatusFilter
from app.api.harnesses import get_harness
from app.api.rollouts import get_rollout, list_rollouts
from app.api.runs import get_run, list_runs
from app.api.training import get_training_job

router = APIRouter()


@router.get("/runs")
def runs(s: SessionDep):
    """Every run, newest first, with its best mean@k and number of rollouts."""
    return list_runs(s)


@router.get("/runs/{run_id}")
def run(run_id: RowId, s: SessionDep):
    """A run with its evaluations, rollout counts per status, newest failures and, when it
    trained, its weight phase (jobs, checkpoint chain, curves)."""
    return get_run(s, run_id)


@router.get("/harnesses/{harness_id}")
def harness(harness_id: RowId, s: SessionDep):
    """A harness with its code, parent, children and evaluations."""
    return get_harness(s, harness_id)


@router.get("/rollouts")
def rollouts(s: SessionDep, run: RunFilter = None, evaluation: EvaluationFilter = None,
             status: StatusFilter = None, page: Page = 1):  # fmt: skip
    """One page of rollouts: {"items": [...], "page", "page_size", "has_more", ...}."""
    return list_rollouts(s, run=run, evaluation=evaluation, status=status, page=page)


@router.get("/rollouts/{rollout_id}")
def rollout(rollout_id: RowId, s: SessionDep):
    """A rollout and its trace: every model and tool step in order."""
    return get_rollout(s, rollout_id)


@router.get("/training/{job_id}")
def training_job(job_id: RowId, s: SessionDep):
    """A training job (one RFT step) with its counts, loss curve and first accepted rollouts."""
    return get_training_job(s, job_id)


@router.get("/checkpoints/{checkpoint_id}")
def checkpoint(checkpoint_id: RowId, s: SessionDep):
    """A checkpoint with the job that made it, its lineage, children and evaluations."""
    return get_checkpoint(s, checkpoint_id)
