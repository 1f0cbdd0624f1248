"""One harness phase (reference/whale.md, "Harness phase"):

iteration 0 re-evaluates the incoming harness under the current checkpoint; each later iteration
proposes K candidates, stores every one of them (invalid ones with their error), smoke-tests the
valid ones in the sandbox, evaluates the survivors on the harness split, and updates the Pareto
frontier and the accepted harness. A proposer failure is recorded on its iteration; the phase
goes on or ends per `on_proposer_error`.
"""
import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from sqlmodel import select

from app.config import SearchConfig
from app.db.schema import Checkpoint, Harness, Metric, Phase, Rollout, SearchIteration, now
from app.domains import Domain
from app.rollout.evaluate import sha_of
from app.search.candidate import Candidate, Proposal
from app.search.context import SearchContext
from app.search.pareto import Score, accept, frontier
from app.search.validate import static_error

log = logging.getLogger(__name__)

Progress = Callable[[str, dict], None]
# Asked before each proposing iteration; returns why the phase must end now, or None.
EndCheck = Callable[[list[SearchIteration]], Awaitable[str | None]]


async def harness_phase(workbench, phase: Phase, incoming: Harness, checkpoint: Checkpoint,
                        domain: Domain, cfg: SearchConfig, proposer,
                        progress: Progress | None = None,
                        end_check: EndCheck | None = None) -> Phase:  # fmt: skip
    """Run the phase to its end; returns the finished Phase (harness_out_id = accepted)."""
    return await _Search(workbench, phase, incoming, checkpoint, domain, cfg, proposer,
                         progress, end_check).run()  # fmt: skip


class _Search:
    def __init__(self, workbench, phase, incoming, checkpoint, domain, cfg, proposer, progress,
                 end_check):  # fmt: skip
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
        self.harnesses: dict[int, Harness] = {incoming.id: incoming}
        self.scores: dict[int, Score] = {}
        self.iterations: list[SearchIteration] = []
        self.rollouts = phase.rollouts

    async def run(self) -> Phase:
        score = await self._score(self.incoming, 0)
        self.incoming_score = score
        self.accepted = score
        await self._record(SearchIteration(
            run_id=self.phase.run_id, phase_id=self.phase.id, iteration=0, proposer="incoming",
            status="done", n_candidates=1, n_valid=1), started=time.monotonic())  # fmt: skip
        reason = "fixed"
        for iteration in range(1, self.cfg.iterations + 1):
            why = await self.end_check(self.iterations) if self.end_check else None
            if why:
                reason = why
                break
            record, proposal = await self._iterate(iteration)
            if proposal.error and self.cfg.on_proposer_error == "end":
                reason = "proposer_error"
                break
            if not proposal.error and not proposal.candidates:
                reason = "exhausted"  # the proposer has nothing left to try
                break
        return await self._finish(reason)

    async def _iterate(self, iteration: int) -> tuple[SearchIteration, Proposal]:
        started = time.monotonic()
        self.say("phase", {"what": f"harness iteration {iteration}/{self.cfg.iterations}: "
                           f"{self.proposer.name} proposes {self.cfg.candidates}"})  # fmt: skip
        proposal = await self._propose(iteration)
        proposer_wall_s = time.monotonic() - started
        stored = [await self._store(c, iteration) for c in proposal.candidates[: self.cfg.candidates]]
        valid = [h for h in stored if h.valid]
        if self.cfg.smoke and valid:
            self.say("phase", {"what": f"smoke-testing {len(valid)} candidates"})
            # One at a time: a candidate that spins the CPU must not time out its siblings.
            valid = [h for h in valid if await self._smoke(h)]
        if valid:
            self.say("phase", {"what": f"evaluating {len(valid)} candidates on "
                               f"{len(self.tasks)} harness tasks"})  # fmt: skip
            await asyncio.gather(*(self._score(h, iteration) for h in valid))
        record = SearchIteration(
            run_id=self.phase.run_id, phase_id=self.phase.id, iteration=iteration,
            proposer=self.proposer.name, status="failed" if proposal.error else "done",
            error=proposal.error, n_candidates=len(stored), n_valid=len(valid),
            prompt_tokens=proposal.prompt_tokens, completion_tokens=proposal.completion_tokens,
            cost_usd=proposal.cost_usd, proposer_wall_s=proposer_wall_s,
            report=proposal.report or None,
        )  # fmt: skip
        return await self._record(record, started), proposal

    async def _propose(self, iteration: int) -> Proposal:
        ctx = SearchContext(
            workbench=self.wb, run_id=self.phase.run_id, phase_id=self.phase.id,
            round=self.phase.round, iteration=iteration, k=self.cfg.candidates,
            domain=self.domain, checkpoint_id=self.checkpoint.id,
            accepted=self.harnesses[self.accepted.harness_id], incoming=self.incoming,
            scores=dict(self.scores), frontier=frontier(list(self.scores.values())),
            shas=self._run_shas(),
        )  # fmt: skip
        try:
            return await asyncio.wait_for(self.proposer.propose(ctx), self.cfg.proposer_timeout_s)
        except asyncio.TimeoutError:
            return Proposal(error=f"the proposer did not finish within "
                            f"{self.cfg.proposer_timeout_s:g} s")  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a proposer failure is data, not a crash
            log.exception("proposer %s failed", self.proposer.name)
            return Proposal(error=f"{type(exc).__name__}: {exc}")

    def _run_shas(self) -> set[str]:
        with self.wb.session() as s:
            return set(s.exec(select(Harness.sha).where(Harness.run_id == self.phase.run_id)))

    def _run_harness_ids(self) -> set[int]:
        with self.wb.session() as s:
            return set(s.exec(select(Harness.id).where(Harness.run_id == self.phase.run_id)))

    async def _store(self, candidate: Candidate, iteration: int) -> Harness:
        """Every candidate becomes a Harness row; invalid ones carry their error."""
        error = candidate.error or static_error(candidate.code, self.domain.forbidden_modules,
                                                self.cfg.max_code_bytes)  # fmt: skip
        code = candidate.code or ""
        if error is None:
            twin = next((h for h in self.harnesses.values() if h.sha == sha_of(code)), None)
            if twin is not None:
                error = f"duplicate of harness #{twin.id} ({twin.name})"
        # Parents may come from earlier rounds (the agent reads the whole archive).
        run_ids = self._run_harness_ids()
        known = [p for p in candidate.parent_ids if p in run_ids] or [self.accepted.harness_id]
        harness = Harness(
            run_id=self.phase.run_id, parent_id=known[0], parent_ids=known,
            name=candidate.name[:120] or f"candidate-{iteration}", code=code[: self.cfg.max_code_bytes],
            sha=sha_of(code), hypothesis=candidate.hypothesis or None, proposer=self.proposer.name,
            valid=error is None, error=error, phase_id=self.phase.id, iteration=iteration,
            axis=candidate.axis or None, changes=candidate.changes or None,
        )  # fmt: skip
        harness = await self.wb.writer.run(lambda s: _added(s, harness))
        self.harnesses[harness.id] = harness
        return harness

    async def _smoke(self, harness: Harness) -> bool:
        """One rollout in the sandbox: a crash, a timeout or a refused import invalidates."""
        evaluation = await self.wb.evaluator().evaluate(
            self.phase.run_id, harness, self.checkpoint, self.domain, "smoke", 1,
            tasks=self.tasks[:1], wall_s=self.cfg.smoke_timeout_s, phase_id=self.phase.id,
        )  # fmt: skip
        self.rollouts += evaluation.n_tasks
        with self.wb.session() as s:
            rollout = s.exec(select(Rollout).where(Rollout.evaluation_id == evaluation.id)).one()
        if rollout.status in ("pass", "fail"):
            return True
        error = f"smoke rollout #{rollout.id}: {rollout.reason}: {(rollout.error or '')[-500:]}"
        updated = await self.wb.writer.run(lambda s: _invalidate(s, harness.id, error))
        self.harnesses[harness.id] = updated
        return False

    async def _score(self, harness: Harness, iteration: int) -> Score:
        evaluation = await self.wb.evaluator().evaluate(
            self.phase.run_id, harness, self.checkpoint, self.domain, "harness", self.cfg.samples,
            tasks=self.tasks, phase_id=self.phase.id,
            progress=lambda r: self.say("rollout", {"rollout": r}),
        )  # fmt: skip
        self.rollouts += evaluation.n_tasks * evaluation.k
        score = Score(harness.id, evaluation.mean_at_k, evaluation.mean_turns)
        self.scores[harness.id] = score
        return score

    async def _record(self, record: SearchIteration, started: float) -> SearchIteration:
        points = list(self.scores.values())
        self.accepted = accept(self.incoming_score, points)
        front = frontier(points)
        record.best_harness_id = front[0].harness_id
        record.best_success = front[0].success
        record.accepted_harness_id = self.accepted.harness_id
        record.frontier = [vars(p) for p in front]
        record.wall_s = time.monotonic() - started
        record.finished_at = now()
        rollouts, phase_id, run_id = self.rollouts, self.phase.id, self.phase.run_id
        metric = Metric(run_id=run_id, series="harness/best_success", x=record.iteration,
                        rollouts=rollouts, y=record.best_success)  # fmt: skip
        record = await self.wb.writer.run(lambda s: _record_iteration(s, record, metric, phase_id,
                                                                      rollouts))  # fmt: skip
        self.iterations.append(record)
        self.say("iteration", {"iteration": record})
        return record

    async def _finish(self, reason: str) -> Phase:
        out = self.accepted.harness_id
        return await self.wb.writer.run(lambda s: _end_phase(s, self.phase.id, reason, out,
                                                             self.rollouts))  # fmt: skip


def _added(s, row):
    s.add(row)
    s.flush()
    return row


def _invalidate(s, harness_id: int, error: str) -> Harness:
    harness = s.get(Harness, harness_id)
    harness.valid = False
    harness.error = error
    return harness


def _record_iteration(s, record: SearchIteration, metric: Metric, phase_id: int,
                      rollouts: int) -> SearchIteration:  # fmt: skip
    s.add_all([record, metric])
    s.get(Phase, phase_id).rollouts = rollouts
    s.flush()
    return record


def _end_phase(s, phase_id: int, reason: str, harness_out_id: int, rollouts: int) -> Phase:
    phase = s.get(Phase, phase_id)
    phase.status = "done"
    phase.ended_reason = reason
    phase.harness_out_id = harness_out_id
    phase.rollouts = rollouts
    phase.finished_at = now()
    return phase



async def search_file(workbench, harness_path, domain_name: str, cfg: SearchConfig,
                      progress: Progress | None = None, run_name: str | None = None,
                      on_start: Callable[[object], None] | None = None) -> Phase:  # fmt: skip
    """One harness phase from a harness file, as a new run of kind "search" (`whale search`)."""
    from app.domains import get_domain
    from app.search.proposers import make_proposer

    domain = get_domain(domain_name)
    proposer = make_proposer(cfg, workbench)
    run, harness, checkpoint = await workbench.start_run(
        run_name or f"search {harness_path.name}", "search", domain_name, harness_path,
        {"harness": str(harness_path), "search": cfg.model_dump()},
    )  # fmt: skip
    if on_start:
        on_start(run)
    phase = await workbench.writer.run(lambda s: _added(s, Phase(
        run_id=run.id, kind="harness", round=1, harness_in_id=harness.id,
        checkpoint_in_id=checkpoint.id, checkpoint_out_id=checkpoint.id)))  # fmt: skip
    try:
        phase = await harness_phase(workbench, phase, harness, checkpoint, domain, cfg, proposer,
                                    progress)  # fmt: skip
    except BaseException:
        await workbench.finish_run(run.id, "failed")
        raise
    await workbench.finish_run(run.id, "done")
    return phase
