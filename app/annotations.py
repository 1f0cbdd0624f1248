"""What people write on runs and rollouts: a run's tags and note, a rollout's labels and note.

These are a user's annotations, not the loop's records: they live in their own tables
(migration 015) and are written only here, through the store's writer. The text is the user's
own and untrusted: it is checked (lengths, no control characters) before anything is written,
a refusal says what is wrong and changes nothing, and pages show it escaped.
"""

import unicodedata
from collections.abc import Iterable

from sqlmodel import Session, delete

from app.db.schema import Rollout, RolloutLabel, RolloutNote, Run, RunNote, RunTag, now
from app.db.writer import Writer
from app.read.common import NotFound

MAX_TAG_CHARS = 40  # a tag or label names a kind of thing ("retrieval miss"): a few words
MAX_TAGS = 20  # per run, and labels per rollout
MAX_NOTE_CHARS = 5000  # a few paragraphs


class AnnotationError(ValueError):
    """User text the store will not keep; the message says why (a 422)."""


class NotLabellable(Exception):
    """A rollout that has not finished: a queued one may still be dropped (a 409)."""


def _control(text: str, allowed: str = "") -> str | None:
    return next((c for c in text if unicodedata.category(c) == "Cc" and c not in allowed), None)


def clean_names(values: Iterable[str], what: str) -> list[str]:
    """Tags or labels as kept: whitespace trimmed and collapsed, empty ones and repeats dropped
    (first spelling kept), each at most MAX_TAG_CHARS, at most MAX_TAGS, no commas (the forms
    split on them) and no control characters."""
    names: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise AnnotationError(f"{what}: each one is text, got {value!r}")
        name = " ".join(value.split())
        if not name or name in names:
            continue
        bad = _control(name)
        if bad is not None:
            raise AnnotationError(f"{what}: control characters are not allowed (U+{ord(bad):04X})")
        if "," in name:
            raise AnnotationError(f"{what}: {name[:60]!r} has a comma: commas separate them")
        if len(name) > MAX_TAG_CHARS:
            raise AnnotationError(
                f"{what}: {name[:60]!r} is {len(name)} characters; at most {MAX_TAG_CHARS}"
            )
        names.append(name)
    if len(names) > MAX_TAGS:
        raise AnnotationError(f"{what}: {len(names)} given; at most {MAX_TAGS}")
    return names


def split_names(text: str) -> list[str]:
    """A form's comma-separated field as a list."""
    return text.split(",")


def clean_note(text: str) -> str:
    """A note as kept: line ends made \\n, trailing blank space trimmed; at most MAX_NOTE_CHARS;
    no control characters but newlines and tabs. An empty note is no note."""
    if not isinstance(text, str):
        raise AnnotationError(f"note: text expected, got {text!r}")
    note = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    bad = _control(note, "\n\t")
    if bad is not None:
        raise AnnotationError(f"note: control characters are not allowed (U+{ord(bad):04X})")
    if len(note) > MAX_NOTE_CHARS:
        raise AnnotationError(f"note: {len(note):,} characters; at most {MAX_NOTE_CHARS:,}")
    return note


def _replace(s: Session, table, key: str, owner: int, column: str, values: list[str]) -> None:
    s.exec(delete(table).where(getattr(table, key) == owner))
    s.add_all(table(**{key: owner, column: value}) for value in values)


def _set_note(s: Session, table, key: str, owner: int, note: str) -> None:
    row = s.get(table, owner)
    if not note:
        if row is not None:
            s.delete(row)
    elif row is None:
        s.add(table(**{key: owner, "text": note}))
    else:
        row.text, row.updated_at = note, now()


async def annotate_run(
    writer: Writer, run_id: int, tags: list[str] | None = None, note: str | None = None
) -> None:
    """Replace the run's tags and/or note (None: leave as is). Raises AnnotationError for bad
    text and NotFound for an unknown run, before anything is written."""
    tags = None if tags is None else clean_names(tags, "tags")
    note = None if note is None else clean_note(note)

    def write(s: Session) -> None:
        if s.get(Run, run_id) is None:
            raise NotFound("run", run_id)
        if tags is not None:
            _replace(s, RunTag, "run_id", run_id, "tag", tags)
        if note is not None:
            _set_note(s, RunNote, "run_id", run_id, note)

    await writer.run(write)


async def annotate_rollout(
    writer: Writer, rollout_id: int, labels: list[str] | None = None, note: str | None = None
) -> None:
    """Replace the rollout's labels and/or note (None: leave as is). A rollout still pending is
    refused (NotLabellable): a stopped run drops the rollouts it never started."""
    labels = None if labels is None else clean_names(labels, "labels")
    note = None if note is None else clean_note(note)

    def write(s: Session) -> None:
        rollout = s.get(Rollout, rollout_id)
        if rollout is None:
            raise NotFound("rollout", rollout_id)
        if rollout.status == "pending":
            raise NotLabellable(
                f"rollout {rollout_id} has not finished: it can be labelled once it has"
            )
        if labels is not None:
            _replace(s, RolloutLabel, "rollout_id", rollout_id, "label", labels)
        if note is not None:
            _set_note(s, RolloutNote, "rollout_id", rollout_id, note)

    await writer.run(write)
