""" "Fails under A, passes under B": the tasks a change of harness or checkpoint fixed.

A side is a harness, a checkpoint, or both (optionally within one run). A task qualifies when
every finished rollout of it under A failed (or, with `a_fails=most`, more than half did) and at
least one under B passed. Each task links one failing trace under A and one passing trace under
B, and the page that compares the two.

Each side is counted per task from the (harness_id, task_id, status) or (checkpoint_id,
task_id, status) index alone: the cost grows with the rollouts of the two sides, not of the
store.
"""

from dataclasses import asdict
from typing import Any, Literal

from fastapi import HTTPException
from pydantic import Field
from sqlalchemy import case, func
from sqlmodel import Session, select

from app.db.schema import Evaluation, Rollout
from app.read.rollout_filters import FormParams, RolloutFilters, id_param, scope
from app.read.rollouts import items_by_id
from app.stats import paired

MAX_TASKS = 500  # tasks listed; the counts cover all of them


class ContrastQuery(FormParams):
    """Query parameters of /rollouts/contrast and /api/rollouts/contrast."""

    a_harness: int | None = id_param("side A: rollouts under this harness")
    a_checkpoint: int | None = id_param("side A: rollouts under this checkpoint")
    b_harness: int | None = id_param("side B: rollouts under this harness")
    b_checkpoint: int | None = id_param("side B: rollouts under this checkpoint")
    run: int | None = id_param("both sides: only this run's rollouts")
    # a pass rate over train and test tasks together is no figure: the split keeps them apart
    split: Literal["train", "harness", "test"] | None = Field(
        default=None, description="both sides: only rollouts of evaluations on this split"
    )
    a_fails: Literal["all", "most"] = "all"

    def picked(self) -> bool:
        """Whether any side is named: the page shows only its form until one is."""
        return any(
            v is not None
            for v in (self.a_harness, self.a_checkpoint, self.b_harness, self.b_checkpoint)
        )

    def side(self, name: str) -> RolloutFilters:
        return RolloutFilters(
            run=self.run,
            harness=getattr(self, f"{name}_harness"),
            checkpoint=getattr(self, f"{name}_checkpoint"),
        )


def _per_task(side: RolloutFilters, name: str, split: str | None):
    """Finished rollouts per task under one side (on one split, if named): how many, how many
    passed, the first failing and the first passing one."""
    passed = Rollout.status == "pass"
    terms = [
        column == value
        for value, column in (
            (side.run, Rollout.run_id),
            (side.harness, Rollout.harness_id),
            (side.checkpoint, Rollout.checkpoint_id),
        )
        if value is not None
    ]
    query = select(
        Rollout.task_id,
        func.count().label("n"),
        func.sum(case((passed, 1), else_=0)).label("n_pass"),
        func.min(case((passed, None), else_=Rollout.id)).label("failing_id"),
        func.min(case((passed, Rollout.id), else_=None)).label("passing_id"),
    )
    if split is not None:
        query = query.join(Evaluation, Evaluation.id == Rollout.evaluation_id)
        terms.append(Evaluation.split == split)
    return query.where(*terms, Rollout.status != "pending").group_by(Rollout.task_id).subquery(name)


def contrast(s: Session, query: ContrastQuery) -> dict[str, Any]:
    for side in ("a", "b"):
        if (
            getattr(query, f"{side}_harness") is None
            and getattr(query, f"{side}_checkpoint") is None
        ):
            raise HTTPException(
                422,
                f"{side}_harness or {side}_checkpoint: name the harness or "
                f"checkpoint of side {side.upper()}",
            )
    side_a, side_b = query.side("a"), query.side("b")
    names = {"a": scope(s, side_a), "b": scope(s, side_b)}  # an unknown id is a 404
    a, b = _per_task(side_a, "a", query.split), _per_task(side_b, "b", query.split)
    both = s.exec(
        select(
            a.c.task_id,
            a.c.n.label("a_n"),
            a.c.n_pass.label("a_pass"),
            a.c.failing_id,
            b.c.n.label("b_n"),
            b.c.n_pass.label("b_pass"),
            b.c.passing_id,
        ).join(b, a.c.task_id == b.c.task_id)
    ).all()
    if query.a_fails == "all":
        fail_under_a = [r for r in both if r.a_pass == 0]
    else:
        fail_under_a = [r for r in both if 2 * r.a_pass < r.a_n]
    # the tasks with the most failures under A first: the strongest evidence of a fix
    found = sorted(
        (r for r in fail_under_a if r.b_pass > 0), key=lambda r: (r.a_pass - r.a_n, r.task_id)
    )
    shown = found[:MAX_TASKS]
    rollouts = items_by_id(s, [i for r in shown for i in (r.failing_id, r.passing_id)])
    tasks = [
        {
            "task_id": r.task_id,
            "question": rollouts[r.failing_id]["question"],
            "gold": rollouts[r.failing_id]["gold"],
            "a": {"n": r.a_n, "n_pass": r.a_pass, "failing": rollouts[r.failing_id]},
            "b": {"n": r.b_n, "n_pass": r.b_pass, "passing": rollouts[r.passing_id]},
        }
        for r in shown
    ]
    named = ("run", "harness", "checkpoint")
    rate = lambda n_pass, n: n_pass / n  # noqa: E731
    compared = paired(
        {r.task_id: rate(r.a_pass, r.a_n) for r in both},
        {r.task_id: rate(r.b_pass, r.b_n) for r in both},
        *(sum(getattr(r, n) for r in both) / max(len(both), 1) for n in ("a_n", "b_n")),
    )
    return {
        "query": query.model_dump(),
        "a": {k: names["a"][k] for k in named},
        "b": {k: names["b"][k] for k in named},
        "n_tasks_both": len(both),  # tasks with finished rollouts under both sides
        "n_tasks_failing_a": len(fail_under_a),
        "n_tasks": len(found),
        "tasks": tasks,
        "truncated": len(found) > len(shown),
        # B's pass rate minus A's over every task both sides ran, paired task by task
        "paired": {
            "design": f"paired on {compared.n_tasks} tasks both sides ran"
            + (f" ({query.split} split)" if query.split else " (every split)")
            + "; pass rates per task",
            **asdict(compared),
        }
        if compared
        else None,
    }
