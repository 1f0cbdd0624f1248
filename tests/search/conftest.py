"""Run one harness phase on a fresh store against the shared real model server."""

import asyncio
from pathlib import Path

import pytest
from sqlmodel import select

from app.db.schema import Harness, Metric, Phase, Rollout, SearchIteration
from app.experiment_schema import SearchConfig
from app.search.harness_phase import search_file
from tests.conftest import REPO, attached_settings, started_workbench

SEED = REPO / "harness_archive/seeds/arith/seed.py"


def seed_with(**knobs) -> str:
    """The arith seed harness with some knobs set."""
    from app.search.knobs import with_knob

    code = SEED.read_text()
    for name, value in knobs.items():
        code = with_knob(code, name, value)
    return code


@pytest.fixture
def search(tmp_path, model_server, model_cache):
    """search(cfg, harness_code=None, iterations=1) -> (phase, stored rows, settings)."""

    def run(cfg: SearchConfig, harness_code: str | None = None, iterations: int = 1):
        path = SEED
        if harness_code is not None:
            path = tmp_path / "incoming.py"
            path.write_text(harness_code)
        settings = attached_settings(tmp_path / "home", model_server, model_cache)

        async def main():
            async with started_workbench(settings) as workbench:
                phase = await search_file(workbench, Path(path), "arith", cfg, iterations)
                with workbench.session() as s:
                    stored = {
                        "harnesses": s.exec(select(Harness).order_by(Harness.id)).all(),
                        "iterations": s.exec(
                            select(SearchIteration).order_by(SearchIteration.iteration)
                        ).all(),
                        "rollouts": s.exec(select(Rollout)).all(),
                        "metrics": s.exec(select(Metric)).all(),
                        "phases": s.exec(select(Phase)).all(),
                    }
                return phase, stored

        phase, stored = asyncio.run(main())
        return phase, stored, settings

    return run
