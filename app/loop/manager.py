"""The loops of one server: started from the API, resumed when the server starts again."""

import asyncio
import logging
import time

from app.db.schema import Event, Run
from app.loop.driver import Loop, start_run, unfinished_runs
from app.loop.experiment import (
    Experiment,
    ExperimentError,
    check_generation,
    config_hash,
    incoming_harness,
    parse,
)

log = logging.getLogger(__name__)


class LoopManager:
    def __init__(self, workbench):
        self.wb = workbench
        self.tasks: dict[int, asyncio.Task] = {}
        self._starting = asyncio.Lock()

    async def ensure_started(self) -> None:
        """Start the model, gateway and sandboxes on first need: a server that only shows
        finished runs never loads a model."""
        async with self._starting:
            if self.wb.gateway is None:
                await self.wb.start()

    async def resume_all(self) -> list[int]:
        """Pick up every unfinished experiment run of the store."""
        runs = unfinished_runs(self.wb)
        if runs and self.wb.gateway is None:
            # the model loads first (seconds to minutes): the runs' pages say what they wait on
            backend = self.wb.settings.backend_name
            ids = [r.id for r in runs]
            await self.wb.writer.run(lambda s: _tell(s, ids, "model_loading", {"backend": backend}))
            started = time.monotonic()
            await self.ensure_started()
            load_s = round(time.monotonic() - started, 1)
            await self.wb.writer.run(lambda s: _tell(s, ids, "model_ready", {"load_s": load_s}))
        for run in runs:
            self._launch(run.id)
        return [r.id for r in runs]

    async def start(self, toml_text: str, source: str = "api") -> Run:
        """Validate an experiment posted over HTTP (ExperimentError names the bad key) and start
        its run; its harness is an archive file, a stored harness or code, never a server path."""
        experiment = parse(toml_text, source, web=True)
        if experiment.seeds:  # one run per seed, one after the other, is the command line's job
            raise ExperimentError(
                f"{source}: seeds: a seed group runs from the command line (whale run FILE); "
                "here one run starts: set `seed` instead"
            )
        self.check_runtime(experiment)
        check_generation(experiment, self.wb.backend_name, source)
        with self.wb.session() as s:
            incoming = incoming_harness(experiment, s, source)
        await self.ensure_started()
        run = await start_run(self.wb, experiment, toml_text, config_hash(toml_text), incoming)
        self._launch(run.id)
        return run

    def check_runtime(self, experiment: Experiment) -> None:
        """A server runs one backend and sandbox; an experiment asking for others is refused."""
        s = self.wb.settings
        wanted = experiment.runtime.model_dump(exclude_none=True)
        have = {
            "backend": s.backend,
            "llm_url": s.llm_url,
            "llm_model": s.llm_model,
            "sandbox": s.sandbox,
        }
        wrong = [
            f"runtime.{k} = {v!r} (this server: {have[k]!r})"
            for k, v in wanted.items()
            if have[k] != v
        ]
        if wrong:
            raise ExperimentError("the experiment asks for another runtime: " + "; ".join(wrong))

    def _launch(self, run_id: int) -> None:
        task = asyncio.create_task(Loop(self.wb, run_id).run(), name=f"run-{run_id}")
        self.tasks[run_id] = task
        task.add_done_callback(lambda t: self.tasks.pop(run_id, None))

    async def stop(self) -> None:
        """Server shutdown: loops are cancelled where they are; they resume on the next start."""
        for task in list(self.tasks.values()):
            task.cancel("the server shut down")
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


def _tell(s, run_ids: list[int], kind: str, detail: dict) -> None:
    s.add_all(Event(run_id=r, kind=kind, detail=detail) for r in run_ids)
