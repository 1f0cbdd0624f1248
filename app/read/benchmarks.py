"""Scores per benchmark: where a domain's tasks name their source benchmark (searchqa's
`data_source`: nq, triviaqa, popqa, hotpotqa, 2wikimultihopqa, musique, bamboogle), an
evaluation is also given per benchmark and as the mean of those per-benchmark figures, as the
paper's table reports search QA (each benchmark weighs the same, however many questions it
has). The evaluation's own mean@k stays the pooled mean over all its tasks."""

from collections import defaultdict
from typing import Any

from sqlmodel import Session, col, select

from app.db.schema import Rollout
from app.stats import per_task_means

BENCHMARK_FIELD = "data_source"


def benchmark_breakdown(task_means: dict[str, float], benchmarks: dict[str, str]) -> dict | None:
    """{"benchmarks": {name: {"mean_at_k", "n_tasks"}}, "macro_mean_at_k"} from each task's mean
    reward and each task's benchmark; None when no task names one."""
    grouped: dict[str, list[float]] = defaultdict(list)
    for task, mean in task_means.items():
        if task in benchmarks:
            grouped[benchmarks[task]].append(mean)
    if not grouped:
        return None
    per = {
        name: {"mean_at_k": sum(means) / len(means), "n_tasks": len(means)}
        for name, means in sorted(grouped.items())
    }
    macro = sum(b["mean_at_k"] for b in per.values()) / len(per)
    return {"benchmarks": per, "macro_mean_at_k": macro}


def evaluation_benchmarks(s: Session, evaluation_id: int) -> dict[str, Any] | None:
    """An evaluation's per-benchmark mean@k and their mean, counted as its mean@k is
    (infrastructure failures and unfinished rollouts left out); None when its tasks carry no
    benchmark."""
    rows = s.exec(
        select(Rollout.task_id, Rollout.task, Rollout.reward).where(
            Rollout.evaluation_id == evaluation_id, col(Rollout.status).not_in(("infra", "pending"))
        )
    ).all()
    benchmarks = {
        task_id: str(task[BENCHMARK_FIELD])
        for task_id, task, _ in rows
        if isinstance(task, dict) and task.get(BENCHMARK_FIELD)
    }
    return benchmark_breakdown(per_task_means((t, r) for t, _, r in rows), benchmarks)


def benchmarks_line(breakdown: dict[str, Any]) -> str:
    """One line: each benchmark's mean@k and task count, then the mean over benchmarks."""
    per = breakdown["benchmarks"]
    parts = ", ".join(f"{name} {b['mean_at_k']:.3f} ({b['n_tasks']})" for name, b in per.items())
    return (
        f"per benchmark: {parts}; mean over {len(per)} benchmarks "
        f"{breakdown['macro_mean_at_k']:.3f}"
    )
