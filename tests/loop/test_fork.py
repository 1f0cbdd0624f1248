"""Forks on the demo model (app/loop/fork.py): `whale run FILE --from RUN:PHASE` starts from the
parent's harness and checkpoint at that phase boundary, a fork of a fork works, the parent is
left as it was, `whale check` and `whale export` keep the link, the compare page draws a fork from
its fork point, and the pages offer "Fork from here" and open the start form filled in."""

import asyncio
import hashlib
import html
import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from app.loop.fork import ForkError, parse_point
from tests.api.synthetic_store import store, workbench  # noqa: F401 - fixtures
from tests.conftest import AUTH, MISSING, REPO, WEB_TOKEN, whale, whale_serve
from tests.loop.conftest import quick_toml, store_invariants
from tests.web.conftest import ARTIFACTS, CHROMIUM, page  # noqa: F401 - the browser fixture

# the seed with its program solver: the demo model then answers some tasks, so the parent's
# RFT step accepts rollouts and trains a LoRA checkpoint to fork from
PROGRAM = (REPO / "harness_archive/seeds/arith/seed.py").read_text()
PROGRAM = PROGRAM.replace('SOLVER = "model"', 'SOLVER = "program"', 1)
# small: every rollout after the fork point runs under the trained adapter, on a shared CPU
SMALL = {
    "test": {"at_start": "false", "tasks": 2},
    "search": {"candidates": 2, "tasks": 2},
}
RUN_TIMEOUT = 1500  # s, one `whale run` on a loaded machine
# one worker builds the module's three runs (the `forks` fixture, over a minute) for all its tests
pytestmark = pytest.mark.xdist_group("forks")


def run_json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rows(db: Path, sql: str, *args) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def snapshot(db: Path, run_id: int) -> dict:
    """Everything of a run the store holds, and the bytes of its checkpoints' weights."""
    tables = ("phase", "evaluation", "rollout", "training_job", "search_iteration", "metric")
    found = {t: rows(db, f"SELECT * FROM {t} WHERE run_id = ? ORDER BY id", run_id) for t in tables}
    found["run"] = rows(db, "SELECT * FROM run WHERE id = ?", run_id)
    found["harness"] = rows(db, "SELECT * FROM harness WHERE run_id = ? ORDER BY id", run_id)
    found["checkpoint"] = rows(db, "SELECT * FROM checkpoint WHERE run_id = ? ORDER BY id", run_id)
    found["weights"] = {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for (path,) in rows(db, "SELECT path FROM checkpoint WHERE run_id = ?", run_id)
        for p in sorted(Path(path).rglob("*.safetensors"))
    }
    return found


@pytest.fixture(scope="module")
def forks(tmp_path_factory, model_server, model_cache) -> dict:
    """A WHALE parent (W1, H1), a harness-only fork of it after W1 with fresh budgets, and a
    WHALE fork of that fork after its first phase that continues its budget; all by the CLI."""
    tmp = tmp_path_factory.mktemp("forks")
    env = {
        **os.environ,
        "WHALE_HOME": str(tmp / "home"),
        "WHALE_MODEL_CACHE": str(model_cache),
        "WHALE_LLM_URL": model_server.base_url,
        "WHALE_LLM_MODEL": model_server.model,
    }
    (tmp / "program.py").write_text(PROGRAM)
    files = {
        # W1 (8 rollouts), H1 (2 + 2 x (2 + 1 smoke)): the next proposing iteration does not fit
        "parent": quick_toml("parent", rollouts=16, **SMALL),
        # after W1, harness-only: one harness phase of 8 rollouts, the budget counted afresh
        "child": quick_toml("child", "harness_only", rollouts=8, **SMALL),
        # after the child's H: a weight phase (8 rollouts) on top of the child's 8
        "grandchild": quick_toml("grandchild", rollouts=16, **SMALL),
    }
    files["parent"] = files["parent"].replace(
        'domain = "arith"', f'domain = "arith"\nharness = "{tmp / "program.py"}"'
    )
    files["child"] = files["child"].replace("[budget]\n", '[budget]\nafter_fork = "fresh"\n')
    for name, text in files.items():
        (tmp / f"{name}.toml").write_text(text)
    db = tmp / "home" / "whale.db"
    parent = run_json(
        whale("run", str(tmp / "parent.toml"), "--json", env=env, timeout=RUN_TIMEOUT)
    )
    before = snapshot(db, parent["run_id"])
    child = run_json(
        whale(
            "run",
            str(tmp / "child.toml"),
            "--from",
            f"{parent['run_id']}:1",
            "--json",
            env=env,
            timeout=RUN_TIMEOUT,
        )
    )
    grandchild = run_json(
        whale(
            "run",
            str(tmp / "grandchild.toml"),
            "--from",
            f"{child['run_id']}:1",
            "--json",
            env=env,
            timeout=RUN_TIMEOUT,
        )
    )
    return {
        "tmp": tmp,
        "env": env,
        "db": db,
        "parent": parent,
        "child": child,
        "grandchild": grandchild,
        "before": before,
    }


def config_of(db: Path, run_id: int) -> dict:
    from app.db import open_engine, read_session
    from app.db.schema import Run

    engine = open_engine(db)
    with read_session(engine) as s:
        config = s.get(Run, run_id).config
    engine.dispose()
    return config


@pytest.mark.slow
def test_a_fork_starts_from_the_parents_harness_file_and_checkpoint_weights(forks):
    db, parent, child = forks["db"], forks["parent"], forks["child"]
    w1 = parent["phases"][0]
    assert [p["kind"] for p in parent["phases"]] == ["weight", "harness"]
    (kind, path) = rows(db, "SELECT kind, path FROM checkpoint WHERE id = ?", w1["checkpoint_out"])[
        0
    ]
    assert kind == "lora", "the parent's RFT step trained no checkpoint to fork from"
    assert child["fork"] == {"run_id": parent["run_id"], "phase": 1}
    assert child["status"] == "done"
    # harness-only after W1: one harness phase, the child's first, counted as the lineage goes on
    (phase,) = child["phases"]
    assert (phase["kind"], phase["round"]) == ("harness", 1)
    # the very harness and checkpoint W1 handed on: the same rows, the same code bytes
    assert (
        phase["harness_in"] == w1["harness_out"] and phase["checkpoint_in"] == w1["checkpoint_out"]
    )
    (code,) = rows(db, "SELECT code FROM harness WHERE id = ?", phase["harness_in"])[0]
    assert code.encode() == PROGRAM.encode()
    # every rollout of the child ran under those weights, and the model server served them: its
    # model calls asked for the parent's checkpoint by its name
    checkpoint_name = rows(db, "SELECT name FROM checkpoint WHERE id = ?", w1["checkpoint_out"])
    used = rows(db, "SELECT DISTINCT checkpoint_id FROM rollout WHERE run_id = ?", child["run_id"])
    assert used == [(w1["checkpoint_out"],)]
    asked = {
        json.loads(zlib_json(r))["model"]
        for (r,) in rows(
            db,
            "SELECT s.request FROM step s JOIN rollout r ON r.id = s.rollout_id "
            "WHERE r.run_id = ? AND s.kind = 'model'",
            child["run_id"],
        )
    }
    assert asked == {checkpoint_name[0][0]}
    # the weights files the fork was served are the parent's, byte for byte
    weights = {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(path).rglob("*.safetensors"))
    }
    assert weights and all(forks["before"]["weights"][p] == h for p, h in weights.items())
    # its budget started afresh ([budget] after_fork = "fresh"): its own 8 rollouts of 8,
    # though the parent had spent 8 by the fork point (kept, for a fork that continues it)
    assert phase["rollouts"] == 8
    assert rollout_budget(db, child["run_id"]) == (8, 8, 0)
    assert config_of(db, child["run_id"])["fork"]["spent"]["rollouts"] == w1["rollouts"]


def rollout_budget(db: Path, run_id: int) -> tuple:
    """(used, limit, left) of the run's rollout budget, as its page shows them."""
    from app.db import open_engine, read_session
    from app.db.schema import Run
    from app.read.dashboard import budgets

    engine = open_engine(db)
    with read_session(engine) as s:
        line = next(b for b in budgets(s, s.get(Run, run_id)) if b["name"] == "rollouts")
    engine.dispose()
    return line["used"], line["limit"], line["left"]


def zlib_json(blob: bytes) -> str:
    import zlib

    return zlib.decompress(blob).decode()


@pytest.mark.slow
def test_a_fork_of_a_fork_goes_on_from_the_lineage_and_its_budget(forks):
    db, parent, child, grandchild = (forks[k] for k in ("db", "parent", "child", "grandchild"))
    assert grandchild["fork"] == {"run_id": child["run_id"], "phase": 1}
    # whale after (weight, harness): a weight phase, the lineage's second
    (phase,) = grandchild["phases"]
    assert (phase["kind"], phase["round"]) == ("weight", 2)
    assert phase["harness_in"] == child["phases"][0]["harness_out"]
    assert phase["checkpoint_in"] == child["phases"][0]["checkpoint_out"]
    # its checkpoint chain runs back through the parent's checkpoint to the base weights: the
    # program solver's answers are accepted (as the parent's W1 step), so its step trains one
    assert phase["checkpoint_out"] != phase["checkpoint_in"], "the fork's RFT step trained nothing"
    [(up,)] = rows(db, "SELECT parent_id FROM checkpoint WHERE id = ?", phase["checkpoint_out"])
    assert up == parent["phases"][0]["checkpoint_out"]
    # the budget continued the child's 8 rollouts: 16 - 8 left room for one RFT step (8)
    assert phase["rollouts"] == 8 and grandchild["ended"] == "budget used up"
    assert rollout_budget(db, grandchild["run_id"]) == (16, 16, 0)


@pytest.mark.slow
def test_the_parent_is_left_as_it_was_and_whale_check_verifies_the_link(forks, tmp_path):
    db, env = forks["db"], forks["env"]
    assert snapshot(db, forks["parent"]["run_id"]) == forks["before"]  # nothing of it changed
    store_invariants(db)  # every check of every run holds, the fork link among them
    for key in ("child", "grandchild"):
        proc = whale("check", str(forks[key]["run_id"]), "--json", env=env)
        checks = {c["name"]: c for c in json.loads(proc.stdout)}
        assert proc.returncode == 0 and checks["fork link"]["broken"] == []
    # a fork whose parent's fork point no longer holds what it started from is named
    home = tmp_path / "home"
    shutil.copytree(db.parent, home, ignore=shutil.ignore_patterns("*.lock"))
    child = forks["child"]
    con = sqlite3.connect(home / "whale.db")
    con.execute(
        "UPDATE phase SET harness_out_id = ? WHERE id = ?",
        (child["phases"][0]["harness_out"] + 1, forks["parent"]["phases"][0]["id"]),
    )
    con.commit()
    con.close()
    proc = whale("check", str(child["run_id"]), "--json", env={**env, "WHALE_HOME": str(home)})
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert proc.returncode == 1
    assert "the fork point" in checks["fork link"]["broken"][0]


@pytest.mark.slow
def test_export_keeps_the_link_and_the_fork_points_harness(forks, tmp_path):
    grandchild = forks["grandchild"]
    proc = whale(
        "export", str(grandchild["run_id"]), "--out", str(tmp_path / "out"), env=forks["env"]
    )
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert (run["parent_run_id"], run["fork_phase"]) == (forks["child"]["run_id"], 1)
    fork = run["config"]["fork"]
    harnesses = [
        json.loads(line) for line in (tmp_path / "out" / "harnesses.jsonl").read_text().splitlines()
    ]
    start = next(h for h in harnesses if h["id"] == fork["harness_id"])
    code = (tmp_path / "out" / start["file"]).read_text()
    assert hashlib.sha256(code.encode()).hexdigest() == fork["harness_sha"] == start["sha"]
    checkpoints = [
        json.loads(line)
        for line in (tmp_path / "out" / "checkpoints.jsonl").read_text().splitlines()
    ]
    assert fork["checkpoint_id"] in {c["id"] for c in checkpoints}


@pytest.mark.slow
def test_an_imported_fork_keeps_its_fork_point_as_a_record_and_checks_clean(forks, tmp_path):
    """Its parent stays in the exporting store: imported elsewhere, the fork's start is the
    imported copy of the fork point's harness, and no link points at an unrelated run."""
    grandchild = forks["grandchild"]
    out = tmp_path / "out"
    proc = whale("export", str(grandchild["run_id"]), "--out", str(out), env=forks["env"])
    assert proc.returncode == 0, proc.stderr
    env = {**forks["env"], "WHALE_HOME": str(tmp_path / "elsewhere")}
    proc = whale("import", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    run_id = int(re.search(r"imported as run (\d+)", proc.stdout).group(1))
    db = tmp_path / "elsewhere" / "whale.db"
    [(parent, phase)] = rows(db, "SELECT parent_run_id, fork_phase FROM run WHERE id = ?", run_id)
    assert (parent, phase) == (None, None)
    config = config_of(db, run_id)
    exported_fork = json.loads((out / "run.json").read_text())["config"]["fork"]
    assert config["forked_in_export"] == exported_fork
    [(sha,)] = rows(db, "SELECT sha FROM harness WHERE id = ?", config["start"]["harness_id"])
    assert sha == exported_fork["harness_sha"]
    proc = whale("check", str(run_id), "--json", env=env)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.slow
def test_compare_draws_a_fork_from_its_fork_point_after_the_parents_curve(forks):
    from app.db import open_engine, read_session
    from app.read.compare import get_comparison

    parent, child, grandchild = (forks[k] for k in ("parent", "child", "grandchild"))
    engine = open_engine(forks["db"])
    with read_session(engine) as s:
        ids = [parent["run_id"], child["run_id"], grandchild["run_id"]]
        curves = list(get_comparison(s, ids, "rollouts")["curves"].values())
    engine.dispose()
    parent_curve, child_curve, grandchild_curve = curves
    at = parent["phases"][0]["rollouts"]  # W1's 8 rollouts: where the child branched off
    # the child's curve: the parent's points up to the fork point, then its own, from there on
    inherited = [p for p in child_curve if p.get("inherited")]
    assert inherited and all(p["run_id"] == parent["run_id"] and p["x"] <= at for p in inherited)
    assert [(p["x"], p["y"]) for p in inherited] == [
        (p["x"], p["y"]) for p in parent_curve if p["x"] <= at
    ]
    own = [p for p in child_curve if not p.get("inherited")]
    assert [p["x"] for p in own] == [at + t["rollouts"] for t in child["test_points"]]
    # the fork of the fork: the parent's and the child's points, then its own after both
    runs = [p["run_id"] for p in grandchild_curve]
    assert runs == sorted(runs, key=ids.index) and set(runs) == set(ids)
    xs = [p["x"] for p in grandchild_curve]
    assert xs == sorted(xs) and xs[-1] == at + 8 + grandchild["test_points"][-1]["rollouts"]


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{MISSING}no Chromium at {CHROMIUM}")
def test_the_fork_flow_in_a_browser(forks, page, tmp_path):  # noqa: F811
    """Run page -> "Fork from here" -> the start form filled in -> start -> the fork's page,
    in headless Chromium over `whale serve` on a copy of the store."""
    from playwright.sync_api import expect

    parent = forks["parent"]
    home = tmp_path / "home"
    shutil.copytree(forks["db"].parent, home, ignore=shutil.ignore_patterns("*.lock"))
    with whale_serve({**forks["env"], "WHALE_HOME": str(home)}) as url:
        ARTIFACTS.mkdir(exist_ok=True)
        ids = "&".join(f"ids={forks[k]['run_id']}" for k in ("parent", "child", "grandchild"))
        page.goto(f"{url}/runs/compare?{ids}")  # the forks drawn from their fork points
        expect(page.locator("svg").first).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "fork-compare.png"), full_page=True)
        page.goto(f"{url}/runs/{parent['run_id']}")
        expect(page.locator("#timeline-forks a.fork-link")).to_have_count(2)
        page.screenshot(path=str(ARTIFACTS / "fork-timeline.png"))
        page.locator("#timeline-forks a.fork-link").first.click()
        expect(page).to_have_url(re.compile(rf"/runs\?from={parent['run_id']}:1"))
        expect(page.locator("#fork-from")).to_have_value(f"{parent['run_id']}:1")
        expect(page.locator("#experiment")).to_have_value(
            (forks["tmp"] / "parent.toml").read_text()
        )
        page.screenshot(path=str(ARTIFACTS / "fork-form.png"), full_page=True)
        page.locator("#experiment").fill(
            (forks["tmp"] / "child.toml").read_text().replace('"child"', '"browser fork"')
        )
        page.get_by_role("button", name="Start run").click()
        forked = page.locator("#forked-from")
        expect(forked).to_contain_text(f"run {parent['run_id']}")
        expect(forked).to_contain_text("after its phase 1")
        page.screenshot(path=str(ARTIFACTS / "fork-run-page.png"), full_page=True)
    assert page.errors == []


@pytest.mark.slow
def test_fork_from_here_opens_the_start_form_filled_in(forks):
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.server import create_app
    from app.workbench import Workbench

    parent, child = forks["parent"], forks["child"]
    served = Workbench(Settings(home=forks["db"].parent), say=lambda _: None)
    client = TestClient(
        create_app(served, token=WEB_TOKEN), base_url="http://localhost", headers=AUTH
    )
    shown = client.get(f"/runs/{parent['run_id']}").text
    # on the timeline, under each finished phase
    links = re.findall(r'<a class="fork-link" href="([^"]+)"', shown)
    assert links == [f"/runs?from={parent['run_id']}:{n}#start-run" for n in (1, 2)]
    lineage = client.get(f"/runs/{parent['run_id']}/lineage").text
    assert f'href="/runs?from={parent["run_id"]}:2#start-run"' in lineage  # its harness phase
    assert client.get(f"/api/runs/{parent['run_id']}/lineage").json()["phases"][0]["fork_from"] == (
        f"{parent['run_id']}:2"
    )
    # the form, open, with the parent's experiment and the fork point
    form = client.get(f"/runs?from={parent['run_id']}:1").text
    source = (forks["tmp"] / "parent.toml").read_text()
    assert '<details class="start-run" id="start-run" open>' in form
    assert f'name="fork_from" value="{parent["run_id"]}:1"' in form
    textarea = re.search(r'<textarea id="experiment"[^>]*>(.*?)</textarea>', form, re.S)[1]
    assert html.unescape(textarea) == source
    data = client.get(f"/api/runs?from={parent['run_id']}:1").json()
    assert (data["experiment"], data["fork_from"]) == (source, f"{parent['run_id']}:1")
    # a fork's own page names its parent; its lineage says where it branched off
    child_page = client.get(f"/runs/{child['run_id']}").text
    assert 'id="forked-from"' in child_page and f'href="/runs/{parent["run_id"]}"' in child_page
    assert (
        client.get(f"/api/runs/{child['run_id']}/lineage").json()["fork"]["run_id"]
        == parent["run_id"]
    )
    # started from the form: through the one start, the fork point resolved and stored
    csrf = client.get("/api/csrf").json()["csrf_token"]
    started = client.post(
        "/api/runs",
        headers={"X-CSRF-Token": csrf},
        json={
            "experiment": source.replace('name = "parent"', 'name = "web fork"'),
            "fork_from": f"{parent['run_id']}:1",
        },
    )
    assert started.status_code == 201, started.text
    run = started.json()["run"]
    assert (run["parent_run_id"], run["fork_phase"]) == (parent["run_id"], 1)
    assert run["config"]["start"]["harness_id"] == parent["phases"][0]["harness_out"]
    refused = client.post(
        "/api/runs",
        headers={"X-CSRF-Token": csrf},
        json={"experiment": source, "fork_from": f"{parent['run_id']}:9"},
    )
    assert refused.status_code == 422 and "has 2 phases" in refused.json()["detail"]
    asyncio.run(served.stop())


def test_fork_points_are_read_or_refused_by_name():
    assert parse_point("3:2") == (3, 2) and parse_point(" 12 : 0 ") == (12, 0)
    for bad in ("3", "a:1", "3:-1", ""):
        with pytest.raises(ForkError, match="RUN:PHASE"):
            parse_point(bad)


def test_a_fork_point_that_is_no_boundary_is_refused_by_name(store, workbench):  # noqa: F811
    """Nothing is created from a run that is still moving, a phase that is not done, a phase
    that does not exist, another domain's run or weights retention dropped."""
    from app.db.schema import Checkpoint, Phase, Run, now
    from app.loop.fork import fork_point

    base = store.checkpoint()
    run = store.write(Run(name="parent", kind="experiment", domain="arith", status="running"))
    harness = store.harness(run)
    trained = store.write(Checkpoint(name="w1", kind="lora", parent_id=base.id))
    start = {"harness_id": harness.id, "checkpoint_id": base.id}
    store.write_values(run, config={"start": start})
    done = dict(run_id=run.id, status="done", harness_in_id=harness.id, checkpoint_in_id=base.id)
    store.write(
        Phase(
            kind="weight", round=1, **done, harness_out_id=harness.id, checkpoint_out_id=trained.id
        ),
        Phase(kind="harness", round=1, run_id=run.id, status="running"),
    )

    def refusal(n: int, domain: str = "arith") -> str:
        with workbench.session() as s:
            with pytest.raises(ForkError) as caught:
                fork_point(s, run.id, n, domain)
        return str(caught.value)

    assert "is running; a fork starts from a finished or paused run" in refusal(1)
    store.write_values(run, status="paused")
    assert "phase 2 of run" in refusal(2) and "running, not done" in refusal(2)
    assert f"run {run.id} has 2 phases" in refusal(3)
    assert "on arith, the experiment on math" in refusal(1, "math")
    store.write_values(trained, weights_dropped_at=now())
    assert f"checkpoint {trained.id}: retention dropped its weights" in refusal(1)
    # the start itself is a boundary: the base weights need no files of the run
    with workbench.session() as s:
        point = fork_point(s, run.id, 0, "arith")
    assert (point["harness_id"], point["checkpoint_id"], point["kinds"]) == (
        harness.id,
        base.id,
        [],
    )
    assert point["spent"]["rollouts"] == 0 and point["offset"]["rollouts"] == 0


def test_a_fork_on_the_command_line_ignores_the_files_harness(tmp_path):
    """The fork starts from its fork point's harness, so the file's `harness` is not read: it is
    not refused for a file that is not there (the fork point is what is checked)."""
    path = tmp_path / "fork.toml"
    path.write_text(
        quick_toml("fork").replace("\nseed = 0", '\nharness = "/nowhere/h.py"\nseed = 0')
    )
    env = {**os.environ, "WHALE_HOME": str(tmp_path / "home")}
    plain = whale("run", str(path), env=env, timeout=120)
    assert plain.returncode == 2 and "harness: no file /nowhere/h.py" in plain.stderr
    for seeds in ((), ("--seeds", "1,2")):
        fork = whale("run", str(path), "--from", "1:1", *seeds, env=env, timeout=120)
        assert fork.returncode == 2 and "harness" not in fork.stderr, fork.stderr
        assert "--from 1:1: no experiment run 1 in this store" in fork.stderr


@pytest.mark.parametrize("flag", ["--dry-run", "--rehearse"])
def test_a_fork_is_not_dry_run_or_rehearsed_silently(flag, tmp_path):
    """Neither opens the store the fork point is in: the combination is refused, not run as a
    plain run that ignores --from."""
    path = tmp_path / "fork.toml"
    path.write_text(quick_toml("fork"))
    env = {**os.environ, "WHALE_HOME": str(tmp_path / "home")}
    proc = whale("run", str(path), "--from", "1:1", flag, env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--from with {flag}: " in proc.stderr
    assert not (tmp_path / "home").exists()
