"""`whale import`: a run that `whale export` wrote, read back into another store as a new run,
ids mapped; exported again it gives the same files, ids aside. Tags, notes and labels come back
and filter there as they did; a folder that is no export is refused and nothing is written."""

import asyncio
import json
import shutil

import pytest
import typer
from sqlmodel import select
from typer.testing import CliRunner

from app.cli.report import export, import_
from app.db.schema import Harness, Run, SearchIteration, Step
from app.read.invariants import run_checks
from app.read.rollouts import list_rollouts
from app.read.runs import list_runs
from tests.api.synthetic_lineage import search_run

app = typer.Typer()
app.command("export")(export)
app.command("import")(import_)

ID_KEYS = {"id", "run_id", "rollout_id", "file"}  # and every *_id, *_ids: the store's numbering


def cli(home, *args):
    env = {"WHALE_HOME": str(home), "COLUMNS": "200"}
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def without_ids(value):
    """The value with every id left out (what a new store numbers afresh)."""
    if isinstance(value, dict):
        return {
            k: without_ids(v)
            for k, v in value.items()
            if k not in ID_KEYS and not k.endswith(("_id", "_ids")) and k != "gate"
        }
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


def files(folder) -> dict:
    out = {"run.json": without_ids(json.loads((folder / "run.json").read_text()))}
    for path in sorted(folder.glob("*.jsonl")):
        out[path.name] = [without_ids(json.loads(line)) for line in path.read_text().splitlines()]
    out["code"] = sorted(p.read_text() for p in (folder / "harnesses").iterdir())
    return out


def references(folder) -> dict:
    """What the rows' ids point at, by name: each harness's parents and phase, each phase's
    pairs, each iteration's frontier, accepted harness and gate, each rollout's pair."""

    def read(name):
        return [json.loads(line) for line in (folder / name).read_text().splitlines()]

    harness = {h["id"]: h["name"] for h in read("harnesses.jsonl")}
    checkpoint = {c["id"]: c["name"] for c in read("checkpoints.jsonl")}
    phases = read("phases.jsonl")
    phase = {p["id"]: f"{p['kind']} {p['round']}" for p in phases}
    return {
        "harnesses": [
            (
                h["name"],
                harness.get(h["parent_id"]),
                [harness[i] for i in h["parent_ids"] or []],
                phase.get(h["phase_id"]),
            )
            for h in read("harnesses.jsonl")
        ],
        "phases": [
            (
                phase[p["id"]],
                harness.get(p["harness_in_id"]),
                harness.get(p["harness_out_id"]),
                checkpoint.get(p["checkpoint_in_id"]),
                checkpoint.get(p["checkpoint_out_id"]),
            )
            for p in phases
        ],
        "iterations": [
            (
                phase[i["phase_id"]],
                harness[i["accepted_harness_id"]],
                [harness[f["harness_id"]] for f in i["frontier"]],
                {harness[int(k)]: g for k, g in i["gate"].items()},
            )
            for i in read("search_iterations.jsonl")
        ],
        "rollouts": [
            (r["task_id"], harness[r["harness_id"]], checkpoint[r["checkpoint_id"]], r["labels"])
            for r in read("rollouts.jsonl")
        ],
    }


@pytest.fixture
def annotated(store, workbench):
    """A search run with two harness phases and a frontier, a test evaluation whose failing
    rollout made two model calls, tags and a note on the run, labels and a note on a rollout."""
    from app.annotations import annotate_rollout, annotate_run

    lineage = search_run(store)
    store.write(
        SearchIteration(
            run_id=lineage.run.id,
            phase_id=lineage.phase1.id,
            iteration=1,
            proposer="llm",
            status="done",
            best_harness_id=lineage.a.id,
            accepted_harness_id=lineage.a.id,
            frontier=[{"harness_id": lineage.a.id, "success": 0.4, "turns": 1.5}],
            gate={str(lineage.a.id): {"rule": "greedy", "commit": True}},
        )
    )
    evaluation = store.evaluation(lineage.run, lineage.e, lineage.c2, n_tasks=2)
    failed, _ = store.rollouts(evaluation, ["fail", "pass"])
    first = [{"role": "user", "content": "What is 0 + 1?"}]
    store.model_step(failed, 0, first, "2")
    store.model_step(failed, 1, [*first, {"role": "assistant", "content": "2"}], "nope")
    writer = workbench.writer
    asyncio.run(annotate_run(writer, lineage.run.id, ["baseline", "ablation"], "why\nmore"))
    asyncio.run(annotate_rollout(writer, failed.id, ["format error"], "answered twice"))
    return lineage, failed


def test_an_exported_run_imports_back_whole_under_new_ids(annotated, workbench, tmp_path):
    lineage, failed = annotated
    home = workbench.settings.home
    assert cli(home, "export", lineage.run.id, "--out", tmp_path / "first").exit_code == 0
    with workbench.session() as s:  # the synthetic run is not a real loop's: some checks break
        broken_before = [c.name for c in run_checks(s, lineage.run.id) if c.broken]

    # into the same store: every row gets a new id, so a reference left unmapped shows
    imported = cli(home, "import", tmp_path / "first")
    assert imported.exit_code == 0, imported.output
    new_id = int(imported.stdout.split("imported as run ")[1].split()[0])
    assert new_id != lineage.run.id
    assert cli(home, "export", new_id, "--out", tmp_path / "again").exit_code == 0
    assert files(tmp_path / "again") == files(tmp_path / "first")
    assert references(tmp_path / "again") == references(tmp_path / "first")
    assert references(tmp_path / "first")["iterations"] == [
        ("harness 1", "program", ["program"], {"program": {"rule": "greedy", "commit": True}})
    ]

    with workbench.session() as s:
        runs = {r["id"]: r for r in list_runs(s)}
        assert (
            runs[new_id]["tags"] == ["baseline", "ablation"] and runs[new_id]["note_line"] == "why"
        )
        items = list_rollouts(s, run=new_id, label="format error")["items"]
        assert [(i["task_id"], i["note"]) for i in items] == [(failed.task_id, "answered twice")]
        assert items[0]["id"] != failed.id
        assert [c.name for c in run_checks(s, new_id) if c.broken] == broken_before
        # a model call is stored as what it adds to the one before, as the gateway stores it
        second = s.exec(select(Step).where(Step.rollout_id == items[0]["id"], Step.idx == 1)).one()
        assert second.request["messages_from"] == 1
        assert second.request["messages"] == [{"role": "assistant", "content": "2"}]


def test_a_folder_that_is_no_export_is_refused_and_nothing_is_written(
    annotated, workbench, tmp_path
):
    lineage, _ = annotated
    home = workbench.settings.home
    cli(home, "export", lineage.run.id, "--out", tmp_path / "broken")
    rollouts = tmp_path / "broken" / "rollouts.jsonl"
    rollouts.write_text(rollouts.read_text() + "{not json\n")
    with workbench.session() as s:
        before = len(s.exec(select(Run)).all())
    for folder, why in ((tmp_path / "broken", "not JSON"), (tmp_path, "no run.json")):
        refused = cli(home, "import", folder)
        assert (
            refused.exit_code != 0
            and why in refused.output
            and "nothing was imported" in refused.output
        )
    with workbench.session() as s:
        assert len(s.exec(select(Run)).all()) == before


def test_a_run_exported_before_it_ended_comes_in_stopped(store, workbench, tmp_path):
    from tests.web.test_dashboard_pages import loop_run

    live = loop_run(store, "still running")
    evaluation = store.evaluation(live, store.harness(live), store.checkpoint(), n_tasks=2)
    store.rollouts(evaluation, ["pass", "pending"])
    home = workbench.settings.home
    cli(home, "export", live.id, "--out", tmp_path / "live")
    imported = cli(home, "import", tmp_path / "live")
    new_id = int(imported.stdout.split("imported as run ")[1].split()[0])
    with workbench.session() as s:
        run = s.get(Run, new_id)
        assert (run.status, run.desired) == ("stopped", "stopped")
        [listed] = [r for r in list_runs(s) if r["id"] == new_id]
        assert listed["live"] is False  # the runs list no longer polls for it
        counts = list_rollouts(s, run=new_id)["status_counts"]
        assert counts["pass"] == 1 and counts["queued"] == counts["running"] == 0
    with workbench.session() as s:  # the original run is untouched
        assert s.get(Run, live.id).status == "running"


def test_every_strategy_run_round_trips(filled, workbench, tmp_path):
    """The synthetic runs of every strategy (training jobs, metrics, events, checkpoints made
    by jobs) export, import and export again to the same files, ids aside."""
    home = workbench.settings.home
    for name, run in filled.runs.items():
        first, again = tmp_path / f"{name}-first", tmp_path / f"{name}-again"
        assert cli(home, "export", run.id, "--out", first).exit_code == 0
        imported = cli(home, "import", first)
        assert imported.exit_code == 0, imported.output
        new_id = int(imported.stdout.split("imported as run ")[1].split()[0])
        assert cli(home, "export", new_id, "--out", again).exit_code == 0
        if run.status in ("done", "failed", "stopped"):
            assert files(again) == files(first), name
        job_ids = {j["id"] for j in _rows(again / "training_jobs.jsonl")}
        linked = [c for c in _rows(again / "checkpoints.jsonl") if c["training_job_id"]]
        assert all(c["training_job_id"] in job_ids for c in linked), name  # the new job's id
        assert linked or name != "whale"  # the whale run's LoRA names the job that made it
    assert [r.status for r in filled.runs.values()].count("done") >= 3  # compared whole


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_imported_fork_is_not_forked_again_here(store, workbench, client, tmp_path):
    """Its parent stayed in the store it was made in: the rounds and the spending before its
    fork point are only a record here, so a fork of it would restart the one and drop the
    other. It is refused by name, and its pages offer no "Fork from here"."""
    from app.db.schema import Phase
    from app.loop.fork import ForkError, fork_point

    base = store.checkpoint()
    fork = store.write(Run(name="a fork", kind="experiment", domain="arith", status="done"))
    harness = store.harness(fork)
    record = {"run_id": 1, "phase": 1, "kinds": ["weight"], "spent": {"rollouts": 8}}
    start = {"harness_id": harness.id, "checkpoint_id": base.id}
    store.write_values(fork, config={"start": start, "fork": record}, parent_run_id=None)
    pair = dict(harness_in_id=harness.id, checkpoint_in_id=base.id, harness_out_id=harness.id)
    store.write(Phase(kind="harness", round=1, run_id=fork.id, status="done", **pair))
    home = workbench.settings.home
    assert cli(home, "export", fork.id, "--out", tmp_path / "fork").exit_code == 0
    imported = cli(home, "import", tmp_path / "fork")
    new_id = int(imported.stdout.split("imported as run ")[1].split()[0])
    with workbench.session() as s:
        assert s.get(Run, new_id).config["forked_in_export"] == record
        with pytest.raises(ForkError) as refused:
            fork_point(s, new_id, 1, "arith")
    assert str(refused.value) == (
        f"--from {new_id}:1: run {new_id} was imported as a fork of a run not in this store "
        "(its rounds and spending before its fork point are only a record here): fork it in "
        "the store it was made in"
    )
    timeline = client.get(f"/api/runs/{new_id}").json()["dashboard"]["timeline"]
    assert [p["fork_from"] for p in timeline] == [None]
    assert "fork-link" not in client.get(f"/runs/{new_id}").text
    with workbench.session() as s:  # the fork itself, in the store it was made in, still offers it
        assert fork_point(s, fork.id, 1, "arith")["kinds"] == ["weight", "harness"]


def refusal(home, folder) -> str:
    """`whale import` of a folder it refuses: exit code 2, one line saying what is wrong and
    that nothing was imported (no traceback), and no run more in the store."""
    refused = cli(home, "import", folder)
    assert refused.exit_code == 2 and isinstance(refused.exception, SystemExit), refused.output
    [line] = refused.output.strip().splitlines()
    assert line.endswith("; nothing was imported"), line
    return line


def rewritten(folder, name: str, change) -> None:
    """One file of an export, its rows (or run.json) changed by `change`."""
    path = folder / name
    if name == "run.json":
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
        return
    rows = [change(json.loads(line)) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture
def exported(annotated, workbench, tmp_path):
    """A fresh copy of the annotated run's export for each change a test makes to it."""
    lineage, _ = annotated
    home = workbench.settings.home
    assert cli(home, "export", lineage.run.id, "--out", tmp_path / "export").exit_code == 0
    copies = iter(range(1000))

    def copy():
        out = tmp_path / f"copy{next(copies)}"
        shutil.copytree(tmp_path / "export", out)
        return out

    return copy


def runs_in(workbench) -> int:
    with workbench.session() as s:
        return len(s.exec(select(Run)).all())


def test_a_harness_file_outside_the_export_is_refused_by_name(exported, workbench, tmp_path):
    """A crafted export cannot bring a file of this machine into the store as harness code:
    not by an absolute path, a path up and out, or a link inside the folder that points out."""
    home, before = workbench.settings.home, runs_in(workbench)
    (tmp_path / "secret.py").write_text("TOKEN = 'of this machine'\n")
    linked = exported()
    first = json.loads((linked / "harnesses.jsonl").read_text().splitlines()[0])["file"]
    (linked / first).unlink()
    (linked / first).symlink_to(tmp_path / "secret.py")
    for file, folder in (("/etc/passwd", exported()), ("../secret.py", exported())):
        rewritten(folder, "harnesses.jsonl", lambda h, file=file: {**h, "file": file})
        line = refusal(home, folder)
        assert f"file {file!r} is outside the export folder" in line
    assert f"file {first!r} is outside the export folder" in refusal(home, linked)
    assert runs_in(workbench) == before
    with workbench.session() as s:  # nothing of the machine's files came in as code
        codes = s.exec(select(Harness.code)).all()
    assert not any("of this machine" in c or "root:" in c for c in codes)


def test_imported_tags_labels_and_notes_pass_the_typed_limits(exported, workbench):
    """What people wrote comes in only as they could have typed it (app/annotations.py)."""
    home, before = workbench.settings.home, runs_in(workbench)
    changes = {
        "run.json: tags: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' is 41 characters; at most 40": (
            "run.json",
            lambda r: {**r, "tags": ["x" * 41]},
        ),
        "run.json: note: control characters are not allowed (U+001B)": (
            "run.json",
            lambda r: {**r, "note": "a\x1b[31mred"},
        ),
        "rollouts.jsonl, line 1: labels: 'a, b' has a comma": (
            "rollouts.jsonl",
            lambda r: {**r, "labels": ["a, b"]} if r["labels"] else r,
        ),
    }
    for why, (name, change) in changes.items():
        folder = exported()
        rewritten(folder, name, change)
        assert why in refusal(home, folder)
    assert runs_in(workbench) == before
    folder = exported()  # trimmed and collapsed as typed ones are
    rewritten(folder, "run.json", lambda r: {**r, "tags": ["  two   words ", "two words"]})
    imported = cli(home, "import", folder)
    new_id = int(imported.stdout.split("imported as run ")[1].split()[0])
    with workbench.session() as s:
        assert next(r for r in list_runs(s) if r["id"] == new_id)["tags"] == ["two words"]


def test_a_malformed_export_is_refused_in_one_line(exported, workbench):
    """Whatever is wrong with the files, the import says what and where, and writes nothing."""
    home, before = workbench.settings.home, runs_in(workbench)
    folder = exported()
    (folder / "run.json").write_text("{not json")
    assert "run.json: not JSON" in refusal(home, folder)
    folder = exported()
    rewritten(folder, "run.json", lambda r: {k: v for k, v in r.items() if k != "id"})
    assert "run.json: no 'id'" in refusal(home, folder)
    folder = exported()
    rewritten(folder, "run.json", lambda r: {**r, "created_at": "yesterday"})
    assert "run.json: created_at: Input should be a valid datetime" in refusal(home, folder)
    folder = exported()
    (folder / json.loads((folder / "harnesses.jsonl").read_text().splitlines()[1])["file"]).unlink()
    assert "harnesses.jsonl, line 2: No such file" in refusal(home, folder)
    folder = exported()
    rewritten(folder, "phases.jsonl", lambda p: {k: v for k, v in p.items() if k != "kind"})
    assert "phases.jsonl, line 1: kind: Field required" in refusal(home, folder)
    folder = exported()
    (folder / "run.json").write_text("[1, 2]")
    assert "run.json: not a JSON object" in refusal(home, folder)
    folder = exported()
    (folder / "metrics.jsonl").write_text('"a metric"\n')
    assert "metrics.jsonl, line 1: not a JSON object" in refusal(home, folder)
    assert runs_in(workbench) == before
