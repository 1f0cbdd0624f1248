"""Every page of the UI, declared once: its path, the one function that loads its data, and its
template. Each page is served twice from that data (Datasette's way): as HTML at its path and
as JSON at the same path under /api, so the JSON holds everything the page shows.

A data function is a FastAPI dependency: its parameters are the page's path and query
parameters, validated once for both renderings. It reads and never writes. What a template
needs beyond the data (an SVG drawn from it, a trace laid out in windows) comes from a
`present` function of the data alone, so it cannot hold anything the JSON lacks.
"""

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, StreamingResponse
from starlette.background import BackgroundTask

from app import ROOT
from app.db.schema import Checkpoint, Run
from app.read import models
from app.read.annotations import label_counts, tags_in_use
from app.read.checkpoints import get_checkpoint
from app.read.common import NotFound, RowId, SessionDep
from app.read.compare import PairedBaseline, RunIds, get_comparison
from app.read.contrast import ContrastQuery, contrast
from app.read.dashboard import BaselineQuery, XQuery, get_dashboard, run_choices, run_log
from app.read.harnesses import AgainstQuery, FullQuery, get_harness, pickable
from app.read.invariants import broken_checks
from app.read.lineage import get_lineage
from app.read.rollout_download import as_csv, as_jsonl, matching_rollouts
from app.read.rollout_filters import (
    MAX_ID,
    STATUS_CHOICES,
    RolloutFilters,
    filter_choices,
    resolve_names,
    run_of,
    scope,
)
from app.read.rollouts import StepsQuery, get_rollout, list_rollouts
from app.read.runs import get_run, list_runs
from app.read.trace_compare import CompareQuery, compare_candidates, compare_rollouts
from app.read.training_jobs import get_training_job
from app.read.weights_download import download_of, weights_tar
from app.web.lineage_svg import legend_svg, lineage_svg
from app.web.templating import render
from app.web.trace import trace_segments

TagQuery = Annotated[str | None, Query(max_length=200, description="only runs tagged so")]
html = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)
api = APIRouter()
Data = dict[str, Any]
# the start form as a fork of a run's phase boundary (app/loop/fork.py)
ForkQuery = Annotated[str | None, Query(alias="from", max_length=40, description="RUN:PHASE")]


@dataclass(frozen=True)
class Page:
    path: str
    load: Callable[..., Data]
    template: str
    response_model: type
    present: Callable[[Data], Data] | None


PAGES: list[Page] = []  # every page declared below, in order


def page(
    path: str,
    template: str,
    response_model: type,
    present: Callable[[Data], Data] | None = None,
    also: tuple[str, ...] = (),
):
    """Declare a page: the decorated data function answers GET `path` as `template` rendered
    and GET /api`path` as JSON (documented by `response_model`); `also` are more HTML paths."""

    def register(load: Callable[..., Data]) -> Callable[..., Data]:
        doc = (load.__doc__ or "").strip()

        def as_json(data: Annotated[Data, Depends(load)]) -> JSONResponse:
            # The model documents the answer (tests check the two agree); the data goes out
            # whole, encoded like every other answer of the API.
            return JSONResponse(jsonable_encoder(data))

        def as_html(request: Request, data: Annotated[Data, Depends(load)]) -> HTMLResponse:
            return render(request, template, {**data, **(present(data) if present else {})})

        api.add_api_route(
            path,
            as_json,
            methods=["GET"],
            response_model=response_model,
            name=load.__name__,
            summary=doc.split("\n")[0],
            description=doc,
        )
        for html_path in (path, *also):
            html.add_api_route(html_path, as_html, methods=["GET"], name=f"{load.__name__}_html")
        PAGES.append(Page(path, load, template, response_model, present))
        return load

    return register


# -- runs --------------------------------------------------------------------------------------


def experiment_presets() -> dict[str, str]:
    """The experiment files shipped in experiments/, offered when starting a run."""
    folder = ROOT / "experiments"
    return {p.name: p.read_text() for p in sorted(folder.glob("*.toml"))} if folder.is_dir() else {}


def runs_data(
    s,
    error: str | None = None,
    experiment: str | None = None,
    preset: str | None = None,
    tag: str | None = None,
    fork_from: str | None = None,
) -> Data:
    """The runs list (`tag`: the runs tagged so) and the start form: a fresh form shows the
    default preset; a refused one the text sent and the preset picked for it (edited or not),
    else one whose text it is. A fork (`fork_from`, "RUN:PHASE") shows the parent's experiment,
    to start as it is or edit."""
    presets = experiment_presets()
    if experiment is None and fork_from:
        experiment, error = fork_experiment(s, fork_from)
    if experiment is None:
        preset = "arith-quick.toml" if "arith-quick.toml" in presets else next(iter(presets), None)
        experiment = presets.get(preset, "")
    elif preset not in presets:
        preset = next((name for name, text in presets.items() if text == experiment), None)
    return {
        "runs": list_runs(s, tag),
        "tag": tag,
        "tags": tags_in_use(s),
        "presets": presets,
        "preset": preset,
        "error": error,
        "experiment": experiment,
        "fork_from": fork_from,
    }


def fork_experiment(s, fork_from: str) -> tuple[str | None, str | None]:
    """(the experiment text, None) of the run a fork point names, as it ran (a seed group's run
    with its own seed), or (None, why not)."""
    from app.loop.fork import ForkError, experiment_as_it_ran, parse_point

    try:
        run_id, _ = parse_point(fork_from)
    except ForkError as exc:
        return None, str(exc)
    run = s.get(Run, run_id)
    source = (run.config or {}).get("source") if run is not None else None
    if run is None or run.kind != "experiment" or not source:
        return None, f"from: no experiment run {run_id} in this store"
    return experiment_as_it_ran(run), None


@page("/runs", "runs.html", models.RunsPage, also=("/",))
def runs(s: SessionDep, tag: TagQuery = None, fork_from: ForkQuery = None) -> Data:
    """Every run (`tag`: those tagged so), newest first, with its progress, best test mean@k,
    tags and note's first line; the tags in use; the experiment files offered for starting a
    new one; `from` (RUN:PHASE) opens the form as a fork of that run's phase boundary, its
    experiment filled in."""
    return runs_data(s, tag=tag.strip() or None if tag else None, fork_from=fork_from)


@page("/runs/live", "_runs_list.html", models.RunsList)
def runs_live(s: SessionDep, ids: RunIds = (), tag: TagQuery = None) -> Data:
    """The runs list's table, which the /runs page polls (`ids`: the runs ticked for comparing,
    shown ticked again; `tag`: the runs tagged so)."""
    tag = tag.strip() or None if tag else None  # the form's blank choice: every run
    return {"runs": list_runs(s, tag), "ids": list(ids), "tag": tag}


@page("/runs/compare", "compare.html", models.ComparePage)
def compare(
    s: SessionDep, ids: RunIds = (), x: XQuery = "rollouts", baseline: PairedBaseline = None
) -> Data:
    """Up to ten runs: their summaries, each final test score paired with the baseline's (the
    oldest run unless `baseline` names another), and test mean@k curves against x."""
    return {**get_comparison(s, list(ids), x, baseline), "ids": list(ids)}


def run_data(s, run_id: int, x: str, baseline: int | None, message: str | None = None) -> Data:
    return {
        **get_run(s, run_id),
        "dashboard": get_dashboard(s, run_id, x, baseline),
        "choices": run_choices(s),
        "view": {"x": x, "baseline": baseline},
        "message": message,
    }


@page("/runs/{run_id}", "run.html", models.RunLive)
def run(run_id: RowId, s: SessionDep, x: XQuery = "rollouts", baseline: BaselineQuery = None):
    """A run with its evaluations, rollout counts per status, newest failures, its weight and
    harness phases, and its dashboard: timeline, budgets, activity, controls, event log and
    curves against x, with a baseline run overlaid. The invariants its records break come
    apart (/runs/{id}/checks), as the page loads."""
    return run_data(s, run_id, x, baseline)


@page("/runs/{run_id}/checks", "_run_checks.html", models.RunChecks)
def run_checks(run_id: RowId, s: SessionDep) -> Data:
    """The invariants the run's records break (`whale check`'s, the store-wide ones aside),
    each with its first rows: the run page's warning. They read all of the run's rows, so
    the page fetches them on its own instead of waiting on them."""
    if s.get(Run, run_id) is None:
        raise NotFound("run", run_id)
    return {"run_id": run_id, "broken": broken_checks(s, run_id)}


@page("/runs/{run_id}/live", "_run_live.html", models.RunLive)
def run_live(
    run_id: RowId, s: SessionDep, x: XQuery = "rollouts", baseline: BaselineQuery = None
) -> Data:
    """The part of the run page that htmx polls while the run can still change."""
    return run_data(s, run_id, x, baseline)


@api.get("/runs/{run_id}/export")
def run_export(run_id: RowId, s: SessionDep) -> FileResponse:
    """The run as `whale export RUN` writes it (run.json, the harnesses' code, a JSON lines file
    per table), packed as a .tar.gz download."""
    from app.report.export import export_archive

    if s.get(Run, run_id) is None:
        raise NotFound("run", run_id)
    folder = Path(tempfile.mkdtemp(prefix="whale-export-"))
    try:
        archive = export_archive(s, run_id, folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return FileResponse(
        archive,
        media_type="application/gzip",
        filename=archive.name,
        background=BackgroundTask(shutil.rmtree, folder, ignore_errors=True),
    )


@api.get("/runs/{run_id}/events")
def run_events(run_id: RowId, s: SessionDep) -> list[dict[str, Any]]:
    """The run's whole log, oldest first (its page shows the newest entries)."""
    return run_log(s, run_id)


@page(
    "/runs/{run_id}/lineage",
    "lineage.html",
    models.LineagePage,
    present=lambda d: {"tree": lineage_svg(d), "legend": legend_svg()},
)
def lineage(run_id: RowId, s: SessionDep) -> Data:
    """The run's harness tree (nodes, parent edges, scores, accepted) and checkpoint chain."""
    return get_lineage(s, run_id)


# -- harnesses, training jobs, checkpoints ----------------------------------------------------


@page("/harnesses/{harness_id}", "harness.html", models.HarnessPage)
def harness(
    harness_id: RowId, s: SessionDep, against: AgainstQuery = None, full: FullQuery = False
) -> Data:
    """A harness with its code, parent, children, evaluations, scores per checkpoint and split,
    its code diffed against its parent (or `against`), what it can be compared against, and
    its rollouts' labels counted."""
    data = get_harness(s, harness_id, against=against, full=full)
    return {
        **data,
        "pickable": pickable(s, data["harness"]["run_id"]),
        "full": full,
        "labels": label_counts(s, harness_id=harness_id),
    }


@page("/training/{job_id}", "training_job.html", models.TrainingJobPage)
def training_job(job_id: RowId, s: SessionDep) -> Data:
    """A training job (one RFT step) with its counts, loss curve and first accepted rollouts."""
    return get_training_job(s, job_id)


@page("/training/{job_id}/live", "_training_live.html", models.TrainingJobPage)
def training_job_live(job_id: RowId, s: SessionDep) -> Data:
    """The part of the job page that htmx polls while the job samples or trains."""
    return get_training_job(s, job_id)


@page("/checkpoints/{checkpoint_id}", "checkpoint.html", models.CheckpointPage)
def checkpoint(checkpoint_id: RowId, s: SessionDep) -> Data:
    """A checkpoint with the job that made it, its lineage, children and evaluations."""
    return get_checkpoint(s, checkpoint_id)


@api.get("/checkpoints/{checkpoint_id}/weights.tar")
def checkpoint_weights(checkpoint_id: RowId, s: SessionDep) -> StreamingResponse:
    """The checkpoint's weights folder (a LoRA adapter, or full weights) as a tar, streamed;
    410 with the reason when retention dropped them or the folder is not here."""
    checkpoint = s.get(Checkpoint, checkpoint_id)
    if checkpoint is None:
        raise NotFound("checkpoint", checkpoint_id)
    offer = download_of(checkpoint)
    if "refused" in offer:
        raise HTTPException(410, f"checkpoint {checkpoint_id}: {offer['refused']}")
    return StreamingResponse(
        weights_tar(checkpoint_id, Path(checkpoint.path)),
        media_type="application/x-tar",
        headers={"Content-Disposition": f'attachment; filename="{offer["name"]}"'},
    )


# -- rollouts and traces ----------------------------------------------------------------------


@page("/rollouts", "rollouts.html", models.RolloutsPage)
def rollouts(s: SessionDep, filters: Annotated[RolloutFilters, Query()]) -> Data:
    """One page of rollouts, filtered, in id order: `items`, the cursors of the neighbouring
    pages (`next_after`, `prev_before`), the text search's progress, counts per status, and
    the choices the filter form offers."""
    filters = resolve_names(s, filters)  # harness=seed.py: its id, in the links too
    data = list_rollouts(s, **filters.model_dump())
    run_id = run_of(s, filters)
    return {
        **data,
        "statuses": STATUS_CHOICES,
        "here": filters.url_params(),
        # the run all the listed rollouts belong to, if one does: the title names it
        "of_run": data["run"] or (_run_ref(s, run_id) if run_id is not None else None),
        "choices": filter_choices(s, run_id),
        "max_id": MAX_ID,
    }


def _run_ref(s, run_id: int) -> Data:
    run = s.get(Run, run_id)
    return {"id": run.id, "name": run.name, "status": run.status}


@page("/rollouts/contrast", "contrast.html", models.ContrastPage)
def rollouts_contrast(s: SessionDep, query: Annotated[ContrastQuery, Query()]) -> Data:
    """The tasks that fail under side A and pass under side B, with one trace of each; until a
    side is named, only the choices of the form (`tasks` is null)."""
    data = contrast(s, query) if query.picked() else {"query": query.model_dump(), "tasks": None}
    return {**data, "choices": filter_choices(s, query.run)}


def _both_segments(data: Data) -> Data:
    return {"both_segments": {side: trace_segments(data[side]) for side in ("a", "b")}}


@page("/rollouts/compare", "trace_compare.html", models.TraceComparePage, present=_both_segments)
def rollouts_compare(s: SessionDep, query: Annotated[CompareQuery, Query()]) -> Data:
    """Two rollouts side by side (a long trace: its first and last steps)."""
    return compare_rollouts(s, query)


@page(
    "/rollouts/{rollout_id}",
    "rollout.html",
    models.RolloutPage,
    present=lambda d: {"segments": trace_segments(d)},
)
def rollout(rollout_id: RowId, s: SessionDep, steps: StepsQuery = None) -> Data:
    """A rollout and its trace: every model and tool step in order (a long trace: its first and
    last steps; `steps=a-b`: those), and other rollouts of its task to compare it with."""
    return {**get_rollout(s, rollout_id, steps), "compare_with": compare_candidates(s, rollout_id)}


# The list as a file, with the list's filters: JSON lines (the list's items) or CSV.
DOWNLOADS = {
    "jsonl": ("application/x-ndjson", as_jsonl),
    "csv": ("text/csv; charset=utf-8", as_csv),
}


CallsQuery = Annotated[
    bool, Query(description="each rollout's model and tool calls (`steps`), as the export has them")
]


def _rollouts_file(
    request: Request, s, filters: RolloutFilters, kind: str, calls: bool
) -> StreamingResponse:
    filters = resolve_names(s, filters)
    scope(s, filters)  # an unknown id is a 404 now, not a download cut short
    run_id = run_of(s, filters)
    name = f"rollouts{f'-run-{run_id}' if run_id is not None else ''}.{kind}"
    media_type, encode = DOWNLOADS[kind]
    items = matching_rollouts(request.app.state.workbench.session, filters, calls)
    return StreamingResponse(
        encode(items) if kind == "jsonl" else encode(items, calls),
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@api.get("/rollouts.jsonl")
def rollouts_jsonl(
    request: Request,
    s: SessionDep,
    filters: Annotated[RolloutFilters, Query()],
    calls: CallsQuery = True,
):
    """Every rollout the filters match (those of /api/rollouts; the page cursor aside), one JSON
    object per line as the list's items with their calls (`steps`; `calls=false`: without),
    times in UTC ending in Z as the export writes them, as a file download."""
    return _rollouts_file(request, s, filters, "jsonl", calls)


@api.get("/rollouts.csv")
def rollouts_csv(
    request: Request,
    s: SessionDep,
    filters: Annotated[RolloutFilters, Query()],
    calls: CallsQuery = True,
):
    """Every rollout the filters match (those of /api/rollouts; the page cursor aside), as CSV
    with a header row (the task and the calls, `steps`, as their JSON; `calls=false`: no calls
    column), times in UTC ending in Z, as a file download."""
    return _rollouts_file(request, s, filters, "csv", calls)


@api.get("/rollouts/{rollout_id}/raw")
def rollout_raw(rollout_id: RowId, s: SessionDep):
    """The whole rollout with every step, as a file download."""
    return JSONResponse(
        jsonable_encoder(get_rollout(s, rollout_id, whole=True)),
        headers={"Content-Disposition": f'attachment; filename="rollout-{rollout_id}.json"'},
    )
