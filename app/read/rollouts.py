"""Rollouts: the filtered list, status counts, and one rollout with its trace (its steps in order,
or a window of them when the trace is long).

The list pages by id (`after` / `before`), never by OFFSET: every filter walks an index that keeps
id order (app/db/migrations.py, 005) and stops after one page, so the 20,000th page costs what the
first does at a million rollouts. The text search cannot use an index; it reads a bounded number
of rows per page and says where it stopped (docs/benchmarks.md has the figures).
"""

from typing import Annotated, Any

from fastapi import HTTPException, Query
from sqlalchemy import func, or_
from sqlmodel import Session, col, select

from app.db.schema import Checkpoint, Evaluation, Harness, Phase, Rollout, Run, Step
from app.db.steps import expand_requests, expand_steps
from app.read.annotations import rollout_annotations
from app.read.common import (
    FAILED_STATUSES,
    ROLLOUT_STATUSES,
    NotFound,
    as_dict,
    phase_ref,
    utc,
)
from app.read.rollout_filters import (
    MAX_ID,
    RolloutFilters,
    conditions,
    resolve_names,
    scope,
    text_condition,
)

PAGE_SIZE = 50
# Rows of the filtered list one page of a text search reads at most. A LIKE over every row of a
# million takes ~0.4 s; 20,000 rows take ~5-15 ms. (An FTS5 trigram index was measured instead:
# +27% database size and a write on every rollout update, and a common word under a run and
# status filter still took ~80 ms; see docs/benchmarks.md.)
SEARCH_ROWS = 20_000
# A long trace shows its first and last steps and links to the rest, a window at a time.
TRACE_HEAD = 20
TRACE_TAIL = 5
ACCOUNT_LINES = 40  # of what the harness printed, shown beside its answer
STEPS_PER_VIEW = 200

StepsQuery = Annotated[
    str | None,
    Query(
        pattern=r"^\d{1,9}-\d{1,9}$",
        description=f"only the steps a-b (indexes, inclusive; at most {STEPS_PER_VIEW})",
    ),
]

# The list leaves out the large columns (stdout/stderr tails, error tracebacks): the trace page
# shows them.
LIST_COLUMNS = [
    Rollout.id,
    Rollout.run_id,
    Rollout.evaluation_id,
    Rollout.harness_id,
    Rollout.checkpoint_id,
    Rollout.task_id,
    Rollout.sample,
    Rollout.task,
    Rollout.gold,
    Rollout.status,
    Rollout.reason,
    Rollout.answer,
    Rollout.reward,
    Rollout.turns,
    Rollout.prompt_tokens,
    Rollout.completion_tokens,
    Rollout.wall_s,
    Rollout.harness_s,
    Rollout.model_wait_s,
    Rollout.created_at,
    Rollout.started_at,
    Rollout.finished_at,
]
# The counts a list or run page shows: a pending rollout counted as running (in a sandbox) or
# queued (waiting for one), then the finished statuses.
COUNTED_STATUSES = ("running", "queued", *(s for s in ROLLOUT_STATUSES if s != "pending"))


def question_of(task: dict | None) -> str | None:
    """The task's question, or the first text field for domains that name it differently."""
    if not task:
        return None
    if isinstance(task.get("question"), str):
        return task["question"]
    return next((v for v in task.values() if isinstance(v, str)), None)


def list_item(row) -> dict[str, Any]:
    item = dict(row._mapping)
    item["created_at"] = utc(item["created_at"])
    item["started_at"] = utc(item["started_at"])
    item["finished_at"] = utc(item["finished_at"])
    item["state"] = pending_state(item["status"], item["started_at"])
    item["question"] = question_of(item["task"])
    item["tokens"] = item["prompt_tokens"] + item["completion_tokens"]
    return item


def pending_state(status: str, started_at) -> str:
    """The status a person reads: a pending rollout is running or queued."""
    if status != "pending":
        return status
    return "queued" if started_at is None else "running"


def with_pairs(s: Session, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items with the name of their harness and checkpoint and the split of their
    evaluation: what a row needs to say which pair it ran under. A page's few ids are looked up
    in the small tables, so the list's query stays a walk over one rollout index."""
    if not items:
        return items

    def names(*columns, ids):
        return dict(s.exec(select(*columns).where(col(columns[0]).in_(ids))).all())

    harnesses = names(Harness.id, Harness.name, ids={i["harness_id"] for i in items})
    checkpoints = names(Checkpoint.id, Checkpoint.name, ids={i["checkpoint_id"] for i in items})
    splits = names(Evaluation.id, Evaluation.split, ids={i["evaluation_id"] for i in items})
    for item in items:
        item["harness_name"] = harnesses.get(item["harness_id"])
        item["checkpoint_name"] = checkpoints.get(item["checkpoint_id"])
        item["split"] = splits.get(item["evaluation_id"])
    return items


def with_annotations(s: Session, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items with the labels and note people gave each (`labels`, `note`)."""
    annotations = rollout_annotations(s, [item["id"] for item in items])
    for item in items:
        item.update(annotations[item["id"]])
    return items


def items_by_id(s: Session, ids: list[int]) -> dict[int, dict[str, Any]]:
    """List items of the rollouts `ids` (what a table row of them shows), by id."""
    if not ids:
        return {}
    rows = s.exec(select(*LIST_COLUMNS).where(col(Rollout.id).in_(set(ids)))).all()
    return {row.id: list_item(row) for row in rows}


def status_counts(
    s: Session,
    run_id: int | None = None,
    evaluation_id: int | None = None,
    harness_id: int | None = None,
    checkpoint_id: int | None = None,
    phase_id: int | None = None,
) -> dict[str, int]:
    """Rollouts per status (every one of COUNTED_STATUSES, zeros included), counted by the
    database; the pending ones as running and queued."""
    scope = []
    narrower = any(v is not None for v in (evaluation_id, harness_id, checkpoint_id, phase_id))
    if run_id is not None and narrower:
        # the run as a condition only: the database then walks the index of what is named
        # (a harness's rollouts), not every rollout of the run (~5x faster at 125k per run)
        scope.append(Rollout.run_id + 0 == run_id)
    for value, column in (
        (None if narrower else run_id, Rollout.run_id),
        (evaluation_id, Rollout.evaluation_id),
        (harness_id, Rollout.harness_id),
        (checkpoint_id, Rollout.checkpoint_id),
    ):
        if value is not None:
            scope.append(column == value)
    if phase_id is not None:
        in_phase = select(Evaluation.id).where(Evaluation.phase_id == phase_id)
        scope.append(col(Rollout.evaluation_id).in_(in_phase))
    query = select(Rollout.status, func.count()).where(*scope).group_by(Rollout.status)
    found = dict(s.exec(query).all())
    pending = found.pop("pending", 0)
    running = 0
    if pending:
        running = s.exec(
            select(func.count()).where(
                *scope, Rollout.status == "pending", col(Rollout.started_at).is_not(None)
            )
        ).one()
    counts = dict.fromkeys(COUNTED_STATUSES, 0)
    counts.update(found, running=running, queued=pending - running)
    return counts


def recent_failures(s: Session, run_id: int, limit: int = 10) -> list[dict[str, Any]]:
    """The run's newest failed rollouts (fail, error, timeout), newest first.

    One query per status walks the (run_id, status, id) index backwards and stops after
    `limit` rows; a single `status IN (...)` query would sort every failure of the run.
    """
    found = []
    for status in FAILED_STATUSES:
        query = (
            select(*LIST_COLUMNS)
            .where(Rollout.run_id == run_id, Rollout.status == status)
            .order_by(col(Rollout.id).desc())
            .limit(limit)
        )
        found += [list_item(row) for row in s.exec(query)]
    return with_pairs(s, sorted(found, key=lambda r: r["id"], reverse=True)[:limit])


def _walk(
    s: Session,
    columns: list,
    terms: list,
    after: int | None,
    before: int | None,
    limit: int,
    offset: int = 0,
) -> list:
    """Up to `limit` rows matching `terms` on one side of the cursor, nearest first."""
    query = select(*columns).where(*terms)
    if before is not None:
        query = query.where(Rollout.id < before).order_by(col(Rollout.id).desc())
    else:
        query = query.where(Rollout.id > (after or 0)).order_by(Rollout.id)
    return s.exec(query.offset(offset).limit(limit)).all()


def _exists(s: Session, terms: list) -> bool:
    return s.exec(select(Rollout.id).where(*terms).limit(1)).first() is not None


def list_rollouts(s: Session, **filters: Any) -> dict[str, Any]:
    """One page of rollouts in id order (tasks in order, samples together), filtered; the
    keyword arguments are those of RolloutFilters (a harness, checkpoint or phase may be named)."""
    f = resolve_names(s, RolloutFilters(**filters))
    context = scope(s, f)
    terms = conditions(f)
    backward = f.before is not None
    search, edge = None, None
    page_terms = terms
    if f.q is not None:
        # The id where this page's search stops: SEARCH_ROWS filtered rows from the cursor
        # (None: fewer are left, the search reaches the end).
        [edge] = _walk(s, [Rollout.id], terms, f.after, f.before, 1, SEARCH_ROWS - 1) or [None]
        page_terms = [*terms, text_condition(f.q)]
        if edge is not None:
            page_terms.append(Rollout.id >= edge if backward else Rollout.id <= edge)
    rows = _walk(s, LIST_COLUMNS, page_terms, f.after, f.before, PAGE_SIZE + 1)
    more = len(rows) > PAGE_SIZE  # more matches beyond this page, in the walking direction
    rows = rows[:PAGE_SIZE][:: -1 if backward else 1]
    items = with_annotations(s, with_pairs(s, [list_item(row) for row in rows]))
    cut = edge is not None and not more  # the page is short because the search stopped
    if f.q is not None:
        search = {
            "q": f.q,
            "rows_limit": SEARCH_ROWS,
            "complete": not cut,
            "stopped_at": edge if cut else None,
        }

    # The cursors of the neighbouring pages. Ahead (the walking direction): past the last row
    # shown, or past where the search stopped. Behind: only if the filters match a row there.
    ahead = None
    if more:
        ahead = items[0]["id"] if backward else items[-1]["id"]
    elif cut:
        ahead = edge
    if backward:
        prev_before = ahead
        next_after = None
        if _exists(s, [*terms, Rollout.id >= f.before]):
            next_after = items[-1]["id"] if items else f.before - 1
    else:
        next_after = ahead
        prev_before = None
        if f.after is not None and _exists(s, [*terms, Rollout.id <= f.after]):
            prev_before = items[0]["id"] if items else min(f.after + 1, MAX_ID)

    counts = None
    scoped = (f.run, f.evaluation, f.phase, f.harness, f.checkpoint)
    if any(v is not None for v in scoped) and all(v is None for v in (f.task, f.q, f.label)):
        # Counted from an index of what is named (the run's (run_id, status), an evaluation's,
        # a harness's or checkpoint's (id, task, status)), reading the rollouts named and no
        # others. Over the whole table a count reads every rollout, and a task, a label or a
        # text search has no such index (~60 ms for 125k rollouts): no counts then.
        counts = status_counts(
            s,
            run_id=f.run,
            evaluation_id=f.evaluation,
            harness_id=f.harness,
            checkpoint_id=f.checkpoint,
            phase_id=f.phase,
        )
    return {
        "items": items,
        "page_size": PAGE_SIZE,
        "filters": f.model_dump(),
        "next_after": next_after,
        "prev_before": prev_before,
        "has_more": next_after is not None,
        "search": search,
        "status_counts": counts,
        **context,
    }


def parse_steps(steps: str) -> tuple[int, int]:
    """ "20-69" -> (20, 69): the step indexes (inclusive) one view of a long trace shows."""
    first, last = (int(part) for part in steps.split("-"))
    if last < first:
        raise HTTPException(422, f"steps: {steps} ends before it starts")
    if last - first + 1 > STEPS_PER_VIEW:
        raise HTTPException(422, f"steps: at most {STEPS_PER_VIEW} steps at a time")
    return first, last


def get_rollout(
    s: Session, rollout_id: int, steps: str | None = None, whole: bool = False
) -> dict[str, Any]:
    """One rollout with what its trace page shows: names around it and its steps in order.

    A long trace gives its first and last steps; `steps="a-b"` only those; `whole=True` (the
    download) every step. `shown` lists the index ranges returned (None: all), and
    `model_step_before` the model call before each range (a window folds what it repeats).
    """
    rollout = s.get(Rollout, rollout_id)
    if rollout is None:
        raise NotFound("rollout", rollout_id)
    run = s.get(Run, rollout.run_id)
    harness = s.get(Harness, rollout.harness_id)
    checkpoint = s.get(Checkpoint, rollout.checkpoint_id)
    evaluation = s.get(Evaluation, rollout.evaluation_id)
    first, last, n_steps = s.exec(
        select(func.min(Step.idx), func.max(Step.idx), func.count()).where(
            Step.rollout_id == rollout_id
        )
    ).one()
    shown = None
    if steps is not None:
        shown = [parse_steps(steps)]
    elif not whole and n_steps > TRACE_HEAD + TRACE_TAIL + 5:  # hide at least a few, or none
        shown = [(first, first + TRACE_HEAD - 1), (last - TRACE_TAIL + 1, last)]
    query = select(Step).where(Step.rollout_id == rollout_id)
    if shown is not None:
        query = query.where(or_(*(col(Step.idx).between(a, b) for a, b in shown)))
    loaded = s.exec(query.order_by(Step.idx)).all()
    return {
        "rollout": {
            **as_dict(rollout),
            "question": question_of(rollout.task),
            "tokens": rollout.prompt_tokens + rollout.completion_tokens,
            "state": pending_state(rollout.status, rollout.started_at),
        },
        "run": {"id": run.id, "name": run.name, "domain": run.domain, "status": run.status},
        "harness": {"id": harness.id, "name": harness.name, "sha": harness.sha},
        "checkpoint": {"id": checkpoint.id, "name": checkpoint.name, "kind": checkpoint.kind},
        "evaluation": {
            "id": evaluation.id,
            "split": evaluation.split,
            "k": evaluation.k,
            "phase_id": evaluation.phase_id,
            "phase": phase_ref(s.get(Phase, evaluation.phase_id) if evaluation.phase_id else None),
            # what every call of the rollout was sent whatever its harness set ([sampling]
            # fixed, [rft] temperature); a step whose harness asked otherwise says so
            "forced": (evaluation.generation or {}).get("forced") or {},
        },
        "n_steps": n_steps,
        "first_step": first,
        "last_step": last,
        "shown": shown,
        "model_step_before": [
            model_step_before(s, rollout_id, a) if a > first else None for a, _ in shown or []
        ],
        "steps": _whole(s, rollout_id, [as_dict(step) for step in loaded], all_steps=shown is None),
        "account": harness_account(s, rollout),
        "annotations": rollout_annotations(s, [rollout_id])[rollout_id],
    }


def harness_account(s: Session, rollout: Rollout) -> dict[str, Any]:
    """How the harness got its answer from the model's output, as far as the rollout says: the
    lines it printed (its log, its parse; the last ACCOUNT_LINES of stdout then stderr; empty:
    it gave no account) and the model calls whose completion holds the answer as written (none:
    the harness made it from them, e.g. by evaluating an expression the model wrote)."""
    printed = [
        line
        for tail in (rollout.stdout_tail, rollout.stderr_tail)
        for line in (tail or "").splitlines()
        if line.strip()
    ]
    responses = s.exec(
        select(Step.idx, Step.response)
        .where(Step.rollout_id == rollout.id, Step.kind == "model")
        .order_by(Step.idx)
    ).all()
    answer = (rollout.answer or "").strip()
    holding = [
        idx
        for idx, response in responses
        if answer and answer in str(((response or {}).get("message") or {}).get("content") or "")
    ]
    return {
        "printed": printed[-ACCOUNT_LINES:],
        "n_printed": len(printed),
        "model_calls": len(responses),
        "answer_in_steps": holding,
    }


def _whole(s: Session, rollout_id: int, steps: list[dict], all_steps: bool) -> list[dict]:
    """The steps with whole model requests. Each step stores what its call added to the one
    before (app/db/steps.py): a window of a trace needs the model steps before it."""
    if all_steps or not steps:
        return expand_steps(steps)
    rows = s.exec(
        select(Step.idx, Step.request)
        .where(Step.rollout_id == rollout_id, Step.kind == "model", Step.idx <= steps[-1]["idx"])
        .order_by(Step.idx)
    ).all()
    whole = dict(zip((idx for idx, _ in rows), expand_requests(request for _, request in rows)))
    for step in steps:
        if step["kind"] == "model":
            step["request"] = whole.get(step["idx"], step["request"])
    return steps


def model_step_before(s: Session, rollout_id: int, idx: int) -> dict[str, Any] | None:
    """The last model call before step `idx`: a window of a trace folds what it already said."""
    step = s.exec(
        select(Step)
        .where(Step.rollout_id == rollout_id, Step.idx < idx, Step.kind == "model")
        .order_by(col(Step.idx).desc())
        .limit(1)
    ).first()
    return None if step is None else _whole(s, rollout_id, [as_dict(step)], all_steps=False)[0]
