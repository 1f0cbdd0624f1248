"""export_run: every table of the run as JSON lines, harness code as files, rollouts with their
steps; what it writes matches what the store holds."""

import io
import json
import tarfile
import tempfile

import pytest
from sqlalchemy import func
from sqlmodel import select

from app.db.schema import (
    Evaluation,
    Event,
    Metric,
    Phase,
    Rollout,
    SearchIteration,
    Step,
    TrainingJob,
)
from app.read.runs import UnknownRuns
from app.report.export import export_run, rollouts_with_steps


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def count(session, model, run_id) -> int:
    return session.exec(select(func.count()).select_from(model).where(model.run_id == run_id)).one()


@pytest.fixture
def exported(session, filled, tmp_path):
    out = tmp_path / "export"
    return out, export_run(session, filled.runs["whale"].id, out)


def test_counts_match_the_store(session, filled, exported):
    out, counts = exported
    run_id = filled.runs["whale"].id
    tables = {
        "phases.jsonl": Phase,
        "search_iterations.jsonl": SearchIteration,
        "training_jobs.jsonl": TrainingJob,
        "evaluations.jsonl": Evaluation,
        "metrics.jsonl": Metric,
        "events.jsonl": Event,
        "rollouts.jsonl": Rollout,
    }
    for name, model in tables.items():
        assert counts[name] == len(lines(out / name)) == count(session, model, run_id), name
        assert {row["run_id"] for row in lines(out / name)} == {run_id}
    assert counts["rollouts.jsonl"] == 5  # the weight_only run's rollouts in between are not
    run = json.loads((out / "run.json").read_text())
    assert (run["id"], run["strategy"], run["config"]["experiment"]["test"]["k"]) == (
        run_id,
        "whale",
        4,
    )


def test_harnesses_with_lineage_and_code(filled, exported):
    out, counts = exported
    meta = lines(out / "harnesses.jsonl")
    origin, seed, child, broken = filled.harnesses
    # The run's first harness from the experiment, its lineage, and an ancestor from outside it.
    assert {h.id for h in filled.harnesses} <= {m["id"] for m in meta}
    assert counts["harnesses/"] == counts["harnesses.jsonl"] == len(meta)
    assert len(list((out / "harnesses").iterdir())) == len(meta)
    by_id = {m["id"]: m for m in meta}
    assert "code" not in by_id[child.id]
    assert by_id[seed.id]["parent_id"] == origin.id
    assert (by_id[broken.id]["valid"], by_id[broken.id]["error"]) == (False, broken.error)
    assert by_id[broken.id]["parent_ids"] == [child.id, seed.id]
    assert by_id[broken.id]["file"] == f"harnesses/{broken.id}-broken_cand.py"  # a safe name
    assert by_id[child.id]["file"] == f"harnesses/{child.id}-prompt-v1.py"
    for harness in filled.harnesses:
        assert (out / by_id[harness.id]["file"]).read_text() == harness.code


def test_checkpoints_reach_the_base(filled, exported):
    out, _ = exported
    checkpoints = lines(out / "checkpoints.jsonl")
    assert [(c["kind"], c["parent_id"]) for c in checkpoints] == [
        ("base", None),
        ("lora", filled.base.id),
    ]


def test_rollouts_embed_their_steps_in_order(session, filled, exported):
    out, _ = exported
    rollouts = lines(out / "rollouts.jsonl")
    assert [r["id"] for r in rollouts] == sorted(r["id"] for r in rollouts)
    with_steps = [r for r in rollouts if r["steps"]]
    assert len(with_steps) == 3  # the later evaluation's two rollouts have none
    for rollout in with_steps:
        steps = rollout["steps"]
        assert [(s["idx"], s["kind"]) for s in steps] == [(0, "model"), (1, "tool"), (2, "model")]
        assert {s["rollout_id"] for s in steps} == {rollout["id"]}
        assert steps[0]["request"]["messages"][0]["content"].endswith("Ünïcödé")
        assert steps[1]["response"] == {"result": 2}
    assert (
        sum(len(r["steps"]) for r in rollouts)
        == session.exec(
            select(func.count())
            .select_from(Step)
            .join(Rollout)
            .where(Rollout.run_id == filled.runs["whale"].id)
        ).one()
    )
    assert "Ünïcödé" in (out / "rollouts.jsonl").read_text()  # kept as text, not \u escapes


def test_batches_give_the_same_rollouts(session, filled, exported):
    out, _ = exported
    run_id = filled.runs["whale"].id
    assert list(rollouts_with_steps(session, run_id, batch=2)) == lines(out / "rollouts.jsonl")


def test_unknown_run_writes_nothing(session, filled, tmp_path):
    with pytest.raises(UnknownRuns):
        export_run(session, 999, tmp_path / "none")
    assert not (tmp_path / "none").exists()


def test_the_run_page_downloads_what_whale_export_writes(
    client, filled, exported, tmp_path, monkeypatch
):
    out, _ = exported
    scratch = tmp_path / "scratch"  # where the server packs the archive
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    run_id = filled.runs["whale"].id
    page = client.get(f"/runs/{run_id}").text
    assert f'<a id="export-link" href="/api/runs/{run_id}/export" download>' in page

    answer = client.get(f"/api/runs/{run_id}/export")

    assert answer.status_code == 200 and answer.headers["content-type"] == "application/gzip"
    name = f"whale-export-run-{run_id}"
    assert f'filename="{name}.tar.gz"' in answer.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(answer.content), mode="r:gz") as tar:
        tar.extractall(tmp_path / "downloaded", filter="data")
    downloaded = tmp_path / "downloaded" / name
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(downloaded) for p in downloaded.rglob("*") if p.is_file())
    assert "rollouts.jsonl" in map(str, files) and any(f.suffix == ".py" for f in files)
    for f in files:
        assert (downloaded / f).read_bytes() == (out / f).read_bytes(), f
    assert list(scratch.iterdir()) == []  # removed once sent
    assert client.get("/api/runs/999/export").status_code == 404
