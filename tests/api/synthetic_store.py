"""A real store for the API and page tests, filled through the real writer (no mocks).

Shared by tests/api and tests/web: their conftest.py files import the fixtures from here.
"""

import asyncio
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.db.schema import Checkpoint, Evaluation, Harness, Rollout, Run, Step, sha_of
from app.server import create_app
from app.workbench import Workbench
from tests.conftest import AUTH, WEB_TOKEN

SEED_CODE = "def run(task, llm, tools):\n    return '42'\n"


class Store:
    """Builds runs, harnesses, evaluations, rollouts and steps the way an evaluation does."""

    def __init__(self, workbench: Workbench):
        self.writer = workbench.writer

    def write(self, *rows):
        """Insert rows in one transaction; returns them with their ids."""

        def insert(s):
            s.add_all(rows)
            s.flush()
            return rows

        result = self.writer.submit(insert).result()
        return result[0] if len(result) == 1 else list(result)

    def write_values(self, row, **values):
        """Update columns of a written row."""

        def update(s):
            stored = s.get(type(row), row.id)
            for key, value in values.items():
                setattr(stored, key, value)

        self.writer.submit(update).result()

    def run(self, name: str = "eval seed.py", status: str = "done", **kw) -> Run:
        return self.write(Run(name=name, kind="eval", domain="arith", status=status, **kw))

    def harness(
        self, run: Run | None = None, name: str = "seed.py", code: str = SEED_CODE, **kw
    ) -> Harness:
        return self.write(
            Harness(run_id=run.id if run else None, name=name, code=code, sha=sha_of(code), **kw)
        )

    def checkpoint(self, name: str = "smol-base") -> Checkpoint:
        return self.write(Checkpoint(name=name))

    def evaluation(
        self, run: Run, harness: Harness, checkpoint: Checkpoint, n_tasks: int, k: int = 1, **kw
    ) -> Evaluation:
        return self.write(
            Evaluation(
                run_id=run.id,
                harness_id=harness.id,
                checkpoint_id=checkpoint.id,
                k=k,
                n_tasks=n_tasks,
                **{"split": "test", **kw},
            )
        )

    def rollouts(self, evaluation: Evaluation, statuses: list[str]) -> list[Rollout]:
        """One rollout per status given, tasks numbered in order, k samples per task."""
        k = evaluation.k
        rows = [
            Rollout(
                run_id=evaluation.run_id,
                evaluation_id=evaluation.id,
                harness_id=evaluation.harness_id,
                checkpoint_id=evaluation.checkpoint_id,
                task_id=f"test-{i // k}",
                sample=i % k,
                task={"question": f"What is {i} + 1?"},
                gold=str(i + 1),
                status=status,
                reason={"error": "exception", "timeout": "timeout"}.get(status),
                answer=str(i + 1) if status == "pass" else "nope",
                reward=1.0 if status == "pass" else 0.0,
                turns=1,
                prompt_tokens=20,
                completion_tokens=5,
                wall_s=0.5,
            )
            for i, status in enumerate(statuses)
        ]
        written = self.write(*rows)
        return written if isinstance(written, list) else [written]

    def model_step(
        self, rollout: Rollout, idx: int, messages: list[dict], completion: str, **sampling
    ) -> Step:
        return self.write(
            Step(
                rollout_id=rollout.id,
                idx=idx,
                kind="model",
                request={"messages": messages, **sampling},
                response={
                    "message": {"role": "assistant", "content": completion},
                    "finish_reason": "stop",
                },
                prompt_tokens=20,
                completion_tokens=5,
                latency_ms=123.0,
            )
        )

    def tool_step(
        self,
        rollout: Rollout,
        idx: int,
        tool: str,
        args: list,
        result=None,
        error: str | None = None,
    ) -> Step:
        response = None if error else {"result": result}
        return self.write(
            Step(
                rollout_id=rollout.id,
                idx=idx,
                kind="tool",
                tool=tool,
                request={"args": args, "kwargs": {}},
                response=response,
                error=error,
                latency_ms=2.0,
            )
        )


@pytest.fixture
def workbench(tmp_path) -> Iterator[Workbench]:
    workbench = Workbench(Settings(home=tmp_path / "home"), say=lambda _: None)
    yield workbench
    asyncio.run(workbench.stop())


@pytest.fixture
def store(workbench) -> Store:
    return Store(workbench)


@pytest.fixture
def client(workbench) -> TestClient:
    return TestClient(
        create_app(workbench, token=WEB_TOKEN), base_url="http://localhost", headers=AUTH
    )
