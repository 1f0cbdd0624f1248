"""The agent proposer's workspace: the whole run's harnesses, or (`[search] workspace =
"round"`, the release's way) a fresh folder each harness phase with only that round's."""

import asyncio
import csv
from pathlib import Path

from sqlmodel import select

from app.db.schema import Harness, Phase, SearchIteration
from app.domains import get_domain
from app.experiment_schema import SearchConfig
from app.search.context import SearchContext
from app.search.harness_phase import search_file
from app.search.workspace import materialize, workspace_root
from tests.conftest import attached_settings, started_workbench
from tests.search.conftest import SEED


def summary_ids(root: Path) -> set[int]:
    with open(root / "summary.tsv") as f:
        return {int(row["id"]) for row in csv.DictReader(f, delimiter="\t")}


def test_a_round_workspace_shows_only_the_round_s_harnesses(tmp_path, model_server, model_cache):
    settings = attached_settings(tmp_path / "home", model_server, model_cache)
    cfg = SearchConfig(proposer="knobs", candidates=2, tasks=2)

    async def main():
        async with started_workbench(settings) as workbench:
            phase = await search_file(workbench, SEED, "arith", cfg, 1)
            with workbench.session() as s:
                harnesses = s.exec(select(Harness).order_by(Harness.id)).all()
                phase = s.get(Phase, phase.id)
                for it in s.exec(select(SearchIteration)).all():  # reports of this round
                    it.report = f"report of phase {it.phase_id}"
                s.commit()
            accepted = next(h for h in harnesses if h.id == phase.harness_out_id)
            # the next harness phase: its incoming harness is the one this phase accepted
            ctx = SearchContext(
                workbench=workbench,
                run_id=phase.run_id,
                phase_id=phase.id + 1,
                round=2,
                iteration=1,
                k=3,
                domain=get_domain("arith"),
                checkpoint_id=phase.checkpoint_in_id,
                accepted=accepted,
                incoming=accepted,
            )
            archive = tmp_path / "archive"
            whole = materialize(ctx, workspace_root(archive, ctx, "run"), "run")
            this_round = materialize(ctx, workspace_root(archive, ctx, "round"), "round")
            return harnesses, accepted, phase, whole, this_round

    harnesses, accepted, phase, whole, this_round = asyncio.run(main())
    assert len(harnesses) >= 2  # the seed and at least one candidate of the first phase
    assert this_round == whole / f"round-{phase.id + 1}"  # a fresh folder per round
    assert summary_ids(whole) == {h.id for h in harnesses}
    assert summary_ids(this_round) == {accepted.id}  # earlier rounds' candidates are not shown
    shown = {p.name.split("-")[0] for p in (this_round / "harnesses").iterdir()}
    assert shown == {str(accepted.id)}
    assert list((whole / "reports").iterdir()) and not list((this_round / "reports").iterdir())
    skill = (this_round / "SKILL.md").read_text()
    assert "every harness of this round" in skill
    assert "every harness of this run" in (whole / "SKILL.md").read_text()
    # the turn budget: the harness's own MAX_TURNS (the arith seed declares none) and the clamp
    assert "The accepted harness declares no `MAX_TURNS`" in skill
    assert f"clamps every harness at {settings.rollout_max_calls} model calls" in skill
