"""A run that `whale export` wrote (app/report/export.py) read back into a store: `whale import`.

Every row is inserted anew, under the store's next ids, and every reference between the rows is
mapped to those ids: a harness's parents and phase, a checkpoint's parent and the training job
that made it, the frontier and gate of a search iteration, what people wrote on the run and its
rollouts (tags, notes, labels). Harnesses and checkpoints of other runs that the export carries
(ancestors, the shared base checkpoint) come in as rows of no run. The whole run is written in
one transaction: an export that does not read back leaves the store as it was.

A run exported before it ended comes in stopped, its unstarted rollouts dropped (as a stop
drops them): its weights and sandboxes are not here to go on with. Kept as the export has them: a phase's `detail` and an event's `detail`, whose ids (if any) are
the exporting store's. Not in an export, so not here: the token ids of model steps. A fork's
parent run is not in the export: an imported fork keeps its fork point as a record
("forked_in_export" in its config), not as a link to a run of this store.
"""

import json
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel

from app.annotations import clean_names, clean_note
from app.db.schema import (
    Checkpoint,
    Evaluation,
    Event,
    Harness,
    Metric,
    Phase,
    Rollout,
    RolloutLabel,
    RolloutNote,
    Run,
    RunNote,
    RunTag,
    SearchIteration,
    Step,
    TrainingJob,
    now,
)
from app.db.steps import compact
from app.db.writer import Writer
from app.experiment_schema import describe
from app.phases import close_open_work
from app.read.dashboard import LIVE_STATUSES

# An export of a run that had not ended comes in stopped: its checkpoints' weights and its
# sandboxes are the exporting machine's, so nothing here can go on with it.
UNFINISHED = "imported from an export taken before the run ended"


# what a malformed export raises while it is read (a missing key, a value of the wrong type, a
# missing file, a row the store's constraints refuse), each said as NotAnExport
MALFORMED = (KeyError, TypeError, AttributeError, ValueError, OSError, IntegrityError)


class NotAnExport(ValueError):
    """The folder is no export `whale import` can read; the message says what is wrong."""


def _lines(folder: Path, name: str, ids: "_Ids") -> Iterator[dict]:
    path = folder / name
    if not path.exists():
        raise NotAnExport(f"{path}: missing; is {folder} a folder `whale export` wrote?")
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            ids.where = f"{name}, line {number}"
            yield _object(line, f"{path}, line {number}")


def _object(text: str, where) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotAnExport(f"{where}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise NotAnExport(f"{where}: not a JSON object")
    return value


class _Ids:
    """Old id -> new id, per table; and where in the export the reading is (a refusal says)."""

    def __init__(self):
        self.maps: dict[str, dict[int, int]] = {}
        self.where = "run.json"

    def put(self, table: str, old: int, new: int) -> None:
        self.maps.setdefault(table, {})[old] = new

    def get(self, table: str, old: int | None) -> int | None:
        if old is None:
            return None
        try:
            return self.maps[table][old]
        except KeyError:
            raise NotAnExport(f"the export names {table} {old}, which it does not hold") from None


def _insert(s: Session, model: type[SQLModel], values: dict, ids: _Ids, table: str) -> SQLModel:
    old = values.pop("id")
    fields = {k: v for k, v in values.items() if k in model.model_fields}
    row = model.model_validate(fields)  # parses the export's times and types
    s.add(row)
    s.flush()
    ids.put(table, old, row.id)
    return row


def _read(s: Session, folder: Path, ids: _Ids) -> int:
    """Insert the export's rows in an order that respects the references; return the run's id."""
    exported, tags, note = _run_json(folder)
    old_run = exported["id"]
    # a fork's parent is not in the export (see _start_mapped)
    run = _insert(s, Run, {**exported, "parent_run_id": None, "fork_phase": None}, ids, "run")

    def own(old_run_id: int | None) -> int | None:
        return run.id if old_run_id == old_run else None

    harnesses, checkpoints = [], []
    for h in _lines(folder, "harnesses.jsonl", ids):  # parents and phase once all have ids
        harnesses.append(h)
        code = _inside(folder, h["file"], ids).read_text(encoding="utf-8")
        values = {**h, "code": code, "run_id": own(h["run_id"])}
        values.update(parent_id=None, parent_ids=None, phase_id=None)
        _insert(s, Harness, values, ids, "harness")
    for c in _lines(folder, "checkpoints.jsonl", ids):  # parent and training job likewise
        checkpoints.append(c)
        values = {**c, "run_id": own(c["run_id"]), "parent_id": None, "training_job_id": None}
        _insert(s, Checkpoint, values, ids, "checkpoint")
    for p in _lines(folder, "phases.jsonl", ids):
        _insert(s, Phase, _mapped(p, ids, run.id), ids, "phase")
    for e in _lines(folder, "evaluations.jsonl", ids):
        _insert(s, Evaluation, _mapped(e, ids, run.id), ids, "evaluation")
    for j in _lines(folder, "training_jobs.jsonl", ids):
        _insert(s, TrainingJob, _mapped(j, ids, run.id), ids, "training_job")
    for i in _lines(folder, "search_iterations.jsonl", ids):
        _insert(s, SearchIteration, _iteration(i, ids, run.id), ids, "search_iteration")
    for m in _lines(folder, "metrics.jsonl", ids):
        _insert(s, Metric, _mapped(m, ids, run.id), ids, "metric")
    for e in _lines(folder, "events.jsonl", ids):
        _insert(s, Event, {**e, "run_id": run.id}, ids, "event")
    for r in _lines(folder, "rollouts.jsonl", ids):
        _rollout(s, r, ids, run.id)

    ids.where = "harnesses.jsonl"
    for h in harnesses:
        row = s.get(Harness, ids.get("harness", h["id"]))
        row.parent_id = ids.get("harness", h["parent_id"])
        row.parent_ids = [ids.get("harness", p) for p in h["parent_ids"] or []] or None
        row.phase_id = (
            ids.get("phase", h["phase_id"]) if h["phase_id"] in _known(ids, "phase") else None
        )
    ids.where = "checkpoints.jsonl"
    for c in checkpoints:
        row = s.get(Checkpoint, ids.get("checkpoint", c["id"]))
        row.parent_id = ids.get("checkpoint", c["parent_id"])
        job = c["training_job_id"]
        row.training_job_id = (
            ids.get("training_job", job) if job in _known(ids, "training_job") else None
        )
    run.config = _start_mapped(run, ids)
    if run.status in LIVE_STATUSES:  # `whale serve` would try to go on with it, here
        close_open_work(s, run.id, "stopped", UNFINISHED)
        run.status, run.desired, run.finished_at = "stopped", "stopped", run.finished_at or now()
    s.add_all(RunTag(run_id=run.id, tag=tag) for tag in tags)
    if note:
        s.add(RunNote(run_id=run.id, text=note))
    return run.id


def _run_json(folder: Path) -> tuple[dict, list[str], str | None]:
    """The run's row as exported, and the tags and note people wrote on it."""
    exported = _object((folder / "run.json").read_text(encoding="utf-8"), folder / "run.json")
    tags = _names(exported.pop("tags", []), "tags")
    return exported, tags, _note(exported.pop("note", None))


def _inside(folder: Path, file: str, ids: _Ids) -> Path:
    """A harness's file of the export: one inside its folder, links followed (an export that
    names a file of this machine, "/etc/passwd" or "../../x", brings no code of it)."""
    path = (folder / file).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise NotAnExport(f"{folder / ids.where}: file {file!r} is outside the export folder")
    return path


def _names(values, what: str) -> list[str]:
    """Tags or labels as typed ones are kept (app/annotations.py), or AnnotationError."""
    if not isinstance(values, list):
        raise TypeError(f"{what}: a list expected, got {values!r}")
    return clean_names(values, what)


def _note(text: str | None) -> str | None:
    return None if text is None else clean_note(text)


def _start_mapped(run: Run, ids: _Ids) -> dict:
    """The run's config with its start's harness and checkpoint under their new ids. A fork's
    parent stays in the store it was exported from: the link becomes a record of where the
    run came from ("forked_in_export"), which `whale check` does not follow."""
    if not run.config:  # kept as exported, None included
        return run.config
    config = dict(run.config)
    start = dict(config.get("start") or {})
    for key, table in (("harness_id", "harness"), ("checkpoint_id", "checkpoint")):
        if start.get(key) is not None:  # an export of an older version may not carry it
            start[key] = _known(ids, table).get(start[key])
    if start:
        config["start"] = start
    if "fork" in config:
        config["forked_in_export"] = config.pop("fork")
    return config


def _known(ids: _Ids, table: str) -> dict[int, int]:
    """A harness or checkpoint of another run may name that run's phase or job: not exported."""
    return ids.maps.get(table, {})


REFERENCES = {  # column -> the table its ids are of
    "harness_id": "harness",
    "harness_in_id": "harness",
    "harness_out_id": "harness",
    "checkpoint_id": "checkpoint",
    "checkpoint_in_id": "checkpoint",
    "checkpoint_out_id": "checkpoint",
    "phase_id": "phase",
    "evaluation_id": "evaluation",
    "training_job_id": "training_job",
    "best_harness_id": "harness",
    "accepted_harness_id": "harness",
}


def _mapped(values: dict, ids: _Ids, run_id: int) -> dict:
    out = {**values, "run_id": run_id}
    for column, table in REFERENCES.items():
        if column in out:
            out[column] = ids.get(table, out[column])
    return out


def _iteration(values: dict, ids: _Ids, run_id: int) -> dict:
    out = _mapped(values, ids, run_id)
    out["frontier"] = [
        {**p, "harness_id": ids.get("harness", p["harness_id"])} for p in values["frontier"] or []
    ] or values["frontier"]
    if values["gate"] is not None:
        out["gate"] = {str(ids.get("harness", int(h))): g for h, g in values["gate"].items()}
    return out


def _rollout(s: Session, values: dict, ids: _Ids, run_id: int) -> None:
    steps = values.pop("steps", [])
    labels, note = _names(values.pop("labels", []), "labels"), _note(values.pop("note", None))
    rollout = _insert(s, Rollout, _mapped(values, ids, run_id), ids, "rollout")
    previous: list = []  # a model step is stored against the one before (app/db/steps.py)
    for step in steps:
        request = step.get("request")
        if step.get("kind") == "model" and isinstance(request, dict):
            stored = compact(previous, request)
            if isinstance(request.get("messages"), list):
                previous = request["messages"]
            request = stored
        step = {**step, "rollout_id": rollout.id, "request": request}
        step.pop("id", None)
        s.add(Step.model_validate({k: v for k, v in step.items() if k in Step.model_fields}))
    s.add_all(RolloutLabel(rollout_id=rollout.id, label=label) for label in labels)
    if note:
        s.add(RolloutNote(rollout_id=rollout.id, text=note))


async def import_run(writer: Writer, folder: Path) -> int:
    """Read the export in `folder` into the store as a new run, in one transaction; return its
    id. Raises NotAnExport naming what is wrong with the folder (nothing is written then)."""
    if not (folder / "run.json").is_file():
        raise NotAnExport(f"{folder}: no run.json; is it a folder `whale export` wrote?")
    ids = _Ids()
    try:
        return await writer.run(lambda s: _read(s, folder, ids))
    except NotAnExport:
        raise
    except MALFORMED as exc:
        raise NotAnExport(" ".join(f"{folder / ids.where}: {_why(exc)}".split())) from None


def _why(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r}"
    if isinstance(exc, ValidationError):
        return describe(exc)
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror}: {exc.filename}"
    return str(exc)
