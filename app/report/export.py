"""A run as plain files: one JSON object per line per table, and each harness as its .py file,
to archive, diff or analyse without the workbench. What people wrote goes with what it is about:
the run's tags and note in run.json, each rollout's labels and note on its line.

Harnesses and checkpoints come with their whole lineage: a run may start from rows outside it
(the shared base checkpoint, a harness of an earlier run).
"""

import json
import re
import shutil
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from sqlmodel import Session, SQLModel, select

from app.db.schema import (
    Checkpoint,
    Evaluation,
    Event,
    Harness,
    Metric,
    Phase,
    Rollout,
    SearchIteration,
    TrainingJob,
)
from app.db.steps import load_steps
from app.read.annotations import rollout_annotations, run_annotations
from app.read.runs import get_runs

ROLLOUT_BATCH = 500  # rollouts (with their steps) held in memory at once


def row_dict(row: SQLModel, exclude: set[str] | None = None) -> dict:
    """The row's columns as JSON values, in the order the schema declares them."""
    values = row.model_dump(mode="json", exclude=exclude)
    return {name: values[name] for name in type(row).model_fields if name in values}


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def with_ancestors(
    session: Session, model: type[SQLModel], ids: set, parents: Callable[[SQLModel], list]
) -> list:
    """The rows with these ids and all their ancestors, in id order."""
    rows: dict[int, SQLModel] = {}
    todo = ids - {None}
    while todo:
        found = session.exec(select(model).where(model.id.in_(todo))).all()
        rows.update((row.id, row) for row in found)
        todo = {p for row in found for p in parents(row)} - rows.keys() - {None}
    return [rows[i] for i in sorted(rows)]


def harness_file(harness: Harness) -> str:
    name = re.sub(r"[^\w.-]+", "_", harness.name).strip("._") or "harness"
    return f"harnesses/{harness.id}-{name}" + ("" if name.endswith(".py") else ".py")


def rollouts_with_steps(
    session: Session, run_id: int, batch: int = ROLLOUT_BATCH
) -> Iterator[dict]:
    """The run's rollouts in id order, each with its steps in order; read a batch at a time
    (keyset pagination on the id), so memory stays flat however many rollouts the run has."""
    last_id = 0
    while True:
        rollouts = session.exec(
            select(Rollout)
            .where(Rollout.run_id == run_id, Rollout.id > last_id)
            .order_by(Rollout.id)
            .limit(batch)
        ).all()
        if not rollouts:
            return
        steps = load_steps(session, [r.id for r in rollouts])
        annotations = rollout_annotations(session, [r.id for r in rollouts])
        for rollout in rollouts:
            yield {
                **row_dict(rollout),
                **annotations[rollout.id],  # labels and note people gave it
                "steps": [
                    {**row_dict(step), "request": request} for step, request in steps[rollout.id]
                ],
            }
        last_id = rollouts[-1].id


def export_run(session: Session, run_id: int, out_dir: Path) -> dict[str, int]:
    """Write the run under out_dir; returns how many rows (or files) each output holds.
    Raises UnknownRuns when the store has no such run."""
    [run] = get_runs(session, [run_id])
    (out_dir / "harnesses").mkdir(parents=True, exist_ok=True)
    annotations = run_annotations(session, [run_id])[run_id]  # tags and note people gave it
    run_json = json.dumps({**row_dict(run), **annotations}, indent=2, ensure_ascii=False)
    (out_dir / "run.json").write_text(run_json, encoding="utf-8")

    def of_run(model):
        return session.exec(select(model).where(model.run_id == run_id).order_by(model.id)).all()

    evaluations, phases, jobs = of_run(Evaluation), of_run(Phase), of_run(TrainingJob)
    harness_ids = set(session.exec(select(Harness.id).where(Harness.run_id == run_id)))
    harness_ids |= {e.harness_id for e in evaluations} | {j.harness_id for j in jobs}
    harness_ids |= {h for p in phases for h in (p.harness_in_id, p.harness_out_id)}
    start = (run.config or {}).get("start") or {}  # a fork's: its parent's, at the fork point
    harness_ids.add(start.get("harness_id"))
    harnesses = with_ancestors(
        session, Harness, harness_ids, lambda h: [h.parent_id, *(h.parent_ids or [])]
    )
    checkpoint_ids = set(session.exec(select(Checkpoint.id).where(Checkpoint.run_id == run_id)))
    checkpoint_ids |= {e.checkpoint_id for e in evaluations}
    checkpoint_ids |= {c for j in jobs for c in (j.checkpoint_in_id, j.checkpoint_out_id)}
    checkpoint_ids |= {c for p in phases for c in (p.checkpoint_in_id, p.checkpoint_out_id)}
    checkpoint_ids.add(start.get("checkpoint_id"))
    checkpoints = with_ancestors(session, Checkpoint, checkpoint_ids, lambda c: [c.parent_id])

    for harness in harnesses:
        (out_dir / harness_file(harness)).write_text(harness.code, encoding="utf-8")
    jsonl = {  # the code is in the .py files, so harnesses.jsonl names the file instead
        "harnesses.jsonl": (
            {**row_dict(h, exclude={"code"}), "file": harness_file(h)} for h in harnesses
        ),
        "checkpoints.jsonl": map(row_dict, checkpoints),
        "phases.jsonl": map(row_dict, phases),
        "search_iterations.jsonl": map(row_dict, of_run(SearchIteration)),
        "training_jobs.jsonl": map(row_dict, jobs),
        "evaluations.jsonl": map(row_dict, evaluations),
        "metrics.jsonl": map(row_dict, of_run(Metric)),
        "events.jsonl": map(row_dict, of_run(Event)),
        "rollouts.jsonl": rollouts_with_steps(session, run_id),
    }
    counts = {"run.json": 1, "harnesses/": len(harnesses)}
    counts.update((name, write_jsonl(out_dir / name, rows)) for name, rows in jsonl.items())
    return counts


def export_archive(session: Session, run_id: int, folder: Path) -> Path:
    """The run as export_run writes it, packed into folder/whale-export-run-<id>.tar.gz, its
    files under whale-export-run-<id>/ (the folder `whale export` makes by default): the
    download of the run page. Raises UnknownRuns when the store has no such run."""
    name = f"whale-export-run-{run_id}"
    export_run(session, run_id, folder / name)
    archive = folder / f"{name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder / name, arcname=name)
    shutil.rmtree(folder / name)  # the archive holds it; half the disk while it is sent
    return archive
