"""What people wrote on runs and rollouts (app/annotations.py writes it): a run's tags and note,
a rollout's labels and note, as the runs list, the trace pages and the harness page show them,
and the conditions the filters and the text search add."""

from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from app.db.schema import Rollout, RolloutLabel, RolloutNote, RunNote, RunTag

NOTE_LINE_CHARS = 120  # of a note's first line, in a list's row


def note_line(note: str | None) -> str | None:
    """A note's first line that says something, cut to NOTE_LINE_CHARS: a list row's summary."""
    line = next((line.strip() for line in (note or "").splitlines() if line.strip()), None)
    if line is None or len(line) <= NOTE_LINE_CHARS:
        return line
    return line[: NOTE_LINE_CHARS - 1] + "\u2026"


def _annotations(s: Session, ids: list[int], names, owner, note_owner, key: str) -> dict:
    """Per owner id: its names (`names`, a tag or label column, in the order given) under
    `key`, and its note; every id has an entry."""
    found: dict[int, dict[str, Any]] = {i: {key: [], "note": None} for i in ids}
    if not ids:
        return found
    table = names.class_
    query = select(owner, names).where(col(owner).in_(ids)).order_by(table.created_at, names)
    for i, name in s.exec(query):
        found[i][key].append(name)
    notes = note_owner.class_
    for i, text in s.exec(select(note_owner, notes.text).where(col(note_owner).in_(ids))):
        found[i]["note"] = text
    return found


def run_annotations(s: Session, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Each run's tags (in the order given) and note, by run id; every id has an entry."""
    return _annotations(s, run_ids, RunTag.tag, RunTag.run_id, RunNote.run_id, "tags")


def tags_in_use(s: Session) -> list[dict[str, Any]]:
    """Every tag with how many runs carry it, by name: the runs list's filter."""
    query = select(RunTag.tag, func.count()).group_by(RunTag.tag).order_by(RunTag.tag)
    return [{"tag": tag, "runs": n} for tag, n in s.exec(query)]


def runs_tagged(tag: str):
    """The ids of the runs that carry `tag` (a subquery)."""
    return select(RunTag.run_id).where(RunTag.tag == tag)


def rollout_annotations(s: Session, rollout_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Each rollout's labels (in the order given) and note, by rollout id; every id has one."""
    return _annotations(
        s,
        rollout_ids,
        RolloutLabel.label,
        RolloutLabel.rollout_id,
        RolloutNote.rollout_id,
        "labels",
    )


def label_counts(
    s: Session, harness_id: int | None = None, run_id: int | None = None
) -> list[dict[str, Any]]:
    """Labelled rollouts per label (most first), of one harness or one run, or all: the harness
    page's counts, the filter's choices. Read from the labels, which are few, joined to their
    rollouts by primary key."""
    query = select(RolloutLabel.label, func.count()).join(
        Rollout, Rollout.id == RolloutLabel.rollout_id
    )
    if harness_id is not None:
        query = query.where(Rollout.harness_id == harness_id)
    if run_id is not None:
        query = query.where(Rollout.run_id == run_id)
    query = query.group_by(RolloutLabel.label).order_by(func.count().desc(), RolloutLabel.label)
    return [{"label": label, "rollouts": n} for label, n in s.exec(query)]


def labelled(label: str):
    """The condition: the rollout carries `label`."""
    return col(Rollout.id).in_(select(RolloutLabel.rollout_id).where(RolloutLabel.label == label))


def annotated_with(q: str):
    """The condition: one of the rollout's labels or its note holds `q` (case-insensitive for
    ASCII, as the rest of the text search)."""
    by_label = select(RolloutLabel.rollout_id).where(
        col(RolloutLabel.label).contains(q, autoescape=True)
    )
    by_note = select(RolloutNote.rollout_id).where(
        col(RolloutNote.text).contains(q, autoescape=True)
    )
    return col(Rollout.id).in_(by_label) | col(Rollout.id).in_(by_note)
