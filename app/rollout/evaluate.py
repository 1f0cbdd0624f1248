"""Evaluate one harness under one checkpoint on one split with k samples per task.

Rollout rows are created up front (status "pending"), then filled in as sandboxes finish, so a
rollout's steps always have a row to point to and an interrupted evaluation shows what is left.
"""

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from sqlalchemy import bindparam, delete, func
from sqlmodel import Session, col, select

from app.db.schema import Checkpoint, Evaluation, Harness, Rollout, Run, Step, now
from app.db.writer import Writer
from app.domains import Domain, Task, episode
from app.gateway import Gateway, Grant
from app.llm.generation import Generation, generation_for
from sandbox.pool import SandboxPool, SandboxResult

PASS_THRESHOLD = 0.5  # a rollout passes (and is accepted for RFT) when its score is above this


def status_of(result: SandboxResult, reward: float) -> str:
    if result.reason == "timeout":
        return "timeout"
    if result.reason is not None:
        return "error"
    return "pass" if reward > PASS_THRESHOLD else "fail"


def harness_file(harness: Harness, directory: Path) -> Path:
    """The harness code as a file the sandbox can bind read-only (content-addressed)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{harness.sha}.py"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(harness.code)
        tmp.replace(path)
    return path


def sha_of(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


class RunStopped(Exception):
    """Raised by a gate to start no more rollouts: the run is stopping."""


class Evaluator:
    def __init__(
        self,
        writer: Writer,
        gateway: Gateway,
        sandbox: SandboxPool,
        harness_dir: Path,
        concurrency: int = 32,
        backend: str = "endpoint",
        limits: dict | None = None,
        gates: dict[int, Callable[[], Awaitable[None]]] | None = None,
    ):
        # The model backend's name (which call fields it takes) and the process-wide rollout
        # limits; a run's own [sampling] and [rollout] come on top (app/llm/generation.py).
        self.backend = backend
        self.limits = limits or {}
        self.writer = writer
        self.gateway = gateway
        self.sandbox = sandbox
        self.harness_dir = harness_dir
        self.concurrency = concurrency
        # A run's gate is awaited before each of its rollouts starts: it waits while the run is
        # paused and raises RunStopped when it stops. Rollouts already running always finish.
        self.gates = gates if gates is not None else {}

    async def evaluate(
        self,
        run_id: int,
        harness: Harness,
        checkpoint: Checkpoint,
        domain: Domain,
        split: str,
        k: int,
        limit: int | None = None,
        progress: Callable[[Rollout], None] | None = None,
        tasks: list[Task] | None = None,
        wall_s: float | None = None,
        phase_id: int | None = None,
    ) -> Evaluation:
        """k rollouts for each task of the split (its first `limit`, or the given `tasks`);
        `wall_s` overrides the per-rollout time limit."""
        evaluation = await self.create(
            run_id, harness, checkpoint, domain, split, k, limit, tasks, phase_id
        )
        return await self.complete(evaluation, harness, checkpoint, domain, progress, wall_s)

    async def create(
        self,
        run_id: int,
        harness: Harness,
        checkpoint: Checkpoint,
        domain: Domain,
        split: str,
        k: int,
        limit: int | None = None,
        tasks: list[Task] | None = None,
        phase_id: int | None = None,
    ) -> Evaluation:
        """The evaluation and its pending rollout rows, nothing run yet."""
        tasks = tasks if tasks is not None else domain.tasks(split)[:limit]
        return await self.writer.run(
            lambda s: _create(s, run_id, harness, checkpoint, split, k, tasks, phase_id)
        )

    async def complete(
        self,
        evaluation: Evaluation,
        harness: Harness,
        checkpoint: Checkpoint,
        domain: Domain,
        progress: Callable[[Rollout], None] | None = None,
        wall_s: float | None = None,
    ) -> Evaluation:
        """Run the evaluation's pending rollouts - all of them when it is new, what is left when
        it was interrupted (recorded rollouts are kept, never run twice) - and finish it."""
        pending = await self.writer.run(lambda s: _pending(s, evaluation.id))
        generation = await self.writer.run(
            lambda s: _generation(s, evaluation.id, self.backend, self.limits)
        )
        wall_s = wall_s or generation.wall_s
        path = harness_file(harness, self.harness_dir)
        semaphore = asyncio.Semaphore(self.concurrency)
        gate = self.gates.get(evaluation.run_id)

        async def one(rollout: Rollout) -> Rollout:
            async with semaphore:
                if gate:
                    await gate()
                task = Task(rollout.task_id, rollout.task or {}, rollout.gold or "")
                done = await self._rollout(
                    rollout, task, path, checkpoint, domain, wall_s, generation
                )
            if progress:
                progress(done)
            return done

        try:
            await self.sandbox.prestart(path, min(len(pending), self.concurrency))
            results = await asyncio.gather(*(one(r) for r in pending), return_exceptions=True)
        finally:
            await self.sandbox.release(path)
        # Every started rollout has finished by now; a stop or a failure surfaces only then.
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return await self.writer.run(lambda s: _finish(s, evaluation.id))

    async def _rollout(
        self,
        rollout: Rollout,
        task: Task,
        harness_path: Path,
        checkpoint: Checkpoint,
        domain: Domain,
        wall_s: float | None,
        generation: Generation,
    ) -> Rollout:
        env = episode(domain, task)  # this rollout's tools (a chess board keeps its state here)
        # Tools that run inside the sandbox (math's python) are only reported to the gateway.
        sandbox_tools = getattr(domain, "sandbox_tools", {})
        token = self.gateway.grant(
            Grant(
                rollout.id,
                checkpoint.name,
                tools=env.tools,
                sandbox_tools=frozenset(sandbox_tools),
                generation=generation,
            )
        )
        try:
            result = await self.sandbox.run(
                harness_path, task.public, token, domain.forbidden_modules, wall_s, sandbox_tools
            )
        finally:
            grant = self.gateway.revoke(token)
        # The reward is computed here, from the returned answer: nothing inside the sandbox can set it.
        # in a thread: a verifier may take its time (an LLM judge, sympy) without stalling rollouts
        reward = await asyncio.to_thread(env.score, result.answer) if result.reason is None else 0.0
        values = dict(
            status=status_of(result, reward),
            reason=result.reason,
            error=result.error,
            answer=result.answer,
            reward=reward,
            turns=grant.calls,
            prompt_tokens=grant.prompt_tokens,
            completion_tokens=grant.completion_tokens,
            wall_s=result.wall_s,
            stdout_tail=result.stdout_tail or None,
            stderr_tail=result.stderr_tail or None,
            finished_at=now(),
        )
        await self.writer.run(lambda s: _record_result(s, rollout, values))
        for key, value in values.items():  # the caller's copy, as the database now has it
            setattr(rollout, key, value)
        return rollout


def _generation(s: Session, evaluation_id: int, backend: str, limits: dict) -> Generation:
    """The settings the evaluation's calls run under, from its run's declared ones, recorded on
    the evaluation (a run's config never changes, so a resumed one runs under the same)."""
    evaluation = s.get(Evaluation, evaluation_id)
    run = s.get(Run, evaluation.run_id)
    generation = generation_for(run.config, evaluation.split, backend, limits)
    if evaluation.generation is None:
        evaluation.generation = generation.record()
    return generation


def _create(
    s: Session,
    run_id: int,
    harness: Harness,
    checkpoint: Checkpoint,
    split: str,
    k: int,
    tasks: list[Task],
    phase_id: int | None,
) -> Evaluation:
    evaluation = Evaluation(
        run_id=run_id,
        harness_id=harness.id,
        checkpoint_id=checkpoint.id,
        split=split,
        k=k,
        n_tasks=len(tasks),
        phase_id=phase_id,
    )
    s.add(evaluation)
    s.flush()
    rollouts = [
        Rollout(
            run_id=run_id,
            evaluation_id=evaluation.id,
            harness_id=harness.id,
            checkpoint_id=checkpoint.id,
            task_id=t.id,
            sample=i,
            task=t.public,
            gold=t.gold,
        )
        for t in tasks
        for i in range(k)
    ]
    s.add_all(rollouts)
    return evaluation


# A finished rollout is the hottest write there is: two prepared Core UPDATEs (the SET columns
# are the keys given), no ORM load or synchronisation - half the cost (~0.5 ms against ~1 ms).
_ROLLOUT, _EVALUATION = Rollout.__table__, Evaluation.__table__
_FINISH_ROLLOUT = _ROLLOUT.update().where(_ROLLOUT.c.id == bindparam("rollout_id"))
_COUNT_DONE = (
    _EVALUATION.update()
    .where(_EVALUATION.c.id == bindparam("evaluation_id"))
    .values(n_done=_EVALUATION.c.n_done + 1)
)


def _record_result(s: Session, rollout: Rollout, values: dict) -> None:
    connection = s.connection()
    connection.execute(_FINISH_ROLLOUT, {"rollout_id": rollout.id, **values})
    connection.execute(_COUNT_DONE, {"evaluation_id": rollout.evaluation_id})


def _pending(s: Session, evaluation_id: int) -> list[Rollout]:
    """The rollouts still to run. Steps an interrupted attempt left on them are dropped: that
    attempt never finished, so the rollout runs again from the start."""
    pending = s.exec(
        select(Rollout)
        .where(Rollout.evaluation_id == evaluation_id, Rollout.status == "pending")
        .order_by(Rollout.id)
    ).all()
    ids = [r.id for r in pending]
    if ids:
        s.exec(delete(Step).where(col(Step.rollout_id).in_(ids)))
    return list(pending)


def _finish(s: Session, evaluation_id: int) -> Evaluation:
    evaluation = s.get(Evaluation, evaluation_id)
    n, reward, turns, tokens = s.exec(
        select(
            func.count(),
            func.sum(Rollout.reward),
            func.sum(Rollout.turns),
            func.sum(Rollout.prompt_tokens + Rollout.completion_tokens),
        ).where(Rollout.evaluation_id == evaluation_id)
    ).one()
    # Every task has k samples, so mean@k (mean over tasks of the mean over samples) is the
    # plain mean of all rewards.
    evaluation.mean_at_k = (reward or 0.0) / n if n else 0.0
    evaluation.mean_turns = (turns or 0) / n if n else 0.0
    evaluation.total_tokens = tokens or 0
    evaluation.status = "done"
    evaluation.finished_at = now()
    return evaluation
