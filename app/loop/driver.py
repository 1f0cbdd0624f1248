"""The loop driver: one run of an experiment, from the database state to its end.

Everything the loop knows is in the database (run, phases, training jobs, search iterations,
evaluations), so `Loop(workbench, run_id).run()` both starts a new run and resumes one after a
crash: an unfinished phase continues where it was, a finished one is never run again, and
rollouts already recorded are kept. Control requests (app/control.py) are read from the
run row every half second; pause and stop act through the evaluator's gate (no new rollout
starts), skip, force and promote at the next step or iteration boundary.
"""

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import func
from sqlmodel import col, select

from app import control
from app.db.schema import (
    Checkpoint,
    Evaluation,
    Event,
    Harness,
    Phase,
    Rollout,
    Run,
    SearchIteration,
    now,
    utc,
)
from app.domains import get_domain
from app.experiment_schema import Experiment
from app.interrupts import why_interrupted
from app.llm.generation import Declared
from app.loop.experiment_file import stored
from app.loop.switching import harness_phase_end, weight_phase_end
from app.phases import close_open_work, plot_test_point
from app.read.dashboard import holding
from app.rollout.evaluate import RunStopped
from app.rollout.usage import (
    EXCEEDED,
    PHASE_BUDGETS,
    budget_usage,
    over_budget,
    phase_budget_left,
    spending,
    usage,
)
from app.runs import new_run
from app.search.harness_phase import harness_phase
from app.search.proposers import make_proposer
from app.trackers import open_sink
from app.training.weight_phase import steps_done, weight_phase

if TYPE_CHECKING:
    from app.workbench import Workbench

log = logging.getLogger(__name__)
POLL_S = 0.5
# The log's record of the processes that drove a run: its start, each stop and each resume.
DRIVER_EVENTS = ("run_start", "run_interrupted", "run_resumed")
# The log's record of a pause taking effect and of the resume after it.
HOLD_EVENTS = ("paused", "resumed")


class Loop:
    def __init__(
        self,
        workbench: "Workbench",
        run_id: int,
        progress: Callable[[str, dict], None] | None = None,
    ):
        self.wb = workbench
        self.run_id = run_id
        self.say = progress or (lambda kind, data: None)
        with workbench.session() as s:
            run = s.get(Run, run_id)
        self.exp = Experiment.model_validate(run.config["experiment"])  # the run's one parse
        self.declared = Declared.of_experiment(self.exp)  # how its calls run (the gateway's)
        # the incoming harness and checkpoint ids (checkpoint None: submitted, not begun)
        self.start = run.config["start"]
        # a fork goes on from its parent's phases (app/loop/fork.py): their kinds, oldest first
        self.inherited = (run.config.get("fork") or {}).get("kinds", [])
        self.created_at = run.created_at
        self.domain = get_domain(self.exp.domain)
        self.desired = run.desired or "running"
        self.command = run.command
        self._full_pause: asyncio.Future | None = None  # the pause a full disk asked for
        self._paused_logged: bool | None = None  # the log's newest hold event is "paused"
        self.trackers = None  # MLflow / W&B (app/trackers.py): poked after each write it logs

    # -- control -----------------------------------------------------------------------------

    async def _watch(self) -> None:
        """Follow the run row: what the user asked (pause, stop) and one-shot commands."""
        while True:
            with self.wb.session() as s:
                run = s.get(Run, self.run_id)
                self.desired, self.command = run.desired or "running", run.command
                status = run.status
            # written only on a change: a write per poll would also wait out a full disk here
            if self.desired == "paused" and status in ("running", "resuming"):
                await self._status("paused", only_from=("running", "resuming"))
            elif self.desired == "running" and status == "paused":
                await self._status("running", only_from=("paused",))
            await self._log_hold()
            self._disk_full()  # noticed here too when no rollout is about to start
            await asyncio.sleep(POLL_S)

    async def gate(self) -> None:
        """Before any new rollout or step: wait while paused or while the store's disk is full,
        end when stopping."""
        while self.desired == "paused" or self._disk_full():
            await asyncio.sleep(POLL_S / 2)
        if self.desired == "stopped":
            raise RunStopped()

    async def gate_now(self) -> None:
        """gate() on the run row as it is now rather than as last polled: before creating a
        phase or a test evaluation, so a stop asked while a training step ran creates nothing
        once the step ends."""
        with self.wb.session() as s:
            self.desired = s.get(Run, self.run_id).desired or "running"
        await self.gate()

    def holds(self) -> bool:
        """No new rollout may start now (the run is paused or stopping, or the disk is full)."""
        return self.desired in ("paused", "stopped") or self._disk_full()

    def _disk_full(self) -> bool:
        """Whether the store's disk is full (its writes wait, app/db/writer.py). The first time,
        the run asks itself to pause, naming the cause: that request lands when there is room
        again, and the run then stays paused until it is resumed (docs/faults.md)."""
        full = self.wb.writer.full
        if full and self._full_pause is None:
            reason = f"the disk is full: {full}"
            self._full_pause = asyncio.ensure_future(
                control.apply(self.wb.writer, self.run_id, "pause", reason, source="loop")
            )
            # refused (already paused or stopping): the log says so; nothing more to do
            self._full_pause.add_done_callback(lambda f: f.cancelled() or f.exception())
        elif not full and self._full_pause is not None and self._full_pause.done():
            self._full_pause = None
        return bool(full)

    async def _log_hold(self) -> None:
        """The log's record of when a pause took effect - the moment nothing the run started
        is running any more, as its badge turns from "pausing" to "paused" - and of the resume
        after it."""
        if self._paused_logged is None:  # a run resumed after a restart may be paused already
            with self.wb.session() as s:
                last = s.exec(
                    select(Event.kind)
                    .where(Event.run_id == self.run_id, col(Event.kind).in_(HOLD_EVENTS))
                    .order_by(col(Event.id).desc())
                    .limit(1)
                ).first()
            self._paused_logged = last == "paused"
        if self.desired == "paused" and not self._paused_logged:
            with self.wb.session() as s:
                held = holding(s, s.get(Run, self.run_id))
            if held and held[0] == "paused":
                await self.wb.writer.insert(Event(run_id=self.run_id, kind="paused", detail={}))
                self._paused_logged = True
        elif self.desired != "paused" and self._paused_logged:
            if self.desired == "running":
                await self.wb.writer.insert(Event(run_id=self.run_id, kind="resumed", detail={}))
            self._paused_logged = False

    async def _status(self, status: str, only_from: tuple[str, ...] | None = None) -> None:
        def update(s):
            run = s.get(Run, self.run_id)
            if only_from is None or run.status in only_from:
                run.status = status

        await self.wb.writer.run(update)

    async def _take_command(self, action: str, **detail) -> dict | None:
        """Consume the waiting command if it is `action`; logged as applied."""
        command = self.command
        if not command or command["action"] != action:
            return None

        def take(s):
            s.get(Run, self.run_id).command = None
            s.add(Event(run_id=self.run_id, kind="control_applied", detail={**command, **detail}))

        await self.wb.writer.run(take)
        self.command = None
        return command

    # -- the run -----------------------------------------------------------------------------

    async def run(self) -> Run:
        watcher = asyncio.create_task(self._watch())
        self.wb.gates[self.run_id] = self  # its gate() and holds(): app/rollout/evaluate.py
        self.trackers = open_sink(self.wb, self.run_id)
        status = "interrupted"
        try:
            if self.start["checkpoint_id"] is None:  # submitted over HTTP: it begins here
                run = await self.wb.writer.run(
                    lambda s: begin(s, self.run_id, self.wb.base_checkpoint(s))
                )
                self.start = run.config["start"]
            await self._log_resume()
            await self._status("resuming" if self._phases() else "running")
            await self._resume_checkpoint()
            await self._complete_test_points()
            if self.exp.test.at_start:
                await self._test_point()
            await self._status("running", only_from=("resuming",))
            reason = await self._phases_until_the_end()
            status = "done"
            return await self._finish("done", reason)
        except RunStopped:
            status = "stopped"
            return await self._finish("stopped", "stopped by request")
        except asyncio.CancelledError as exc:
            # the process is stopping (SIGTERM, Ctrl-C, a server shutting down; the message of
            # the cancel says which): the run resumes when one starts again
            why = why_interrupted(exc)
            detail = {"why": why, "pid": os.getpid()}
            self.wb.writer.add(Event(run_id=self.run_id, kind="run_interrupted", detail=detail))
            raise
        except Exception as exc:
            log.exception("run %s failed", self.run_id)
            status = "failed"
            return await self._finish("failed", f"{type(exc).__name__}: {exc}")
        finally:
            watcher.cancel()
            self.wb.gates.pop(self.run_id, None)
            if self.trackers:  # what is left is logged off the event loop, for a bounded time
                await asyncio.to_thread(self.trackers.close, status)

    async def _log_resume(self) -> None:
        """A run started again says so in its log: how its last process ended (the reason it
        wrote, or none: killed, crashed or the power went) and what it left pending."""
        with self.wb.session() as s:
            last = s.exec(
                select(Event)
                .where(Event.run_id == self.run_id, col(Event.kind).in_(DRIVER_EVENTS))
                .order_by(col(Event.id).desc())
                .limit(1)
            ).first()
            started = s.exec(select(Evaluation.id).where(Evaluation.run_id == self.run_id)).first()
            if last is not None and last.kind == "run_start" and started is None:
                return  # a new run, not a resumed one
            pending = s.exec(
                select(func.count())
                .select_from(Rollout)
                .where(Rollout.run_id == self.run_id, Rollout.status == "pending")
            ).one()
        after = (
            last.detail["why"]
            if last is not None and last.kind == "run_interrupted"
            else "an end its process did not record (kill -9, a crash or a power loss)"
        )
        detail = {"after": after, "pending_rollouts": pending, "pid": os.getpid()}
        await self.wb.writer.insert(Event(run_id=self.run_id, kind="run_resumed", detail=detail))

    async def _phases_until_the_end(self) -> str:
        while True:
            await self.gate()
            phase = next((p for p in self._phases() if p.status == "running"), None)
            if phase is None:
                why_not = self._budget_reason(0) or self._phase_budget_reason()
                if why_not:
                    return why_not
                if self._reserve() and self._budget_reason(self._weight_step_cost()):
                    return "budget used up"  # not even the last weight step fits
                phase = await self._next_phase()
                if phase is None:
                    return "the strategy has no further phase"
            self.say("phase", {"what": f"{phase.kind} phase {phase.round}"})
            if phase.kind == "weight":
                phase = await self._weight_phase(phase)
            else:
                phase = await self._harness_phase(phase)
            await self._take_command("skip", phase_id=phase.id)
            self._poke()
            if self.exp.test.after_phase:
                await self._test_point()
            if phase.ended_reason == "budget" and not self._final_weight_phase_due(phase):
                return "budget used up"
            # a harness phase next would find nothing either (harness_only, stagewise's harness
            # stage); WHALE's weight phase next still uses the budget
            if phase.ended_reason == "exhausted" and self._next_kind(self._phases()) == "harness":
                return "the proposer has nothing left to try"

    def _phases(self) -> list[Phase]:
        with self.wb.session() as s:
            return list(s.exec(select(Phase).where(Phase.run_id == self.run_id).order_by(Phase.id)))

    def _current(self) -> tuple[int, int]:
        """(harness id, checkpoint id) the next phase starts from."""
        harness_id, checkpoint_id = self.start["harness_id"], self.start["checkpoint_id"]
        for phase in self._phases():
            if phase.status == "done":
                harness_id = phase.harness_out_id or harness_id
                checkpoint_id = phase.checkpoint_out_id or checkpoint_id
        return harness_id, checkpoint_id

    def _next_kind(self, phases: list[Phase]) -> str:
        kinds = [*self.inherited, *(p.kind for p in phases)]
        strategy = self.exp.strategy
        if strategy in ("weight_only", "harness_only"):
            return strategy.removesuffix("_only")
        if strategy == "stagewise":  # one long weight stage, then harness phases
            return "harness" if kinds else "weight"
        # whale, fast_slow: weight and harness phases alternate, weight first
        return "harness" if kinds and kinds[-1] == "weight" else "weight"

    # -- ending on a weight phase ([switching] end_on = "weight") -----------------------------

    def _weight_step_cost(self) -> int:
        return self.exp.rft.prompts_per_step * self.exp.rft.samples_per_prompt

    def _harness_iteration_cost(self) -> int:
        cfg = self.exp.search
        tasks = len(self.domain.tasks("harness")[: cfg.tasks])
        return cfg.candidates * (tasks * cfg.samples + (1 if cfg.smoke else 0))

    def _reserve(self) -> int:
        """Rollouts a harness phase leaves for the run's last weight step."""
        return self._weight_step_cost() if self.exp.switching.end_on == "weight" else 0

    def _final_weight_phase_due(self, phase: Phase) -> bool:
        """A harness phase stopped by the budget's reserve: the last weight phase comes next."""
        return self.exp.switching.end_on == "weight" and phase.kind == "harness"

    async def _next_phase(self) -> Phase | None:
        await self.gate_now()  # nothing new after a stop
        phases = self._phases()
        if len(phases) >= self.exp.budget.max_phases:
            return None
        kind = self._next_kind(phases)
        if self._reserve() and (
            (phases and phases[-1].kind == "harness" and phases[-1].ended_reason == "budget")
            or (
                kind == "harness"
                and self._budget_reason(self._harness_iteration_cost() + self._reserve())
            )
        ):
            kind = "weight"  # the last phase: what is left is the reserved weight step
        forced = await self._take_command("force")
        if forced:
            kind = forced["kind"]
        harness_id, checkpoint_id = self._current()
        promoted = await self._take_command("promote")
        if promoted:
            harness_id = promoted.get("harness_id") or harness_id
            checkpoint_id = promoted.get("checkpoint_id") or checkpoint_id
            if promoted.get("checkpoint_id"):
                await self._serve(checkpoint_id)
        round_ = sum(k == kind for k in [*self.inherited, *(p.kind for p in phases)]) + 1
        phase = Phase(
            run_id=self.run_id,
            kind=kind,
            round=round_,
            harness_in_id=harness_id,
            checkpoint_in_id=checkpoint_id,
            detail={"forced": bool(forced), "promoted": promoted},
        )

        def start(s):
            s.add(phase)
            s.flush()
            detail = {"phase_id": phase.id, "kind": kind, "round": round_}
            detail |= {"harness_id": harness_id, "checkpoint_id": checkpoint_id}
            s.add(Event(run_id=self.run_id, kind="phase_start", detail=detail))
            return phase

        return await self.wb.writer.run(start)

    def _rows(self, phase: Phase) -> tuple[Harness, Checkpoint]:
        with self.wb.session() as s:
            return s.get(Harness, phase.harness_in_id), s.get(Checkpoint, phase.checkpoint_in_id)

    # -- weight phases ------------------------------------------------------------------------

    async def _weight_phase(self, phase: Phase) -> Phase:
        harness, checkpoint = self._rows(phase)
        cfg = self.exp.rft
        step_cost = cfg.prompts_per_step * cfg.samples_per_prompt

        async def end_check(rewards: list[float]) -> str | None:
            reason = self._weight_end(rewards, step_cost)
            if reason is None:
                await self.gate_now()
                self.say(
                    "phase", {"what": f"weight phase {phase.round}: RFT step {len(rewards) + 1}"}
                )
            return reason

        async def after_step(trained: Checkpoint) -> None:
            self._poke()
            every = self.exp.test.every_weight_steps
            if every and steps_done(self.wb, self.run_id) % every == 0:
                await self._test_point(harness.id, trained.id)

        return await weight_phase(
            self.wb, phase, harness, checkpoint, self.domain, cfg, end_check, after_step, self.say
        )

    def _weight_end(self, rewards: list[float], step_cost: int) -> str | None:
        if self.command and self.command["action"] in ("skip", "force"):
            return "manual"
        budget = self._budget_reason(step_cost)
        if budget:
            return "budget"
        stagewise = self.exp.strategy == "stagewise"
        if not phase_budget_left(self.exp.budget.model_dump(), self._usage(), "weight"):
            return "stage" if stagewise else "budget"  # stagewise: the harness stage is next
        if stagewise and self.exp.budget.rollouts is not None:
            share = self.exp.stagewise_weight_share * self.exp.budget.rollouts
            return "stage" if self._usage().rollouts + step_cost > share else None
        if stagewise:  # the stage lasts budget.weight_steps
            return None
        return weight_phase_end(self.exp.switching, rewards)

    def _checkpoint(self, checkpoint_id: int) -> Checkpoint:
        with self.wb.session() as s:
            return s.get(Checkpoint, checkpoint_id)

    # -- harness phases -----------------------------------------------------------------------

    async def _harness_phase(self, phase: Phase) -> Phase:
        harness, checkpoint = self._rows(phase)
        cfg = self.exp.search
        iteration_cost = self._harness_iteration_cost() + self._reserve()

        async def end_check(iterations: list[SearchIteration]) -> str | None:
            await self.gate_now()
            if self.command and self.command["action"] in ("skip", "force"):
                return "manual"
            if self._budget_reason(iteration_cost) or not phase_budget_left(
                self.exp.budget.model_dump(), self._usage(), "harness"
            ):
                return "budget"
            best = [i.best_success for i in sorted(iterations, key=lambda i: i.iteration)]
            return harness_phase_end(self.exp.switching, best)

        return await harness_phase(
            self.wb,
            phase,
            harness,
            checkpoint,
            self.domain,
            cfg,
            make_proposer(cfg, self.wb),
            end_check,
            self.say,
        )

    # -- budgets and test points --------------------------------------------------------------

    def _usage(self):
        """What the run's budgets count (a fork's may include its parent's spending)."""
        with self.wb.session() as s:
            return budget_usage(s, self.run_id)

    def _wall_s(self) -> float:
        return (now() - utc(self.created_at)).total_seconds()

    def _phase_budget_reason(self) -> str | None:
        """Why the next phase cannot run: its kind's budget in the release's units is used up
        (a forced phase is not refused here; it ends at its first check)."""
        kind = self._next_kind(self._phases())
        if phase_budget_left(self.exp.budget.model_dump(), self._usage(), kind):
            return None
        return EXCEEDED[PHASE_BUDGETS[kind]]

    def _budget_reason(self, next_cost: int) -> str | None:
        """Which budget the next unit of work (costing `next_cost` rollouts) would exceed."""
        with self.wb.session() as s:
            spent = spending(s, self.run_id, self._wall_s())
        return over_budget(self.exp.budget.model_dump(), spent, next_cost)

    async def _test_point(self, harness_id: int | None = None, checkpoint_id: int | None = None):
        """Test mean@k of a (harness, checkpoint) pair as a point of the run's curve. A pair
        already evaluated is not evaluated again: its score is plotted at the new x. After a
        stop none is created (RunStopped)."""
        await self.gate_now()
        if harness_id is None:
            harness_id, checkpoint_id = self._current()
        with self.wb.session() as s:
            evaluation = s.exec(
                select(Evaluation).where(
                    Evaluation.run_id == self.run_id,
                    Evaluation.split == "test",
                    Evaluation.harness_id == harness_id,
                    Evaluation.checkpoint_id == checkpoint_id,
                )
            ).first()
            harness, checkpoint = s.get(Harness, harness_id), s.get(Checkpoint, checkpoint_id)
        t = self.exp.test
        evaluator = self.wb.evaluator()
        if evaluation is None:
            evaluation = await evaluator.create(
                self.run_id, harness, checkpoint, self.domain, "test", t.k, t.tasks
            )
        if evaluation.status != "done":
            self.say(
                "phase",
                {"what": f"test mean@{t.k}: harness {harness_id}, checkpoint {checkpoint_id}"},
            )
            evaluation = await evaluator.complete(
                evaluation,
                harness,
                checkpoint,
                self.domain,
                lambda r: self.say("rollout", {"rollout": r}),
            )
        await self._plot(evaluation)

    async def _plot(self, evaluation: Evaluation) -> None:
        with self.wb.session() as s:  # the curve counts the run's own rollouts
            rollouts = usage(s, self.run_id).rollouts
        steps = steps_done(self.wb, self.run_id)
        wall_s = self._wall_s()
        await self.wb.writer.run(
            lambda s: plot_test_point(s, self.run_id, evaluation, rollouts, steps, wall_s)
        )
        self.say("test", {"evaluation": evaluation, "rollouts": rollouts})
        self._poke()

    def _poke(self) -> None:
        """New rows for the run's trackers to log (they read them in a thread of their own)."""
        if self.trackers:
            self.trackers.poke()

    async def _complete_test_points(self) -> None:
        """Test evaluations a crash interrupted: finish them and plot them."""
        with self.wb.session() as s:
            open_ = s.exec(
                select(Evaluation).where(
                    Evaluation.run_id == self.run_id,
                    Evaluation.split == "test",
                    Evaluation.status != "done",
                )
            ).all()
        for evaluation in open_:
            await self._test_point(evaluation.harness_id, evaluation.checkpoint_id)

    async def _resume_checkpoint(self) -> None:
        """After a restart the model server may not know the run's trained checkpoint yet."""
        _, checkpoint_id = self._current()
        running = next((p for p in self._phases() if p.status == "running"), None)
        await self._serve(running.checkpoint_in_id if running else checkpoint_id)

    async def _serve(self, checkpoint_id: int) -> None:
        checkpoint = self._checkpoint(checkpoint_id)
        if checkpoint.kind != "base" and checkpoint.path:
            await self.wb.serve_checkpoint(Path(checkpoint.path))

    async def _finish(self, status: str, reason: str) -> Run:
        def finish(s):
            close_open_work(s, self.run_id, status, reason)
            run = s.get(Run, self.run_id)
            run.status, run.finished_at = status, now()
            s.add(
                Event(
                    run_id=self.run_id, kind="run_end", detail={"status": status, "reason": reason}
                )
            )
            return run

        self.say("end", {"status": status, "reason": reason})
        return await self.wb.writer.run(finish)


def new_experiment_run(
    s,
    experiment: Experiment,
    source: str,
    config_hash: str,
    incoming: tuple[str, str],
    group: dict | None = None,
    fork: dict | None = None,
) -> Run:
    """A run of an experiment as submitted, in the writer's session `s`, `created`, with its
    incoming harness (name, code: see incoming_harness); it begins once the model is loaded
    (begin). `group`: its seed group ({name, seeds}). `fork`: the fork point it starts from
    (app/runs.py, new_run)."""
    config = {"experiment": stored(experiment), "source": source, "hash": config_hash}
    if group:
        config["group"] = group
    made = new_run(
        s,
        experiment.name,
        "experiment",
        experiment.domain,
        incoming,
        config,
        strategy=experiment.strategy,
        fork=fork,
    )
    return made.run


def begin(s, run_id: int, checkpoint: Checkpoint) -> Run:
    """The submitted run starts from `checkpoint` (the base weights; a fork: its fork point's),
    with its run_start event."""
    run = s.get(Run, run_id)
    fork = run.config.get("fork")
    checkpoint_id = fork["checkpoint_id"] if fork else checkpoint.id
    run.config = {**run.config, "start": {**run.config["start"], "checkpoint_id": checkpoint_id}}
    detail = {"strategy": run.strategy}
    if fork:
        detail["fork"] = {k: fork[k] for k in ("run_id", "phase", "harness_id", "checkpoint_id")}
    s.add(Event(run_id=run.id, kind="run_start", detail=detail))
    return run


async def start_experiment_run(
    workbench: "Workbench",
    experiment: Experiment,
    source: str,
    config_hash: str,
    incoming: tuple[str, str],
    group: dict | None = None,
    fork: dict | None = None,
) -> Run:
    """A new run of an experiment, begun at once (`whale run`: the model is loaded, so the base
    checkpoint is known); `fork`: see new_experiment_run."""

    def create(s):
        run = new_experiment_run(s, experiment, source, config_hash, incoming, group, fork)
        return begin(s, run.id, workbench.base_checkpoint(s))

    return await workbench.writer.run(create)


def unfinished_runs(workbench: "Workbench") -> list[Run]:
    """Experiment runs a stopped or crashed server left unfinished."""
    with workbench.session() as s:
        return list(
            s.exec(
                select(Run).where(
                    Run.kind == "experiment",
                    col(Run.status).in_(("created", "resuming", "running", "paused")),
                )
            )
        )
