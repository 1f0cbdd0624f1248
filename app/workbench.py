"""The one central object of a process: settings, database, writer, model, gateway, sandbox.

`whale serve`, `whale demo` and `whale eval` each build one Workbench; the web app reads
through its engine, evaluations write through its writer.
"""
import asyncio
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

from sqlmodel import select

from app.config import Settings
from app.db import Writer, open_engine, read_session
from app.db.schema import Checkpoint, Evaluation, Harness, Rollout, Run, now
from app.domains import get_domain
from app.gateway import Gateway
from app.llm.client import ChatEndpoint
from app.llm.local import LocalModelServer, prepare_model
from app.rollout.evaluate import Evaluator, sha_of
from sandbox.process import Limits, ProcessSandbox

log = logging.getLogger(__name__)


class Workbench:
    def __init__(self, settings: Settings | None = None, say: Callable[[str], None] = print):
        self.settings = settings or Settings()
        self.settings.ensure_dirs()
        self.say = say
        self.engine = open_engine(self.settings.db_path)
        self.writer = Writer(self.engine)
        self.model_server: LocalModelServer | None = None
        self.endpoint: ChatEndpoint | None = None
        self.gateway: Gateway | None = None
        self._socket_dir: tempfile.TemporaryDirectory | None = None

    def session(self):
        return read_session(self.engine)

    async def start_model(self) -> None:
        """Attach to WHALE_LLM_URL, or prepare the default model and launch its server."""
        s = self.settings
        if s.llm_url:
            model = s.llm_model or str(await asyncio.to_thread(prepare_model, s.models_dir, self.say))
            self.endpoint = ChatEndpoint(s.llm_url, model)
            self.say(f"model: attached to {s.llm_url} ({model})")
        else:
            path = await asyncio.to_thread(prepare_model, s.models_dir, self.say)
            self.model_server = LocalModelServer(path, s.logs_dir / "model-server.log")
            self.say(f"model: starting transformers serve for {path.name} (log: {self.model_server.log_path})")
            await asyncio.to_thread(self.model_server.start)
            self.endpoint = ChatEndpoint(self.model_server.base_url, self.model_server.model)
        # A short path: Unix socket paths are limited to ~100 bytes, WHALE_HOME may be long.
        self._socket_dir = tempfile.TemporaryDirectory(prefix="whale-gw-")
        Path(self._socket_dir.name).chmod(0o755)
        self.gateway = Gateway(self.writer, self.endpoint)
        await self.gateway.start(self.gateway_socket)

    @property
    def gateway_socket(self) -> Path:
        return Path(self._socket_dir.name) / "gateway.sock"

    async def stop(self) -> None:
        if self.gateway:
            await self.gateway.stop()
        if self.endpoint:
            await self.endpoint.close()
        if self.model_server:
            await asyncio.to_thread(self.model_server.stop)
        if self._socket_dir:
            self._socket_dir.cleanup()
        self.writer.close()
        self.engine.dispose()

    def sandbox(self):
        s = self.settings
        return ProcessSandbox(Limits(wall_s=s.rollout_timeout, memory_mb=s.rollout_memory_mb))

    async def evaluate_file(
        self, harness_path: Path, domain_name: str, split: str = "test", k: int = 2,
        limit: int | None = None, run_name: str | None = None,
        on_start: Callable[[Run, int], None] | None = None,
        progress: Callable[[Rollout], None] | None = None,
    ) -> tuple[Run, Evaluation]:  # fmt: skip
        """Evaluate a harness file as a new run of kind "eval"; needs start_model() first."""
        domain = get_domain(domain_name)
        n_tasks = len(domain.tasks(split)[:limit])
        code = harness_path.read_text()
        config = {"harness": str(harness_path), "split": split, "k": k, "limit": limit}
        model = self.endpoint.model
        model_path = self.model_server.model if self.model_server else None

        def create(s):
            run = Run(name=run_name or f"eval {harness_path.name}", kind="eval",
                      domain=domain_name, status="running", config=config)  # fmt: skip
            s.add(run)
            s.flush()
            harness = Harness(run_id=run.id, name=harness_path.name, code=code, sha=sha_of(code))
            checkpoint = s.exec(select(Checkpoint).where(Checkpoint.name == model)).first()
            if checkpoint is None:
                checkpoint = Checkpoint(kind="base", name=model, path=model_path)
            s.add_all([harness, checkpoint])
            return run, harness, checkpoint

        run, harness, checkpoint = await self.writer.run(create)
        if on_start:
            on_start(run, n_tasks * k)
        evaluator = Evaluator(self.writer, self.gateway, self.gateway_socket, self.sandbox(),
                              self.settings.home / "harnesses", self.settings.concurrency)  # fmt: skip
        try:
            evaluation = await evaluator.evaluate(
                run.id, harness, checkpoint, domain, split, k, limit, progress
            )
        except BaseException:
            await self.writer.run(lambda s: _set_status(s, run.id, "failed"))
            raise
        run = await self.writer.run(lambda s: _set_status(s, run.id, "done"))
        return run, evaluation


def _set_status(s, run_id: int, status: str) -> Run:
    run = s.get(Run, run_id)
    run.status = status
    run.finished_at = now()
    return run
