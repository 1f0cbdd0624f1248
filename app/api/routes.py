"""The JSON API: one route per page of the UI, returning the data that page shows.

Malformed parameters (an id that is not an integer, an unknown status, both cursors) are refused
by FastAPI's validation with a 422 and a message; unknown ids answer 404.
"""

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from app.api.checkpoints import get_checkpoint
from app.api.common import RowId, SessionDep
from app.api.compare import RunIds, get_comparison
from app.api.contrast import ContrastQuery, contrast
from app.api.dashboard import BaselineQuery, XQuery, get_dashboard
from app.api.harnesses import AgainstQuery, FullQuery, get_harness
from app.api.lineage import get_lineage
from app.api.rollout_filters import RolloutFilters
from app.api.rollouts import StepsQuery, get_rollout, list_rollouts
from app.api.runs import get_run, list_runs
from app.api.trace_compare import CompareQuery, compare_candidates, compare_rollouts
from app.api.training import get_training_job

router = APIRouter()


@router.get("/runs")
def runs(s: SessionDep):
    """Every run, newest first, with its best mean@k and number of rollouts."""
    return list_runs(s)


@router.get("/runs/compare")
def compare(s: SessionDep, ids: RunIds = (), x: XQuery = "rollouts"):
    """Up to ten runs: their summaries and test mean@k curves against x."""
    return get_comparison(s, list(ids), x)


@router.get("/runs/{run_id}/dashboard")
def dashboard(run_id: RowId, s: SessionDep, x: XQuery = "rollouts", baseline: BaselineQuery = None):
    """Timeline of phases, budgets, current activity, controls, event log and curves."""
    return get_dashboard(s, run_id, x, baseline)


@router.get("/runs/{run_id}")
def run(run_id: RowId, s: SessionDep):
    """A run with its evaluations, rollout counts per status, newest failures and, when it
    trained, its weight phase (jobs, checkpoint chain, curves)."""
    return get_run(s, run_id)


@router.get("/harnesses/{harness_id}")
def harness(
    harness_id: RowId, s: SessionDep, against: AgainstQuery = None, full: FullQuery = False
):
    """A harness with its code, parent, children, evaluations, scores per checkpoint and split,
    and its code diffed against its parent (or `against`)."""
    return get_harness(s, harness_id, against=against, full=full)


@router.get("/runs/{run_id}/lineage")
def run_lineage(run_id: RowId, s: SessionDep):
    """The run's harness tree (nodes, parent edges, scores, accepted) and checkpoint chain."""
    return get_lineage(s, run_id)


@router.get("/rollouts")
def rollouts(s: SessionDep, filters: Annotated[RolloutFilters, Query()]):
    """One page of rollouts, filtered, in id order: {"items": [...], "next_after",
    "prev_before" (the cursors of the neighbouring pages), "search", "status_counts", ...}."""
    return list_rollouts(s, **filters.model_dump())


@router.get("/rollouts/contrast")
def rollouts_contrast(s: SessionDep, query: Annotated[ContrastQuery, Query()]):
    """The tasks that fail under side A and pass under side B, with one trace of each."""
    return contrast(s, query)


@router.get("/rollouts/compare")
def rollouts_compare(s: SessionDep, query: Annotated[CompareQuery, Query()]):
    """Two rollouts side by side (a long trace: its first and last steps)."""
    return compare_rollouts(s, query)


@router.get("/rollouts/{rollout_id}")
def rollout(rollout_id: RowId, s: SessionDep, steps: StepsQuery = None):
    """A rollout and its trace: every model and tool step in order (`steps=a-b`: only those),
    and other rollouts of its task to compare it with."""
    return {**get_rollout(s, rollout_id, steps), "compare_with": compare_candidates(s, rollout_id)}


@router.get("/rollouts/{rollout_id}/raw")
def rollout_raw(rollout_id: RowId, s: SessionDep):
    """The whole rollout with every step, as a file download."""
    return JSONResponse(
        jsonable_encoder(get_rollout(s, rollout_id)),
        headers={"Content-Disposition": f'attachment; filename="rollout-{rollout_id}.json"'},
    )


@router.get("/training/{job_id}")
def training_job(job_id: RowId, s: SessionDep):
    """A training job (one RFT step) with its counts, loss curve and first accepted rollouts."""
    return get_training_job(s, job_id)


@router.get("/checkpoints/{checkpoint_id}")
def checkpoint(checkpoint_id: RowId, s: SessionDep):
    """A checkpoint with the job that made it, its lineage, children and evaluations."""
    return get_checkpoint(s, checkpoint_id)
