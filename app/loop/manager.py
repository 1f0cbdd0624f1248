"""How a server's runs get driven: the web submits a run, the loop worker drives it.

`submit` checks an experiment posted over HTTP and stores its run as `created`, with its first
harness; nothing else happens in the web's process. The `LoopWorker` drives every unfinished
experiment run of the store: those it finds when it starts (a restarted server) and those
submitted since, which it notices within half a second. It loads the model on first need.

Under `whale serve` the worker is a process of its own (`python -m app.loop`, kept by
`LoopProcess`): the pages are then never queued behind the loop's writer, gateway and evaluator
on one event loop and one interpreter lock (docs/benchmarks.md, "Reads under full write load").
Control requests and new runs reach it through the store, as they already reach a loop.
`whale demo` runs a worker in its own process.
"""

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from app.children import die_with_parent
from app.db.schema import Event, Run
from app.experiment_schema import Experiment
from app.interrupts import end_on_sigterm, interrupt
from app.loop.driver import Loop, new_experiment_run, unfinished_runs
from app.loop.experiment_file import (
    ExperimentError,
    check_generation,
    config_hash,
    incoming_harness,
    parse,
)

if TYPE_CHECKING:
    from app.workbench import Workbench

log = logging.getLogger(__name__)
POLL_S = 0.5  # how often the worker looks for submitted runs


async def submit(
    workbench: "Workbench",
    toml_text: str,
    source: str = "api",
    force: bool = False,
    fork_from: str = "",
) -> Run:
    """Check an experiment posted over HTTP (ExperimentError names the bad key) and store its
    run, `created`, for the worker to start; its harness is an archive file, a stored harness or
    code, never a server path. `fork_from`: "RUN:PHASE", the fork point it starts from instead
    (app/loop/fork.py)."""
    from app.loop.fork import fork_point, parse_point

    point = parse_point(fork_from) if fork_from.strip() else None
    experiment = parse(toml_text, source, web=True, fork=point is not None)
    if experiment.seeds:  # one run per seed, one after the other, is the command line's job
        raise ExperimentError(
            f"{source}: seeds: a seed group runs from the command line (whale run FILE); "
            "here one run starts: set `seed` instead"
        )
    incoming = admit(workbench, experiment, source, force)
    with workbench.session() as s:
        fork = fork_point(s, *point, experiment.domain) if point else None
    return await workbench.writer.run(
        lambda s: new_experiment_run(
            s, experiment, toml_text, config_hash(toml_text), incoming, fork=fork
        )
    )


def admit(
    workbench: "Workbench", experiment: Experiment, source: str, force: bool = False
) -> tuple[str, str]:
    """The one check of an experiment before its run is made, from the web or the command line:
    the runtime it asks for is this process's, the backend takes its [sampling], the machine
    fits the plan (unless forced), and its incoming harness is a harness. Returns that harness
    (name, code); ExperimentError names what is wrong. Nothing is stored."""
    check_runtime(workbench.settings, experiment)
    check_generation(experiment, workbench.backend_name, source)
    check_fit(workbench.settings, experiment, source, force)
    with workbench.session() as s:
        return incoming_harness(experiment, s, source)


def check_runtime(settings, experiment: Experiment) -> None:
    """A server runs one backend and sandbox; an experiment asking for others is refused."""
    wanted = experiment.runtime.model_dump(exclude_none=True)
    have = {
        "backend": settings.backend,
        "llm_url": settings.llm_url,
        "llm_model": settings.llm_model,
        "sandbox": settings.sandbox,
        "vllm_max_model_len": settings.vllm_max_model_len,
        "colocate": settings.colocate,
    }
    wrong = [
        f"runtime.{k} = {v!r} (this server: {have[k]!r})" for k, v in wanted.items() if have[k] != v
    ]
    if wrong:
        raise ExperimentError("the experiment asks for another runtime: " + "; ".join(wrong))


def check_fit(settings, experiment: Experiment, source: str, force: bool) -> None:
    """Refuse a plan this machine cannot run (app/fit.py), unless forced."""
    from app import fit

    if force:
        return
    refusals = fit.check(experiment, settings).refusals
    if refusals:
        raise ExperimentError(
            f"{source}: this plan cannot run here: {'; '.join(refusals)} (start it anyway: force)"
        )


class LoopWorker:
    def __init__(self, workbench: "Workbench"):
        self.wb = workbench
        self.tasks: dict[int, asyncio.Task] = {}
        self.launched: set[int] = set()  # a run's loop runs once per worker: one that ended
        # with its run unfinished (cancelled, or a bug) is not started again here

    async def serve(self) -> None:
        """Drive the store's runs until cancelled; then their loops stop where they are."""
        try:
            while True:
                await self.pick_up()
                await asyncio.sleep(POLL_S)
        finally:
            await self.stop()

    async def pick_up(self) -> list[int]:
        """Start a loop for every unfinished run not driven yet; their ids."""
        runs = [r for r in unfinished_runs(self.wb) if r.id not in self.launched]
        if not runs:
            return []
        ids = [r.id for r in runs]
        if self.wb.gateway is None:
            # the model loads first (seconds to minutes): the runs' pages say what they wait on
            backend = self.wb.settings.backend_name
            await self.wb.writer.run(lambda s: _tell(s, ids, "model_loading", {"backend": backend}))
            started = time.monotonic()
            try:
                await self.wb.start()
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
                await self.wb.writer.run(lambda s: _tell(s, ids, "model_failed", {"why": why}))
                raise
            load_s = round(time.monotonic() - started, 1)
            await self.wb.writer.run(lambda s: _tell(s, ids, "model_ready", {"load_s": load_s}))
        resumed = [r.id for r in runs if r.status != "created"]
        if resumed:
            self.wb.say(f"resumed runs {', '.join(map(str, resumed))}")
        for run_id in ids:
            self.launched.add(run_id)
            task = asyncio.create_task(Loop(self.wb, run_id).run(), name=f"run-{run_id}")
            self.tasks[run_id] = task
            task.add_done_callback(lambda t, run_id=run_id: self.tasks.pop(run_id, None))
        return ids

    async def stop(self) -> None:
        """Loops are cancelled where they are (their runs resume on the next start)."""
        for task in list(self.tasks.values()):
            interrupt(task, "the server shut down")
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


def _tell(s, run_ids: list[int], kind: str, detail: dict) -> None:
    s.add_all(Event(run_id=r, kind=kind, detail=detail) for r in run_ids)


class LoopProcess:
    """The loop worker of `whale serve`, as a child process at a lower CPU priority (`nice`):
    started with the server, stopped with it (SIGTERM, then its grace), started again when it
    dies (at most MAX_CRASHES times in CRASH_WINDOW s). It dies with the server (a parent-death
    signal) and holds the store's lock with it, so no second server starts while it writes."""

    MAX_CRASHES = 3
    CRASH_WINDOW = 600.0

    def __init__(self, lock, say, nice: int = 0):
        self.lock = lock
        self.nice = nice
        self.say = say
        self.proc: subprocess.Popen | None = None
        self._watch: asyncio.Task | None = None
        self._crashes: list[float] = []

    def start(self) -> None:
        self._spawn()
        self._watch = asyncio.create_task(self._keep())

    def _spawn(self) -> None:
        # a session of its own: a Ctrl-C in the terminal reaches the server, which stops it
        def prepare():
            die_with_parent()
            os.nice(self.nice)  # the pages first (WHALE_LOOP_NICE)

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.loop"],
            pass_fds=(self.lock.fileno(),),
            preexec_fn=prepare,
            start_new_session=True,
        )

    async def _keep(self) -> None:
        while True:
            code = await asyncio.to_thread(self.proc.wait)
            now = time.monotonic()
            self._crashes = [t for t in self._crashes if now - t < self.CRASH_WINDOW] + [now]
            if len(self._crashes) > self.MAX_CRASHES:
                self.say(
                    f"the loop process exited with code {code} {len(self._crashes)} times in "
                    f"{self.CRASH_WINDOW:g} s; not starting it again: runs wait, pages still answer"
                )
                return
            self.say(f"the loop process exited with code {code}; starting it again")
            self._spawn()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    async def stop(self, grace_s: float) -> None:
        """SIGTERM: its loops stop and record why; past `grace_s` it is killed."""
        if self._watch:
            self._watch.cancel()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)


def main() -> None:
    """`python -m app.loop`: the loop worker over $WHALE_HOME, until SIGTERM."""
    import uvloop

    from app.workbench import make_workbench

    async def work():
        end_on_sigterm(
            asyncio.current_task(),
            "the runs resume when the server starts again",
            why="the server shut down",
        )
        workbench = make_workbench()
        try:
            await LoopWorker(workbench).serve()
        finally:
            await workbench.stop()

    try:
        uvloop.run(work())
    except asyncio.CancelledError:
        pass  # stopped by the server, as asked: exit code 0
