"""The rollout list as a file: every rollout its filters match (not one page), in id order, as
JSON lines or CSV, with the columns of the list's JSON items (the names of the harness and
checkpoint, the split, the labels and note people gave it) and, unless asked not to, each rollout's model and tool calls as the
run export writes them (`steps`, each request whole). Times are written as the export writes
them, in UTC ending in Z. Rows are read a batch at a time, each batch in a session of its own,
so a download of a million rollouts holds one batch in memory and no read open throughout.
"""

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pydantic_core import to_jsonable_python
from sqlmodel import Session, col, select

from app.db.schema import Rollout
from app.db.steps import load_steps
from app.read.common import as_dict
from app.read.rollout_filters import RolloutFilters, conditions, text_condition
from app.read.rollouts import LIST_COLUMNS, list_item, with_annotations, with_pairs

BATCH = 1000
BATCH_WITH_CALLS = 100  # rollouts with their steps: a long trace is many rows
# A CSV row: the list's columns, then what list_item, with_pairs and with_annotations add.
CSV_COLUMNS = [c.key for c in LIST_COLUMNS] + [
    "state",
    "question",
    "tokens",
    "harness_name",
    "checkpoint_name",
    "split",
    "labels",
    "note",
]
CALLS_COLUMN = "steps"  # the calls in a CSV cell: their JSON


def matching_rollouts(
    session: Callable[[], Session], f: RolloutFilters, calls: bool = True, batch: int | None = None
) -> Iterator[dict[str, Any]]:
    """Every rollout the filters (names resolved, the cursor ignored) match, as the list's
    items, in id order, with their calls (`steps`) if `calls`. `session` opens a read
    session; each batch gets its own."""
    batch = batch or (BATCH_WITH_CALLS if calls else BATCH)
    terms = conditions(f)
    if f.q is not None:  # the whole table is searched: a download is no page to keep quick
        terms.append(text_condition(f.q))
    after = 0
    while True:
        with session() as s:
            rows = s.exec(
                select(*LIST_COLUMNS)
                .where(*terms, col(Rollout.id) > after)
                .order_by(Rollout.id)
                .limit(batch)
            ).all()
            items = with_annotations(s, with_pairs(s, [list_item(row) for row in rows]))
            if calls:
                steps = load_steps(s, [item["id"] for item in items])
                for item in items:
                    item[CALLS_COLUMN] = [
                        {**as_dict(step), "request": request} for step, request in steps[item["id"]]
                    ]
        if not items:
            return
        yield from items
        after = items[-1]["id"]


def encoded(item: dict[str, Any]) -> dict[str, Any]:
    """The item as JSON values, times as the export writes them ("2026-01-02T03:04:05Z")."""
    return to_jsonable_python(item)


def as_jsonl(items: Iterable[dict[str, Any]]) -> Iterator[str]:
    for item in items:
        yield json.dumps(encoded(item), ensure_ascii=False) + "\n"


def as_csv(items: Iterable[dict[str, Any]], calls: bool = True) -> Iterator[str]:
    """A header, then a line per item; a nested value (the task, the calls) as its JSON, none
    as empty."""
    buffer = io.StringIO()
    columns = CSV_COLUMNS + ([CALLS_COLUMN] if calls else [])
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    writer.writeheader()
    yield flush()
    for item in items:
        values = encoded(item)
        writer.writerow({k: _cell(values.get(k)) for k in columns})
        yield flush()


def _cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else value
