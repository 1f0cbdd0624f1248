"""The rollout list as a file: every rollout its filters match (not one page), in id order, as
JSON lines or CSV, with the columns of the list's JSON items (the names of the harness and
checkpoint, the split). Rows are read a batch at a time, each batch in a session of its own,
so a download of a million rollouts holds one batch in memory and no read open throughout.
"""

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fastapi.encoders import jsonable_encoder
from sqlmodel import Session, col, select

from app.db.schema import Rollout
from app.read.rollout_filters import RolloutFilters, conditions, text_condition
from app.read.rollouts import LIST_COLUMNS, list_item, with_pairs

BATCH = 1000
# A CSV row: the list's columns, then what list_item and with_pairs add.
CSV_COLUMNS = [c.key for c in LIST_COLUMNS] + [
    "state",
    "question",
    "tokens",
    "harness_name",
    "checkpoint_name",
    "split",
]


def matching_rollouts(
    session: Callable[[], Session], f: RolloutFilters, batch: int = BATCH
) -> Iterator[dict[str, Any]]:
    """Every rollout the filters (names resolved, the cursor ignored) match, as the list's
    items, in id order. `session` opens a read session; each batch gets its own."""
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
            items = with_pairs(s, [list_item(row) for row in rows])
        if not items:
            return
        yield from items
        after = items[-1]["id"]


def as_jsonl(items: Iterable[dict[str, Any]]) -> Iterator[str]:
    for item in items:
        yield json.dumps(jsonable_encoder(item), ensure_ascii=False) + "\n"


def as_csv(items: Iterable[dict[str, Any]]) -> Iterator[str]:
    """A header, then a line per item; a nested value (the task) as its JSON, none as empty."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore")

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    writer.writeheader()
    yield flush()
    for item in items:
        encoded = jsonable_encoder(item)
        writer.writerow({k: _cell(encoded.get(k)) for k in CSV_COLUMNS})
        yield flush()


def _cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else value
