"""The `gepa` proposer: prompt-only reflective evolution on a per-task Pareto front, GEPA-style
(arXiv 2507.19457); the fast side of the `fast_slow` strategy (docs/algorithm.md, "Fast-Slow
Training").

Each candidate changes one thing: the text of the module-level string the harness declares as
its prompt (`[search.options] prompt_variable`, default SYSTEM_PROMPT). Its parent is drawn from
the run's whole population of scored harnesses, in proportion to the number of harness-split
tasks on which the parent is among the best (GEPA's per-task Pareto front: a prompt that alone
solves a few tasks survives beside one with the best mean). A chat model reads the parent's
prompt and some of its traces (failures first, with the gold answer as feedback) and writes a
new prompt; the candidate is the parent's code with that one assignment rewritten.
"""

import asyncio
import random
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func
from sqlmodel import select

from app.db.schema import Evaluation, Harness, Rollout
from app.experiment_schema import LLMProposerConfig
from app.search import traces
from app.search.candidate import Candidate, Proposal
from app.search.context import SearchContext
from app.search.knobs import current_values, with_knob
from app.search.llm_proposer import ask_fitting


class GepaOptions(BaseModel):
    """[search.options] of the gepa proposer."""

    model_config = ConfigDict(extra="forbid")

    prompt_variable: str = Field(
        default="SYSTEM_PROMPT",
        pattern=r"^[A-Za-z_]\w*$",
        description="the module-level string of the harness that is evolved",
    )
    max_prompt_chars: int = Field(default=4000, ge=10, le=100_000)


INSTRUCTIONS = """\
An assistant was given the instructions below (its system prompt) and then solved tasks. \
Below them are some of its attempts, each with the score it got and the expected answer.

Write new instructions that make the assistant solve more tasks: read what went wrong, keep \
what worked, state the output format exactly. Reply with the new instructions only, inside \
one ``` block."""

_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Parent:
    harness_id: int
    checkpoint_id: int  # where its per-task scores (and the traces shown) come from
    wins: int  # harness-split tasks on which it is among the best


def pareto_parents(per_task: dict[int, dict[str, float]]) -> dict[int, int]:
    """{harness id: tasks it wins} over `per_task` ({harness id: {task id: mean reward}}).

    A harness wins a task when no other scores higher on it; tasks nobody solves say nothing
    and are left out. A harness whose won tasks are a strict subset of another's is dominated
    and dropped, as in GEPA."""
    tasks = {t for scores in per_task.values() for t in scores}
    won: dict[int, set[str]] = {h: set() for h in per_task}
    for task in tasks:
        best = max(scores.get(task, 0.0) for scores in per_task.values())
        if best <= 0:
            continue
        for h, scores in per_task.items():
            if scores.get(task, 0.0) == best:
                won[h].add(task)
    return {
        h: len(mine)
        for h, mine in won.items()
        if mine and not any(mine < theirs for o, theirs in won.items() if o != h)
    }


def reply_prompt(text: str, max_chars: int) -> str:
    """The new prompt in a reply: its last fenced block, else the whole reply, stripped."""
    blocks = _BLOCK.findall(text)
    return (blocks[-1] if blocks else text).strip()[:max_chars]


class GepaProposer:
    name = "gepa"

    def __init__(self, llm: LLMProposerConfig, options: GepaOptions, seed: int = 0):
        self.llm = llm
        self.options = options
        self.seed = seed  # [search] seed (the experiment's): which parents are drawn

    async def propose(self, ctx: SearchContext) -> Proposal:
        population = self._population(ctx)
        rng = random.Random(f"{self.seed}:{ctx.proposals_before}")
        parents = [_draw(population, rng, ctx) for _ in range(ctx.k)]
        results = await asyncio.gather(*(self._reflect(ctx, p, j) for j, p in enumerate(parents)))
        candidates = [c for c, _ in results]
        replies = [r for _, r in results if r is not None]
        drawn = ", ".join(f"#{p.harness_id} (wins {p.wins})" for p in parents)
        priced = replies and all(r.cost_usd is not None for r in replies)
        return Proposal(
            candidates,
            sum(r.prompt_tokens for r in replies),
            sum(r.completion_tokens for r in replies),
            sum(r.cost_usd for r in replies) if priced else None,
            report=f"population of {len(population)} on the per-task front; parents {drawn}",
            error=None if replies else candidates[0].error,  # every reflection failed
        )

    def _population(self, ctx: SearchContext) -> list[Parent]:
        """The run's harnesses on the per-task front, each scored by its latest finished
        harness-split evaluation (under an earlier checkpoint for those of earlier rounds)."""
        with ctx.workbench.session() as s:
            latest = (
                select(func.max(Evaluation.id))
                .where(
                    Evaluation.run_id == ctx.run_id,
                    Evaluation.split == "harness",
                    Evaluation.status == "done",
                )
                .group_by(Evaluation.harness_id)
            )
            rows = s.exec(
                select(
                    Evaluation.harness_id,
                    Evaluation.checkpoint_id,
                    Rollout.task_id,
                    func.avg(func.coalesce(Rollout.reward, 0.0)),
                )
                .join(Rollout, Rollout.evaluation_id == Evaluation.id)
                .where(Evaluation.id.in_(latest))
                .group_by(Evaluation.id, Rollout.task_id)
            ).all()
        per_task: dict[int, dict[str, float]] = {}
        checkpoint_of: dict[int, int] = {}
        for harness_id, checkpoint_id, task_id, mean in rows:
            per_task.setdefault(harness_id, {})[task_id] = float(mean)
            checkpoint_of[harness_id] = checkpoint_id
        wins = pareto_parents(per_task)
        return [Parent(h, checkpoint_of[h], n) for h, n in sorted(wins.items())]

    async def _reflect(self, ctx: SearchContext, parent: Parent, j: int):
        """One candidate from one parent: (candidate, reply or None)."""
        var = self.options.prompt_variable
        with ctx.workbench.session() as s:
            harness = s.get(Harness, parent.harness_id)
            shown = list(
                traces.examples(
                    s, harness.id, parent.checkpoint_id, self.llm.failures, self.llm.successes
                )
            )
        name = f"prompt-{ctx.iteration}.{j + 1}-from-{harness.id}"
        current = current_values(harness.code).get(var, _MISSING)
        if current is _MISSING or not (current is None or isinstance(current, str)):
            error = (
                f"harness #{harness.id} assigns no module-level string {var} to evolve "
                "(set [search.options] prompt_variable)"
            )
            return Candidate(name, None, parent_ids=[harness.id], error=error), None

        def messages_with(rollouts) -> list[dict]:
            attempts = "\n\n".join(traces.flatten(r) for r in rollouts) or "(no traces shown)"
            content = f"{INSTRUCTIONS}\n\n## Instructions\n```\n{current or ''}\n```\n\n"
            return [{"role": "user", "content": content + f"## Attempts\n{attempts}"}]

        try:
            reply, seen = await ask_fitting(self.llm, ctx, messages_with, shown)
        except RuntimeError as exc:  # the endpoint failed this reflection; its siblings count
            return Candidate(name, None, parent_ids=[harness.id], error=str(exc)), None
        prompt = reply_prompt(reply.text, self.options.max_prompt_chars)
        if not prompt:
            return Candidate(
                name, None, parent_ids=[harness.id], error="the reply held no prompt"
            ), reply
        fitted = f" ({len(shown)} chosen, halved to fit its context)" if seen < len(shown) else ""
        candidate = Candidate(
            name=name,
            code=with_knob(harness.code, var, prompt),
            axis=var,
            hypothesis=f"reflection on {seen} traces of #{harness.id}{fitted}, "
            f"which wins {parent.wins} harness tasks",
            changes=f"{var} rewritten ({len(current or '')} -> {len(prompt)} characters)",
            parent_ids=[harness.id],
        )
        return candidate, reply


_MISSING = object()


def _draw(population: list[Parent], rng: random.Random, ctx: SearchContext) -> Parent:
    """A parent, in proportion to its wins; the accepted harness when nothing is solved yet."""
    if not population:
        return Parent(ctx.accepted.id, ctx.checkpoint_id, 0)
    return rng.choices(population, weights=[p.wins for p in population])[0]
