"""Evaluate one harness under one checkpoint on one split with k samples per task.

Rollout rows are created up front (status "pending"), then filled in as sandboxes finish, so a
rollout's steps always have a row to point to and an interrupted evaluation shows what is left.

A rollout's score must not depend on how busy the machine is: its time limit counts the
harness's own time, not the wait on its model calls (sandbox/pool.py); rollouts are admitted as
the model server keeps up (app/rollout/admission.py); and a rollout that the infrastructure
failed (the backend unreachable or erring, its sandbox not started) is tried again - once the
model server is back, when it crashed - and after its last try recorded as `infra`: left out of
mean@k and RFT, counted on the evaluation.
"""

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from sqlalchemy import bindparam, delete
from sqlmodel import Session, col, select

from app.db.schema import Checkpoint, Evaluation, Harness, Rollout, Run, Step, now
from app.db.writer import Writer
from app.domains import Domain, Task, episode, scoring_of
from app.gateway import Gateway, Grant
from app.harness_code import declared_turns
from app.llm.generation import Declared, Generation, generation_for
from app.rollout.admission import Admission
from app.stats import mean_interval, per_task_means
from sandbox.pool import SandboxPool, SandboxResult

PASS_THRESHOLD = 0.5  # a rollout passes (and is accepted for RFT) when its score is above this
INFRA_BACKOFF_S = 1.0  # before the first retry after an infrastructure failure; doubles after


def status_of(result: SandboxResult, reward: float, infra: bool = False) -> str:
    if infra:
        return "infra"
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


class RunStopped(Exception):
    """Raised by a gate to start no more rollouts: the run is stopping."""


class RunGate(Protocol):
    """A run's say over its rollouts (app/loop/driver.py): `gate()` waits while the run is paused
    and raises RunStopped once it stops; `holds()` is true while no new rollout may start."""

    declared: Declared  # how its calls run, as the loop parsed its experiment

    async def gate(self) -> None: ...

    def holds(self) -> bool: ...


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
        gates: dict[int, RunGate] | None = None,
        admission: Admission | None = None,
        evaluating: Counter[int] | None = None,
        backend_up: Callable[[], Awaitable[None]] | None = None,
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
        self.admission = admission or Admission(concurrency)
        # A run's gate is passed before each of its rollouts starts: it waits while the run is
        # paused and raises RunStopped when it stops. Rollouts already running always finish.
        self.gates = gates if gates is not None else {}
        # Runs with an evaluation in progress, per run (whom a model server crash concerns), and
        # a wait while the model server is down and being restarted (app/llm/supervisor.py).
        self.evaluating = evaluating if evaluating is not None else Counter()
        self.backend_up = backend_up

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
        """The evaluation and its pending rollout rows, nothing run yet. A stopping run
        creates none (RunStopped); a paused one waits here."""
        gate = self.gates.get(run_id)
        if gate:
            await gate.gate()
        tasks = tasks if tasks is not None else domain.tasks(split)[:limit]
        return await self.writer.run(
            lambda s: _create(s, run_id, harness, checkpoint, split, k, tasks, phase_id)
        )

    async def extend(self, evaluation: Evaluation, tasks: list[Task]) -> Evaluation:
        """More tasks for an evaluation (pending rollouts; `complete` runs them): how a
        sequential test goes on to its next tasks (app/search/acceptance.py)."""
        return await self.writer.run(lambda s: _extend(s, evaluation.id, tasks))

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
        gate = self.gates.get(evaluation.run_id)
        declared = gate.declared if gate else None  # the loop's copy, not the store's
        generation, scoring = await self.writer.run(
            lambda s: _settings(
                s, evaluation.id, self.backend, self.limits, domain, harness, declared
            )
        )
        wall_s = wall_s or generation.wall_s
        path = harness_file(harness, self.harness_dir)
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(rollout: Rollout) -> Rollout:
            async with semaphore:
                while True:
                    if gate:
                        await gate.gate()
                    async with self.admission.slot():
                        # A pause that came while it waited for a slot holds it too: the slot
                        # goes back (another run may use it) and the gate is passed again.
                        if gate and gate.holds():
                            continue
                        task = Task(rollout.task_id, rollout.task or {}, rollout.gold or "")
                        done = await self._rollout(
                            rollout, task, path, checkpoint, domain, wall_s, generation, scoring
                        )
                        break
            if progress:
                progress(done)
            return done

        self.evaluating[evaluation.run_id] += 1
        try:
            await self.sandbox.prestart(path, min(len(pending), self.concurrency))
            results = await asyncio.gather(*(one(r) for r in pending), return_exceptions=True)
        finally:
            self.evaluating[evaluation.run_id] -= 1
            if self.evaluating[evaluation.run_id] <= 0:
                del self.evaluating[evaluation.run_id]
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
        scoring: str,
    ) -> Rollout:
        # Written now, not with the result: a pending rollout with a start is running in a
        # sandbox, one without is queued for a slot (the pages and a pause or stop count them).
        started_at = now()
        await self.writer.run(lambda s: _mark_started(s, rollout.id, started_at))
        no_sandbox = False  # the last try's sandbox did not start
        for attempt in range(1, generation.infra_retries + 2):
            if attempt > 1:  # the failed try's steps go: the rollout runs again from the start
                await self.writer.run(lambda s: _drop_steps(s, [rollout.id]))
                await asyncio.sleep(INFRA_BACKOFF_S * 2 ** (attempt - 2))
                if no_sandbox:  # e.g. the Docker engine restarting: wait until it answers
                    await self.sandbox.backend_back()
            if self.backend_up:  # a try while the model server restarts would only fail
                await self.backend_up()
            # this try's tools (a chess board keeps its state here) and its scorer
            env = episode(domain, task, scoring)
            result, grant = await self._attempt(
                rollout, task, env, harness_path, checkpoint, domain, wall_s, generation
            )
            infra = _infrastructure_failure(result, grant)
            if infra is None:
                break
            no_sandbox = result.reason == "sandbox_start"
        # The reward is computed here, from the returned answer: nothing inside the sandbox can set it.
        # in a thread: a verifier may take its time (an LLM judge, sympy) without stalling rollouts
        ok = result.reason is None and infra is None
        reward = await asyncio.to_thread(env.score, result.answer) if ok else 0.0
        waited = grant.waited()
        values = dict(
            status=status_of(result, reward, infra is not None),
            reason="infrastructure" if infra else result.reason,
            error=f"{infra} (after {attempt} tries)" if infra else result.error,
            answer=result.answer,
            reward=reward,
            turns=grant.calls,
            prompt_tokens=grant.prompt_tokens,
            completion_tokens=grant.completion_tokens,
            wall_s=result.wall_s,
            harness_s=max(0.0, result.wall_s - waited),
            model_wait_s=waited,
            attempts=attempt,
            stdout_tail=result.stdout_tail or None,
            stderr_tail=result.stderr_tail or None,
            started_at=started_at,
            finished_at=now(),
        )
        await self.writer.run(lambda s: _record_result(s, rollout, values))
        for key, value in values.items():  # the caller's copy, as the database now has it
            setattr(rollout, key, value)
        return rollout

    async def _attempt(
        self,
        rollout: Rollout,
        task: Task,
        env,
        harness_path: Path,
        checkpoint: Checkpoint,
        domain: Domain,
        wall_s: float | None,
        generation: Generation,
    ) -> tuple[SandboxResult, Grant]:
        """One try of a rollout in a sandbox, under a grant of its own."""
        # Tools that run inside the sandbox (math's python) are only reported to the gateway.
        sandbox_tools = getattr(domain, "sandbox_tools", {})
        grant = Grant(
            rollout.id,
            checkpoint.name,
            tools=env.tools,
            sandbox_tools=frozenset(sandbox_tools),
            generation=generation,
        )
        token = self.gateway.grant(grant)
        try:
            result = await self.sandbox.run(
                harness_path,
                task.public,
                token,
                domain.forbidden_modules,
                wall_s,
                sandbox_tools,
                waited=grant.waited,
            )
        finally:
            self.gateway.revoke(token)
        return result, grant


def _infrastructure_failure(result: SandboxResult, grant: Grant) -> str | None:
    """Why a try's outcome says nothing about its harness, or None when it does."""
    if result.reason == "sandbox_start":
        return result.error
    if grant.infra_errors:
        return f"model backend failed: {grant.infra_errors[-1]}"
    return None


def _settings(
    s: Session,
    evaluation_id: int,
    backend: str,
    limits: dict,
    domain: Domain,
    harness: Harness,
    declared: Declared | None = None,
) -> tuple[Generation, str]:
    """What the evaluation's calls run under and the verifier mode that scores them (its run's
    `scoring`, else the domain's default), from what its run declared (`declared`: its loop's
    copy; else read from its stored config) and recorded on the evaluation (a run's config never
    changes, so a resumed one runs under the same)."""
    evaluation = s.get(Evaluation, evaluation_id)
    if declared is None:
        declared = Declared.of_config(s.get(Run, evaluation.run_id).config)
    turns = declared_turns(harness.code)  # the harness's own turn limit, within the clamp
    generation = generation_for(declared, evaluation.split, backend, limits, turns)
    if evaluation.generation is None:
        evaluation.generation = generation.record()
    if evaluation.scoring is None:
        evaluation.scoring = scoring_of(domain, declared.scoring)
    return generation, evaluation.scoring


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
    _add_rollouts(s, evaluation, tasks)
    return evaluation


def _add_rollouts(s: Session, evaluation: Evaluation, tasks: list[Task]) -> None:
    """The pending rollouts of `tasks`, k samples each."""
    s.add_all(
        Rollout(
            run_id=evaluation.run_id,
            evaluation_id=evaluation.id,
            harness_id=evaluation.harness_id,
            checkpoint_id=evaluation.checkpoint_id,
            task_id=t.id,
            sample=i,
            task=t.public,
            gold=t.gold,
        )
        for t in tasks
        for i in range(evaluation.k)
    )


def _extend(s: Session, evaluation_id: int, tasks: list[Task]) -> Evaluation:
    evaluation = s.get(Evaluation, evaluation_id)
    evaluation.n_tasks += len(tasks)
    evaluation.status, evaluation.finished_at = "running", None
    _add_rollouts(s, evaluation, tasks)
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


_START_ROLLOUT = (
    _ROLLOUT.update()
    .where(_ROLLOUT.c.id == bindparam("rollout_id"))
    .values(started_at=bindparam("started"))
)


def _mark_started(s: Session, rollout_id: int, started_at) -> None:
    s.connection().execute(_START_ROLLOUT, {"rollout_id": rollout_id, "started": started_at})


def _record_result(s: Session, rollout: Rollout, values: dict) -> None:
    connection = s.connection()
    connection.execute(_FINISH_ROLLOUT, {"rollout_id": rollout.id, **values})
    connection.execute(_COUNT_DONE, {"evaluation_id": rollout.evaluation_id})


def _pending(s: Session, evaluation_id: int) -> list[Rollout]:
    """The rollouts still to run. Steps an interrupted attempt left on them are dropped (and its
    start): that attempt never finished, so the rollout runs again from the start."""
    pending = s.exec(
        select(Rollout)
        .where(Rollout.evaluation_id == evaluation_id, Rollout.status == "pending")
        .order_by(Rollout.id)
    ).all()
    _drop_steps(s, [r.id for r in pending])
    for rollout in pending:  # an interrupted one is queued again until it gets a sandbox
        rollout.started_at = None
    return list(pending)


def _drop_steps(s: Session, rollout_ids: list[int]) -> None:
    if rollout_ids:
        s.exec(delete(Step).where(col(Step.rollout_id).in_(rollout_ids)))


def _finish(s: Session, evaluation_id: int) -> Evaluation:
    evaluation = s.get(Evaluation, evaluation_id)
    rows = s.exec(
        select(
            Rollout.task_id,
            Rollout.status,
            Rollout.reward,
            Rollout.turns,
            Rollout.prompt_tokens + Rollout.completion_tokens,
        ).where(Rollout.evaluation_id == evaluation_id)
    ).all()
    counted = [r for r in rows if r[1] != "infra"]
    # mean@k: the mean over tasks of each task's mean reward. With every task at k samples it
    # is the plain mean; a task that lost samples to infrastructure failures counts by the ones
    # it has, and one that lost all is left out.
    task_means = per_task_means((task, reward) for task, _, reward, _, _ in counted)
    evaluation.mean_at_k = sum(task_means.values()) / len(task_means) if task_means else 0.0
    samples = len(counted) / len(task_means) if task_means else 1  # k, less lost samples
    interval = mean_interval(task_means.values(), k=samples)
    evaluation.ci_low, evaluation.ci_high = interval or (None, None)
    evaluation.mean_turns = sum(r[3] for r in counted) / len(counted) if counted else 0.0
    evaluation.total_tokens = sum(r[4] or 0 for r in rows)
    evaluation.n_infra = len(rows) - len(counted)
    evaluation.status = "done"
    evaluation.finished_at = now()
    return evaluation
