"""One harness phase (docs/algorithm.md, "Harness phase"):

iteration 0 re-evaluates the incoming harness under the current checkpoint; each later iteration
proposes K candidates, stores every one of them (invalid ones with their error), smoke-tests the
valid ones in the sandbox, evaluates the survivors on the harness split, and updates the Pareto
frontier and the accepted harness. A proposer failure is recorded on its iteration; the phase
goes on or ends per `on_proposer_error`.

Everything lives in the database as it happens, so a phase interrupted by a crash resumes where
it was: finished iterations are not run again, the candidates of an interrupted iteration are
not proposed again, and recorded rollouts are kept (only the missing ones run).
"""

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import func
from sqlmodel import select

from app.db.queries import task_means
from app.db.schema import (
    Checkpoint,
    Evaluation,
    Harness,
    Metric,
    Phase,
    Rollout,
    SearchIteration,
    now,
    sha_of,
)
from app.domains import Domain
from app.experiment_schema import SearchConfig
from app.harness_code import fixed_parts_error, static_error
from app.pareto import Score, accept, frontier
from app.phases import end_phase, phase_rollouts
from app.runs import single_run
from app.search.acceptance import Decision, decide, sequential_on
from app.search.candidate import Candidate, Proposal
from app.search.context import Proposer, SearchContext
from app.search.proposers import proposer_timeout

if TYPE_CHECKING:
    from app.workbench import Workbench

log = logging.getLogger(__name__)

Progress = Callable[[str, dict], None]
# Asked before each proposing iteration; returns why the phase must end now, or None.
EndCheck = Callable[[list[SearchIteration]], Awaitable[str | None]]


async def harness_phase(
    workbench: "Workbench",
    phase: Phase,
    incoming: Harness,
    checkpoint: Checkpoint,
    domain: Domain,
    cfg: SearchConfig,
    proposer: Proposer,
    end_check: EndCheck,
    progress: Progress | None = None,
) -> Phase:
    """Run (or resume) the phase to its end, which `end_check` names before each proposing
    iteration; returns the finished Phase (harness_out_id is the accepted harness)."""
    return await _Search(
        workbench, phase, incoming, checkpoint, domain, cfg, proposer, progress, end_check
    ).run()


class _Search:
    def __init__(
        self,
        workbench: "Workbench",
        phase: Phase,
        incoming: Harness,
        checkpoint: Checkpoint,
        domain: Domain,
        cfg: SearchConfig,
        proposer: Proposer,
        progress: Progress | None,
        end_check: EndCheck,
    ):
        self.wb = workbench
        self.phase = phase
        self.incoming = incoming
        self.checkpoint = checkpoint
        self.domain = domain
        self.cfg = cfg
        self.proposer = proposer
        self.say = progress or (lambda kind, data: None)
        self.end_check = end_check
        self.tasks = domain.tasks("harness")[: cfg.tasks]
        # the commit gate (app/search/acceptance.py): the harness-split evaluation of each
        # scored harness, the incumbent's per-task means, the gate's decisions; a sequential
        # test reads the tasks in a seeded order of the phase's own
        self.evaluation_ids: dict[int, int] = {}
        self.incumbent_means: dict[str, float] | None = None
        self.decisions: dict[int, Decision] = {}
        self.order = random.Random(f"{cfg.seed}:{phase.id}").sample(
            [t.id for t in self.tasks], len(self.tasks)
        )

    def _load(self) -> None:
        """The phase so far, from the database."""
        with self.wb.session() as s:
            rows = s.exec(select(Harness).where(Harness.phase_id == self.phase.id)).all()
            self.harnesses = {self.incoming.id: self.incoming, **{h.id: h for h in rows}}
            self.iterations = list(
                s.exec(
                    select(SearchIteration)
                    .where(SearchIteration.phase_id == self.phase.id)
                    .order_by(SearchIteration.iteration)
                )
            )
            done = s.exec(
                select(Evaluation).where(
                    Evaluation.phase_id == self.phase.id,
                    Evaluation.split == "harness",
                    Evaluation.checkpoint_id == self.checkpoint.id,
                    Evaluation.status == "done",
                )
            )
            done = list(done)
            self.scores = {
                e.harness_id: Score(e.harness_id, e.mean_at_k, e.mean_turns) for e in done
            }
            self.evaluation_ids = {e.harness_id: e.id for e in done}

    async def run(self) -> Phase:
        self._load()
        started = time.monotonic()
        await self._score(self.incoming)  # found, not rerun, when iteration 0 is behind us
        if not any(i.iteration == 0 for i in self.iterations):
            await self._finish_iteration(
                SearchIteration(
                    run_id=self.phase.run_id,
                    phase_id=self.phase.id,
                    iteration=0,
                    proposer="incoming",
                    n_candidates=1,
                    n_valid=1,
                ),
                started,
            )
        first = max(i.iteration for i in self.iterations if i.status != "running") + 1
        for iteration in itertools.count(first):
            interrupted = next((i for i in self.iterations if i.iteration == iteration), None)
            reason = None if interrupted else await self.end_check(self.iterations)
            if reason:
                break
            record = await self._iterate(iteration, interrupted)
            if record.status == "failed" and self.cfg.on_proposer_error == "end":
                reason = "proposer_error"
                break
            if record.status == "done" and record.n_candidates == 0:
                reason = "exhausted"  # the proposer has nothing left to try
                break
        return await self.wb.writer.run(
            lambda s: end_phase(
                s,
                self.phase.id,
                reason,
                harness_out_id=self._accepted().harness_id,
                checkpoint_out_id=self.checkpoint.id,
            )
        )

    def _accepted(self) -> Score:
        incoming = self.scores[self.incoming.id]
        if self.cfg.acceptance == "greedy":
            return accept(incoming, list(self.scores.values()))
        committed = [s for h, s in self.scores.items() if h != self.incoming.id and self._gate(h)]
        return max(committed, key=lambda s: (s.success, -s.turns), default=incoming)

    def _gate(self, harness_id: int) -> Decision | None:
        """The gate's decision on a scored candidate (None: a sequential test not done yet);
        computed from its stored rollouts, so a resumed phase decides as before."""
        if harness_id in self.decisions:
            return self.decisions[harness_id]
        with self.wb.session() as s:
            if self.incumbent_means is None:
                self.incumbent_means = task_means(s, self.evaluation_ids[self.incoming.id])
            means = task_means(s, self.evaluation_ids[harness_id])
        cfg = self.cfg
        if cfg.acceptance == "sequential":
            decision = sequential_on(self.incumbent_means, means, self.order, cfg.false_commit)
        else:
            decision = decide(cfg.acceptance, self.incumbent_means, means, cfg.false_commit)
        if decision is not None:
            self.decisions[harness_id] = decision
        return decision

    async def _iterate(self, iteration: int, record: SearchIteration | None) -> SearchIteration:
        started = time.monotonic()
        if record is None:  # propose and store the candidates with their iteration, at once
            self.say(
                "phase",
                {
                    "what": f"harness iteration {iteration}: "
                    f"{self.proposer.name} proposes {self.cfg.candidates}"
                },
            )
            proposal = await self._propose(iteration)
            record = await self._store(proposal, iteration, time.monotonic() - started)
        candidates = [
            h
            for h in self.harnesses.values()
            if h.phase_id == self.phase.id and h.iteration == iteration
        ]
        valid = [h for h in candidates if h.valid]
        if self.cfg.smoke and valid:
            self.say("phase", {"what": f"smoke-testing {len(valid)} candidates"})
            # One at a time: a candidate that spins the CPU must not time out its siblings.
            valid = [h for h in valid if await self._smoke(h)]
        if valid:
            self.say(
                "phase",
                {"what": f"evaluating {len(valid)} candidates on {len(self.tasks)} harness tasks"},
            )
            await asyncio.gather(*(self._score(h) for h in valid))
        record.n_candidates, record.n_valid = len(candidates), len(valid)
        return await self._finish_iteration(record, started)

    async def _propose(self, iteration: int) -> Proposal:
        ctx = SearchContext(
            workbench=self.wb,
            run_id=self.phase.run_id,
            phase_id=self.phase.id,
            round=self.phase.round,
            iteration=iteration,
            k=self.cfg.candidates,
            domain=self.domain,
            checkpoint_id=self.checkpoint.id,
            accepted=self.harnesses[self._accepted().harness_id],
            incoming=self.incoming,
            scores=dict(self.scores),
            frontier=frontier(list(self.scores.values())),
            shas=self._run_column(Harness.sha),
            proposals_before=self._proposals_before(),
        )
        limit = proposer_timeout(self.cfg)  # the claude-code preset's 2400 s unless set
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result of an
            # instant proposer and drops a SIGTERM's cancel that came at the same moment
            async with asyncio.timeout(limit):
                return await self.proposer.propose(ctx)
        except TimeoutError:
            return Proposal(error=f"the proposer did not finish within {limit:g} s")
        except Exception as exc:  # noqa: BLE001 - a proposer failure is data, not a crash
            log.exception("proposer %s failed", self.proposer.name)
            return Proposal(error=f"{type(exc).__name__}: {exc}")

    def _proposals_before(self) -> int:
        with self.wb.session() as s:
            return s.exec(
                select(func.count())
                .select_from(SearchIteration)
                .where(SearchIteration.run_id == self.phase.run_id, SearchIteration.iteration > 0)
            ).one()

    def _run_column(self, column) -> set:
        with self.wb.session() as s:
            return set(s.exec(select(column).where(Harness.run_id == self.phase.run_id)))

    async def _store(self, proposal: Proposal, iteration: int, wall_s: float) -> SearchIteration:
        """Every candidate becomes a Harness row (invalid ones carry their error), written with
        the iteration's record in one transaction."""
        run_ids = self._run_column(Harness.id)  # parents may come from earlier rounds
        shas = {h.sha: h for h in self.harnesses.values()}
        rows = []
        for candidate in proposal.candidates[: self.cfg.candidates]:
            rows.append(self._candidate_row(candidate, iteration, run_ids, shas))
            shas.setdefault(rows[-1].sha, rows[-1])
        record = SearchIteration(
            run_id=self.phase.run_id,
            phase_id=self.phase.id,
            iteration=iteration,
            proposer=self.proposer.name,
            status="running",
            error=proposal.error,
            prompt_tokens=proposal.prompt_tokens,
            completion_tokens=proposal.completion_tokens,
            cost_usd=proposal.cost_usd,
            proposer_wall_s=wall_s,
            report=proposal.report or None,
        )
        record = await self.wb.writer.insert(record, *rows)
        self.harnesses.update({h.id: h for h in rows})
        self.iterations.append(record)
        return record

    def _candidate_row(
        self, candidate: Candidate, iteration: int, run_ids: set[int], shas: dict[str, Harness]
    ) -> Harness:
        error = (
            candidate.error
            or static_error(candidate.code, self.domain.forbidden_modules, self.cfg.max_code_bytes)
            or fixed_parts_error(candidate.code, self.incoming.code, self.cfg.fixed_functions)
        )
        code = (candidate.code or "")[: self.cfg.max_code_bytes]
        twin = shas.get(sha_of(code))
        if error is None and twin is not None:
            error = f"duplicate of harness #{twin.id} ({twin.name})" if twin.id else "duplicate"
        parents = [p for p in candidate.parent_ids if p in run_ids] or [self._accepted().harness_id]
        return Harness(
            run_id=self.phase.run_id,
            parent_id=parents[0],
            parent_ids=parents,
            name=candidate.name[:120] or f"candidate-{iteration}",
            code=code,
            sha=sha_of(code),
            hypothesis=candidate.hypothesis or None,
            proposer=self.proposer.name,
            valid=error is None,
            error=error,
            phase_id=self.phase.id,
            iteration=iteration,
            axis=candidate.axis or None,
            changes=candidate.changes or None,
        )

    async def _evaluation(
        self, harness: Harness, split: str, k: int, tasks, wall_s: float | None = None
    ) -> Evaluation:
        """The phase's evaluation of a harness on a split: the finished one, the interrupted one
        completed, or a new one."""
        evaluator = self.wb.evaluator()
        same = (
            Evaluation.harness_id == harness.id,
            Evaluation.checkpoint_id == self.checkpoint.id,
            Evaluation.split == split,
        )
        with self.wb.session() as s:
            evaluation = s.exec(
                select(Evaluation).where(Evaluation.phase_id == self.phase.id, *same)
            ).first()
            if evaluation is None:  # scored the same way by an earlier phase: no need to redo it
                evaluation = s.exec(
                    select(Evaluation).where(
                        Evaluation.run_id == self.phase.run_id,
                        *same,
                        Evaluation.status == "done",
                        Evaluation.k == k,
                        Evaluation.n_tasks == len(tasks),
                    )
                ).first()
        if evaluation is None:
            evaluation = await evaluator.create(
                self.phase.run_id,
                harness,
                self.checkpoint,
                self.domain,
                split,
                k,
                tasks=tasks,
                phase_id=self.phase.id,
            )
        elif evaluation.status == "done":
            return evaluation
        return await evaluator.complete(
            evaluation,
            harness,
            self.checkpoint,
            self.domain,
            lambda r: self.say("rollout", {"rollout": r}),
            wall_s,
        )

    async def _smoke(self, harness: Harness) -> bool:
        """One rollout in the sandbox: a crash, a timeout or a refused import invalidates."""
        evaluation = await self._evaluation(
            harness, "smoke", 1, self.tasks[:1], self.cfg.smoke_timeout_s
        )
        with self.wb.session() as s:
            rollout = s.exec(select(Rollout).where(Rollout.evaluation_id == evaluation.id)).one()
        if rollout.status in ("pass", "fail"):
            return True
        error = f"smoke rollout #{rollout.id}: {rollout.reason}: {(rollout.error or '')[-500:]}"
        self.harnesses[harness.id] = await self.wb.writer.run(
            lambda s: _invalidate(s, harness.id, error)
        )
        return False

    async def _score(self, harness: Harness) -> Score:
        if self.cfg.acceptance == "sequential" and harness.id != self.incoming.id:
            evaluation = await self._sequential(harness)
        else:
            evaluation = await self._evaluation(harness, "harness", self.cfg.samples, self.tasks)
        self.evaluation_ids[harness.id] = evaluation.id
        score = Score(harness.id, evaluation.mean_at_k, evaluation.mean_turns)
        self.scores[harness.id] = score
        return score

    async def _sequential(self, harness: Harness) -> Evaluation:
        """Evaluate a candidate `sequential_chunk` tasks at a time, in the test's order, until
        the gate commits or gives up: only the tasks it needed are run."""
        by_id = {t.id: t for t in self.tasks}
        order = [by_id[i] for i in self.order]
        chunk = self.cfg.sequential_chunk
        evaluation = await self._evaluation(harness, "harness", self.cfg.samples, order[:chunk])
        evaluator = self.wb.evaluator()
        while True:
            self.evaluation_ids[harness.id] = evaluation.id
            if self._gate(harness.id) is not None or evaluation.n_tasks >= len(order):
                return evaluation
            more = order[evaluation.n_tasks : evaluation.n_tasks + chunk]
            evaluation = await evaluator.extend(evaluation, more)
            evaluation = await evaluator.complete(
                evaluation,
                harness,
                self.checkpoint,
                self.domain,
                lambda r: self.say("rollout", {"rollout": r}),
            )

    def _gate_record(self, iteration: int) -> dict | None:
        """The gate's decision on each scored candidate of the iteration, with the rollouts its
        evaluation spent; None for greedy's iteration 0."""
        if iteration == 0:
            return None
        scored = [
            h
            for h in self.harnesses.values()
            if h.iteration == iteration and h.phase_id == self.phase.id and h.id in self.scores
        ]
        with self.wb.session() as s:
            spent = {
                h.id: s.get(Evaluation, self.evaluation_ids[h.id]).n_tasks * self.cfg.samples
                for h in scored
            }
        return {
            str(h.id): {**self._gate(h.id).record(), "rollouts": spent[h.id]}
            for h in scored
            if self._gate(h.id) is not None
        }

    async def _finish_iteration(self, record: SearchIteration, started: float) -> SearchIteration:
        front = frontier(list(self.scores.values()))
        record.status = "failed" if record.error else "done"
        record.best_harness_id = front[0].harness_id
        record.best_success = front[0].success
        record.accepted_harness_id = self._accepted().harness_id
        record.frontier = [vars(p) for p in front]
        record.gate = self._gate_record(record.iteration)
        record.wall_s = (record.wall_s or 0.0) + time.monotonic() - started
        record.finished_at = now()
        phase_id, run_id = self.phase.id, self.phase.run_id

        def write(s):
            rollouts = phase_rollouts(s, phase_id)
            s.get(Phase, phase_id).rollouts = rollouts
            s.add(
                Metric(
                    run_id=run_id,
                    series="harness/best_success",
                    x=record.iteration,
                    rollouts=rollouts,
                    y=record.best_success,
                )
            )
            return s.merge(record)

        record = await self.wb.writer.run(write)
        self.iterations = [i for i in self.iterations if i.iteration != record.iteration] + [record]
        self.say("iteration", {"iteration": record})
        return record


def _invalidate(s, harness_id: int, error: str) -> Harness:
    harness = s.get(Harness, harness_id)
    harness.valid = False
    harness.error = error
    return harness


async def search_file(
    workbench: "Workbench",
    harness_path: Path,
    domain_name: str,
    cfg: SearchConfig,
    iterations: int,
    progress: Progress | None = None,
    run_name: str | None = None,
) -> Phase:
    """`whale search`: a run of kind "search" holding one harness phase of `iterations`
    proposing iterations from a harness file."""
    from app.domains import get_domain
    from app.search.proposers import make_proposer

    domain = get_domain(domain_name)
    proposer = make_proposer(cfg, workbench)
    name = run_name or f"search {harness_path.name}"
    config = {"harness": str(harness_path), "search": cfg.model_dump(), "iterations": iterations}

    async def fixed_iterations(done: list[SearchIteration]) -> str | None:
        return "fixed" if max(i.iteration for i in done) >= iterations else None

    async with single_run(
        workbench, name, "search", domain_name, harness_path, config, "harness"
    ) as made:
        return await harness_phase(
            workbench,
            made.phase,
            made.harness,
            made.checkpoint,
            domain,
            cfg,
            proposer,
            fixed_iterations,
            progress,
        )
