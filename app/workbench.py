"""The one central object of a process: settings, database, writer, model, gateway, sandbox.

`whale serve`, `whale demo` and `whale eval` each build one Workbench; the web app reads
through its engine, evaluations write through its writer.
"""

import asyncio
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path

from sqlmodel import select

from app.config import Settings
from app.db import Writer, open_engine, read_session
from app.db.schema import Checkpoint, Evaluation, Event, Rollout, Run, now
from app.domains import get_domain
from app.faults import Outage
from app.gateway import Gateway
from app.llm.client import ChatEndpoint
from app.llm.local import LocalModelServer, prepare_model
from app.llm.supervisor import SupervisedServer
from app.llm.vllm import VLLMBackend
from app.progress import err
from app.rollout.admission import Admission, ServerQueue, in_flight_cap
from app.rollout.evaluate import Evaluator
from app.runs import single_run
from sandbox.pool import Limits, SandboxPool, SandboxUnavailable
from sandbox.process import ProcessLauncher

log = logging.getLogger(__name__)


class Workbench:
    def __init__(self, settings: Settings | None = None, say: Callable[[str], None] = print):
        self.settings = settings or Settings()
        self.settings.ensure_dirs()
        self.say = say
        self.engine = open_engine(self.settings.db_path)
        self.writer = Writer(self.engine)
        self.model_server: LocalModelServer | None = None
        self.vllm: VLLMBackend | None = None
        self.endpoint: ChatEndpoint | None = None
        self.gateway: Gateway | None = None
        self.sandbox: SandboxPool | None = None
        self._runtime: Path | None = None
        self._server_queue: ServerQueue | None = None
        self.admission: Admission | None = None
        self.in_flight = self.settings.concurrency  # the cap on rollouts in flight, set at start
        self.base_model_path: Path | None = None  # the weights RFT starts from
        self.gates: dict = {}  # run id -> its loop (a RunGate: pause/stop), app/loop/driver.py
        self.evaluating: Counter[int] = Counter()  # run id -> its evaluations in progress
        self._loop: asyncio.AbstractEventLoop | None = None

    def session(self):
        return read_session(self.engine)

    async def start(self) -> None:
        """Start what evaluations need: the model (attached to WHALE_LLM_URL, or the default model
        launched here), the gateway and the sandbox pool."""
        s = self.settings
        self._loop = asyncio.get_running_loop()
        if s.backend == "vllm":
            path = None if s.vllm_urls else await asyncio.to_thread(self._vllm_model_path)
            self.vllm = VLLMBackend.from_settings(s, path, say=self.say)
            self.endpoint = await self.vllm.start()
            self.base_model_path = self.vllm.base_model_path
        elif s.llm_url:
            model = s.llm_model or str(
                await asyncio.to_thread(prepare_model, s.models_dir, self.say)
            )
            if Path(model).is_dir():  # a served local folder is also what training starts from
                self.base_model_path = Path(model)
            self.endpoint = ChatEndpoint(s.llm_url, model)
            self.say(f"model: attached to {s.llm_url} ({model})")
        else:
            path = await asyncio.to_thread(prepare_model, s.models_dir, self.say)
            self.base_model_path = path
            self.model_server = LocalModelServer(
                path, s.logs_dir / "model-server.log", dtype=s.local_dtype, say=self.say
            )
            self.say(
                f"model: starting the local model server for {path.name} in {s.local_dtype}"
                f" (log: {self.model_server.log_path})"
            )
            await asyncio.to_thread(self.model_server.start)
            self.endpoint = ChatEndpoint(self.model_server.base_url, self.model_server.model)
        if self.supervised:
            self.supervised.on_event = self.record_fault
        # Files the sandboxes bind: the gateway socket, harness copies, runner control sockets.
        # A short path (Unix socket paths are limited to ~100 bytes, WHALE_HOME may be long),
        # and one the Docker engine sees at the same place when the workbench runs in a container.
        self._runtime = Path(tempfile.mkdtemp(prefix="whale-", dir=s.runtime_dir))
        self._runtime.chmod(0o755)
        self.gateway = Gateway(
            self.writer,
            self.endpoint,
            Outage("model_calls", self.record_fault),
            max_body_bytes=int(s.gateway_max_body_mb * (1 << 20)),
            max_open_calls=s.rollout_max_open_calls,
        )
        # One admission for every evaluation: they share the model server (vLLM and the local
        # server report their queue; a hosted endpoint does not, and is then not held back).
        self._server_queue = ServerQueue(
            getattr(self.endpoint, "base_urls", [self.endpoint.base_url])
        )
        batch = await self.vllm.batch_capacity() if self.vllm else None
        self.in_flight, why = in_flight_cap(
            s.concurrency, "concurrency" in s.model_fields_set, batch
        )
        self.say(f"rollouts in flight: up to {self.in_flight} ({why})")
        self.admission = Admission(self.in_flight, self._server_queue)
        await self.gateway.start(self.gateway_socket)
        launcher = await asyncio.to_thread(self._launcher)
        limits = Limits(wall_s=s.rollout_timeout, memory_mb=s.rollout_memory_mb)
        self.sandbox = SandboxPool(
            launcher,
            self.gateway_socket,
            self._runtime / "sandboxes",
            limits,
            starts=Outage("sandbox_start", self.record_fault),
            on_lost=lambda why: self.record_fault(
                "sandbox_lost", {"backend": launcher.name, "why": why}
            ),
        )

    def _vllm_model_path(self) -> Path:
        """The folder a launched vLLM serves: WHALE_LLM_MODEL if set, else the default model."""
        s = self.settings
        return Path(s.llm_model) if s.llm_model else prepare_model(s.models_dir, self.say)

    def _launcher(self):
        """The sandbox backend: docker where an engine and the image exist, else process."""
        s = self.settings
        if s.sandbox == "process":
            launcher = ProcessLauncher()
            self.say("sandbox: process (chosen in settings)")
            return launcher
        from sandbox import docker as docker_backend
        from sandbox import image

        why_not = docker_backend.engine_available()
        if why_not is None and s.sandbox == "auto" and not (s.sandbox_image or image.is_built()):
            why_not = "the sandbox image is not built (whale sandbox build)"
        if why_not is not None:
            if s.sandbox == "docker":
                raise SandboxUnavailable(f"the docker sandbox is not available: {why_not}")
            try:
                launcher = ProcessLauncher()
            except SandboxUnavailable as exc:
                raise SandboxUnavailable(f"docker is not used ({why_not}), and {exc}") from None
            self.say(f"sandbox: process (docker not used: {why_not})")
            return launcher
        tag = s.sandbox_image or image.build(say=self.say)
        launcher = docker_backend.DockerLauncher(
            tag, docker_backend.owner_label(s.home), runtime=s.sandbox_runtime
        )
        removed = launcher.remove_leftovers()
        self.say(
            f"sandbox: docker ({tag})"
            + (f"; removed {removed} leftover containers" if removed else "")
        )
        return launcher

    @property
    def supervised(self) -> SupervisedServer | None:
        """The model server this process launched and restarts when it dies (none attached)."""
        return self.model_server or (self.vllm.server if self.vllm else None)

    def record_fault(self, kind: str, detail: dict) -> None:
        """A fault of a part around the loops (app/faults.py), recorded in the log of every run
        it may have hit: their retried and failed rollouts then have the cause beside them.
        Called from the event loop and from the model server's watcher thread alike; the event
        carries the time of the call, whenever the writer gets it."""
        at = now()
        log.warning("%s: %s", kind, detail)

        def record():  # in the event loop's thread, where the runs' tables change
            runs = sorted(set(self.gates) | set(self.evaluating))
            self.writer.add(
                *(Event(run_id=r, kind=kind, detail=detail, created_at=at) for r in runs)
            )

        try:
            self._loop.call_soon_threadsafe(record)
        except RuntimeError:  # the event loop is closed: the workbench is stopping
            pass

    async def _model_up(self) -> None:
        """Before each rollout's try: the model server is up, and awake (a failed wake left
        vLLM asleep: it is woken, or the try fails saying why)."""
        if self.supervised:
            await self.supervised.until_up()
        if self.vllm:
            await self.vllm.ensure_awake()

    @property
    def base_model(self) -> str:
        """What training starts from: the base weights folder, or for vLLM servers attached by a
        hub id (docker compose) that id, which transformers fetches or finds in its cache."""
        if self.base_model_path:
            return str(self.base_model_path)
        return (self.vllm.base if self.vllm else None) or self.endpoint.model

    @property
    def runtime(self) -> Path | None:
        """The folder sandboxes bind (gateway socket, harness copies); None before start()."""
        return self._runtime

    @property
    def gateway_socket(self) -> Path:
        return self._runtime / "gateway.sock"

    async def stop(self) -> None:
        try:
            if self.sandbox:
                await self.sandbox.close()
            if self.gateway:
                await self.gateway.stop()
            if self._server_queue:
                await self._server_queue.close()
            if self.endpoint:
                await self.endpoint.close()
            if self.model_server:
                await asyncio.to_thread(self.model_server.stop)
            if self.vllm:
                await self.vllm.stop()
            if self._runtime:
                shutil.rmtree(self._runtime, ignore_errors=True)
        finally:  # what is queued is written, whatever failed above
            self.writer.close()
            self.engine.dispose()

    @property
    def backend_name(self) -> str:
        return self.settings.backend_name

    def evaluator(self) -> Evaluator:
        return Evaluator(
            self.writer,
            self.gateway,
            self.sandbox,
            self._runtime / "harnesses",
            self.in_flight,
            self.backend_name,
            self.settings.rollout_limits(),
            self.gates,
            self.admission,
            self.evaluating,
            self._model_up,
        )

    async def serve_checkpoint(self, folder: Path) -> str:
        """Make a trained checkpoint servable; returns the model name requests use for it.

        The local model server loads a weights or adapter folder on its first request by path,
        so the folder is the name; vLLM hot-loads the adapter.
        """
        adapter = folder / "adapter"
        if self.vllm:  # hot-load the adapter; a full fine-tune restarts vLLM on its weights
            if adapter.is_dir():
                return await self.vllm.load_adapter(str(adapter), adapter)
            return await self.vllm.serve_weights(folder / "merged")
        return str(adapter if adapter.is_dir() else folder / "merged")

    @asynccontextmanager
    async def training_turn(self, trainer):
        """Around a training step. Colocated (`[runtime] colocate`, WHALE_COLOCATE), vLLM and
        the trainer share the GPUs, as verl's hybrid engine runs them: vLLM sleeps (level 1)
        before the step and wakes after it, and the training process ends with the step, since
        it would hold its GPU memory while vLLM samples the next one; its optimizer state
        carries over on disk. The new weights are then loaded in place (serve_weights).

        While the servers sleep no rollout samples: the turn holds the admission's pause, so the
        rollouts of other runs in flight finish first and new ones wait for the wake (and two
        runs' turns take turns). vLLM wakes on every way out; when the step or the trainer's
        end failed, a failed wake is logged and recorded and the step's error is raised."""
        if not (self.settings.colocate and self.vllm):
            yield
            return
        async with self.admission.paused():
            await self.vllm.sleep()
            try:
                yield
                await trainer.close()
            except BaseException:
                await self._wake_after_failed_turn(trainer)
                raise
            await self.vllm.wake_up()

    async def _wake_after_failed_turn(self, trainer) -> None:
        """The trainer ended and vLLM woken after a failed training step; what fails here is
        logged and recorded (vllm_wake_failed), not raised over the step's own error."""
        try:
            await trainer.close()
        except Exception as exc:
            log.warning("the training process did not end cleanly: %r", exc)
        try:
            await self.vllm.wake_up()
        except Exception as exc:  # the next sampling tries again (VLLMBackend.ensure_awake)
            self.record_fault("vllm_wake_failed", {"why": str(exc)})

    async def evaluate_file(
        self,
        harness_path: Path,
        domain_name: str,
        split: str = "test",
        k: int = 2,
        limit: int | None = None,
        run_name: str | None = None,
        on_start: Callable[[Run, int], None] | None = None,
        progress: Callable[[Rollout], None] | None = None,
        declared: dict | None = None,
    ) -> tuple[Run, Evaluation]:
        """Evaluate a harness file as a new run of kind "eval"; needs start() first.
        `declared`: its [sampling] and [rollout] tables (app/llm/generation.py)."""
        domain = get_domain(domain_name)
        n_tasks = len(domain.tasks(split)[:limit])
        config = {"harness": str(harness_path), "split": split, "k": k, "limit": limit}
        config.update(declared or {})
        async with single_run(
            self, run_name or f"eval {harness_path.name}", "eval", domain_name, harness_path, config
        ) as made:
            if on_start:
                on_start(made.run, n_tasks * k)
            evaluation = await self.evaluator().evaluate(
                made.run.id, made.harness, made.checkpoint, domain, split, k, limit, progress
            )
        return made.run, evaluation

    def base_checkpoint(self, s) -> Checkpoint:
        """The row of the weights the model server serves as they came (found or added in the
        writer's session `s`); needs start()."""
        model = self.endpoint.model
        checkpoint = s.exec(select(Checkpoint).where(Checkpoint.name == model)).first()
        if checkpoint is None:
            path = str(self.base_model_path) if self.base_model_path else None
            checkpoint = Checkpoint(kind="base", name=model, path=path)
            s.add(checkpoint)
            s.flush()
        return checkpoint


def make_workbench(say=None, **overrides):
    """The Workbench of one command: settings from the environment, `overrides` on top."""
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    return Workbench(settings, say=say or (lambda m: err.print(f"[dim]{m}[/dim]")))
