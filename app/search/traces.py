"""Rollouts as proposers read them: raw JSON records and flattened text.

Meta-Harness's point is that proposers do better when they can read raw traces, not only
scores. Only non-test splits are ever handed out: the test split stays unseen by proposers.
"""

import json
from collections.abc import Iterator

from sqlmodel import Session, col, select

from app.db.schema import Evaluation, Rollout, Step
from app.db.steps import load_steps

PROPOSER_SPLITS = ("harness", "smoke", "train")  # never "test"


def rollouts_of(
    s: Session,
    harness_id: int,
    checkpoint_id: int | None = None,
    status: tuple[str, ...] | None = None,
    limit: int | None = None,
) -> list[Rollout]:
    query = (
        select(Rollout)
        .join(Evaluation, Evaluation.id == Rollout.evaluation_id)
        .where(
            Rollout.harness_id == harness_id,
            col(Evaluation.split).in_(PROPOSER_SPLITS),
            Rollout.status != "pending",
        )
        .order_by(Rollout.id)
    )
    if checkpoint_id is not None:
        query = query.where(Rollout.checkpoint_id == checkpoint_id)
    if status:
        query = query.where(col(Rollout.status).in_(status))
    return list(s.exec(query.limit(limit)).all())


def record(rollout: Rollout, steps: list[tuple[Step, dict | None]]) -> dict:
    """One rollout with every step, as one JSON-able record (a line of traces.jsonl)."""
    return {
        "rollout_id": rollout.id,
        "task_id": rollout.task_id,
        "sample": rollout.sample,
        "task": rollout.task,
        "gold": rollout.gold,
        "answer": rollout.answer,
        "reward": rollout.reward,
        "status": rollout.status,
        "reason": rollout.reason,
        "error": rollout.error,
        "turns": rollout.turns,
        "checkpoint_id": rollout.checkpoint_id,
        "stdout_tail": rollout.stdout_tail,
        "stderr_tail": rollout.stderr_tail,
        "steps": [
            {
                "idx": st.idx,
                "kind": st.kind,
                "tool": st.tool,
                "request": request,
                "response": st.response,
                "error": st.error,
            }
            for st, request in steps
        ],
    }


def flatten(rec: dict, max_chars: int = 4000) -> str:
    """A trace as plain text: task, every call in order, answer vs gold."""
    lines = [
        f"# rollout {rec['rollout_id']} task {rec['task_id']}: {rec['status']}"
        f" (reward {rec['reward']}, {rec['turns']} model calls)",
        f"task: {json.dumps(rec['task'], ensure_ascii=False)}",
    ]
    seen = 0  # messages already shown: a multi-turn harness resends the conversation
    for step in rec["steps"]:
        request, response = step["request"] or {}, step["response"] or {}
        if step["kind"] == "model":
            messages = request.get("messages") or []
            for m in messages[seen:]:
                lines.append(f"[{m.get('role')}] {m.get('content')}")
            seen = len(messages) + 1
            message = response.get("message") or {}
            lines.append(f"[assistant -> step {step['idx']}] {message.get('content')}")
        else:
            lines.append(f"[tool {step['tool']}] {request} -> {response.get('result')}")
        if step["error"]:
            lines.append(f"[refused] {step['error']}")
    if rec["error"]:
        lines.append(f"[harness error: {rec['reason']}] {rec['error'][-800:]}")
    lines.append(f"answer: {rec['answer']!r}   gold: {rec['gold']!r}")
    text = "\n".join(lines)
    return (
        text
        if len(text) <= max_chars
        else text[: max_chars // 2] + "\n[...]\n" + text[-max_chars // 2 :]
    )


def examples(
    s: Session, harness_id: int, checkpoint_id: int, n_fail: int, n_pass: int
) -> Iterator[dict]:
    """A few failing then passing traces of a harness, as records."""
    chosen = rollouts_of(
        s, harness_id, checkpoint_id, ("fail", "error", "timeout"), n_fail
    ) + rollouts_of(s, harness_id, checkpoint_id, ("pass",), n_pass)
    steps = load_steps(s, [r.id for r in chosen])
    for rollout in chosen:
        yield record(rollout, steps[rollout.id])
