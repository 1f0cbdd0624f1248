"""A store written by an earlier version: its schema at an earlier migration level, its rows as
that version wrote them. Opening it with the current code upgrades it in place; nothing is lost
and every page renders."""

import asyncio
import json
import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from safetensors.numpy import save_file

from app.config import Settings
from app.db import open_engine
from app.db.migrations import MIGRATIONS
from app.read.invariants import run_checks
from app.server import create_app
from app.stats import mean_interval
from app.workbench import Workbench
from tests.conftest import AUTH, WEB_TOKEN

T0 = "2025-06-01 10:00:00.000000"
T1 = "2025-06-01 10:05:00.000000"
CODE = "def run(task, llm, tools):\n    return llm.chat([{'role': 'user', 'content': 'q'}])\n"
# Tables and the rows the old store holds in them (what the test counts after the upgrade).
COUNTS = {
    "run": 1,
    "harness": 1,
    "checkpoint": 2,
    "phase": 1,
    "evaluation": 2,
    "rollout": 4,
    "step": 4,
    "training_job": 1,
    "metric": 3,
    "event": 2,
}


def z(value) -> bytes:
    """A JSON column as the store writes it (app/db/schema.py ZJSON)."""
    return zlib.compress(json.dumps(value).encode(), 3)


OLD_SCHEMAS = Path(__file__).parent / "old_schemas"


def migrate_to(conn: sqlite3.Connection, level: str) -> None:
    """The store's schema at `level` as that version made it: the frozen copy in old_schemas/,
    recorded as applied up to `level`."""
    conn.executescript((OLD_SCHEMAS / f"{level}.sql").read_text())
    conn.execute(
        "CREATE TABLE IF NOT EXISTS migration (name TEXT PRIMARY KEY, applied_at DATETIME NOT NULL)"
    )
    names = [name for name, _ in MIGRATIONS]
    conn.executemany(
        "INSERT INTO migration VALUES (?, ?)", [(n, T0) for n in names[: names.index(level) + 1]]
    )
    conn.commit()


def columns(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    """Each table's columns as SQLite reports them: name, type, not null, default, key."""
    tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: [r[1:] for r in conn.execute(f"PRAGMA table_info({t})")] for t in sorted(tables)}


@pytest.mark.parametrize("level", [p.stem for p in sorted(OLD_SCHEMAS.glob("*.sql"))])
def test_the_migrations_up_to_a_level_still_make_its_frozen_schema(level):
    """Migrations are forward-only: an edit to one that a released store already applied would
    leave those stores unlike new ones. Replaying them must give the frozen schema."""
    frozen, replayed = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    migrate_to(frozen, level)
    replayed.execute("CREATE TABLE migration (name TEXT PRIMARY KEY, applied_at DATETIME NOT NULL)")
    names = [name for name, _ in MIGRATIONS]
    for name, sql in MIGRATIONS[: names.index(level) + 1]:
        replayed.executescript(
            f"BEGIN;\n{sql}\nINSERT INTO migration VALUES ('{name}', '{T0}');\nCOMMIT;"
        )
    assert columns(replayed) == columns(frozen)


def write_old_store(home: Path, level: str) -> Path:
    """An RFT run as `whale train` recorded it at `level` (every column named here exists since
    004_loop): a test point on the base, one RFT step sampling 2 prompts x 2 and training a LoRA
    checkpoint whose weights are on disk, the phase and its curve."""
    adapter = home / "checkpoints" / "run-1" / "job-1" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 4}))
    save_file({"w": np.zeros(4, dtype=np.float32)}, adapter / "adapter_model.safetensors")
    db = home / "whale.db"
    conn = sqlite3.connect(db)
    migrate_to(conn, level)
    rft = {"steps": 1, "prompts_per_step": 2, "samples_per_prompt": 2, "lora_rank": 4}
    rows = [
        ("INSERT INTO run (id, name, kind, domain, status, config, created_at, finished_at, "
         "desired) VALUES (1, 'rft seed.py', 'rft', 'arith', 'done', ?, ?, ?, 'running')",
         (z({"harness": "seed.py", "rft": rft, "test_k": 1, "test_limit": 2}), T0, T1)),
        ("INSERT INTO harness (id, run_id, name, code, sha, proposer, valid, created_at) "
         "VALUES (1, 1, 'seed.py', ?, 'abc', 'seed', 1, ?)", (CODE, T0)),
        ("INSERT INTO checkpoint (id, kind, name, path, created_at) "
         "VALUES (1, 'base', 'smol', NULL, ?)", (T0,)),
        ("INSERT INTO phase (id, run_id, kind, round, status, ended_reason, harness_in_id, "
         "harness_out_id, checkpoint_in_id, checkpoint_out_id, rollouts, created_at, finished_at) "
         "VALUES (1, 1, 'weight', 1, 'done', 'fixed', 1, 1, 1, 2, 4, ?, ?)", (T0, T1)),
        ("INSERT INTO evaluation (id, run_id, harness_id, checkpoint_id, split, k, n_tasks, "
         "status, mean_at_k, mean_turns, total_tokens, n_done, created_at, finished_at, phase_id) "
         "VALUES (1, 1, 1, 1, 'train', 2, 2, 'done', 0.5, 1, 100, 4, ?, ?, 1)", (T0, T0)),
        ("INSERT INTO training_job (id, run_id, harness_id, checkpoint_in_id, checkpoint_out_id, "
         "evaluation_id, step, status, config, n_rollouts, n_accepted, mean_reward, n_examples, "
         "tokens_trained, loss, created_at, finished_at, phase_id) "
         "VALUES (1, 1, 1, 1, 2, 1, 0, 'done', ?, 4, 2, 0.5, 2, 40, 1.25, ?, ?, 1)",
         (z(rft), T0, T1)),
        ("INSERT INTO checkpoint (id, run_id, parent_id, kind, name, path, created_at, "
         "training_job_id, size_bytes) VALUES (2, 1, 1, 'lora', ?, ?, ?, 1, 16)",
         (str(adapter), str(adapter.parent), T1)),
        ("INSERT INTO evaluation (id, run_id, harness_id, checkpoint_id, split, k, n_tasks, "
         "status, mean_at_k, mean_turns, total_tokens, n_done, created_at, finished_at, phase_id) "
         "VALUES (2, 1, 1, 2, 'test', 1, 0, 'done', 0.0, 0, 0, 0, ?, ?, NULL)", (T1, T1)),
        ("INSERT INTO metric (run_id, training_job_id, series, x, rollouts, y, created_at) "
         "VALUES (1, 1, 'train/loss', 0.5, 0, 1.25, ?)", (T0,)),
        ("INSERT INTO metric (run_id, training_job_id, series, x, rollouts, y, created_at) "
         "VALUES (1, 1, 'train/accept_rate', 0, 4, 0.5, ?)", (T0,)),
        ("INSERT INTO metric (run_id, series, x, rollouts, y, created_at, evaluation_id, "
         "weight_steps, wall_s) VALUES (1, 'test/mean@k', 4, 4, 0.0, ?, 2, 1, 300.0)", (T1,)),
        ("INSERT INTO event (run_id, kind, detail, created_at) VALUES (1, 'run_start', ?, ?)",
         (z({"kind": "rft"}), T0)),
        ("INSERT INTO event (run_id, kind, detail, created_at) VALUES (1, 'run_end', ?, ?)",
         (z({"reason": "done"}), T1)),
    ]  # fmt: skip
    for i, passed in enumerate([True, False, True, False]):
        rows.append((
            "INSERT INTO rollout (id, run_id, evaluation_id, harness_id, checkpoint_id, task_id, "
            "sample, task, gold, status, answer, reward, turns, prompt_tokens, "
            "completion_tokens, wall_s, created_at, finished_at) "
            "VALUES (?, 1, 1, 1, 1, ?, ?, ?, '2', ?, ?, ?, 1, 20, 5, 0.5, ?, ?)",
            (i + 1, f"train-{i // 2}", i % 2, z({"question": "What is 1 + 1?"}),
             "pass" if passed else "fail", "2" if passed else "3", float(passed), T0, T0),
        ))  # fmt: skip
        rows.append((
            "INSERT INTO step (rollout_id, idx, kind, request, response, prompt_tokens, "
            "completion_tokens, latency_ms, created_at) VALUES (?, 0, 'model', ?, ?, 20, 5, 80, ?)",
            (i + 1, z({"messages": [{"role": "user", "content": "What is 1 + 1?"}]}),
             z({"message": {"role": "assistant", "content": "2"}, "finish_reason": "stop"}), T0),
        ))  # fmt: skip
    for sql, params in rows:
        conn.execute(sql, params)
    conn.commit()
    conn.close()
    return db


def snapshot(db: Path) -> dict:
    with sqlite3.connect(db) as conn:
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTS}
        keys = {
            "checkpoints": conn.execute(
                "SELECT id, parent_id, kind, path, training_job_id FROM checkpoint ORDER BY id"
            ).fetchall(),
            "job": conn.execute(
                "SELECT checkpoint_in_id, checkpoint_out_id, evaluation_id, status, loss "
                "FROM training_job"
            ).fetchall(),
            "rollouts": conn.execute(
                "SELECT id, evaluation_id, status, reward FROM rollout ORDER BY id"
            ).fetchall(),
            "phase": conn.execute(
                "SELECT checkpoint_in_id, checkpoint_out_id, rollouts FROM phase"
            ).fetchall(),
            "run_config": zlib.decompress(conn.execute("SELECT config FROM run").fetchone()[0]),
        }
    return {"counts": counts, **keys}


@pytest.mark.parametrize("level", ["004_loop", "011_commit_gate"])
def test_a_store_from_an_earlier_version_upgrades_keeping_every_row_and_every_page(tmp_path, level):
    home = tmp_path / "home"
    db = write_old_store(home, level)
    before = snapshot(db)
    assert before["counts"] == COUNTS

    open_engine(db).dispose()  # what every command does first: upgrade in place
    with sqlite3.connect(db) as conn:
        applied = [name for (name,) in conn.execute("SELECT name FROM migration")]
        dropped_col = [r[1] for r in conn.execute("PRAGMA table_info(checkpoint)")]
    assert sorted(applied) == sorted(name for name, _ in MIGRATIONS)
    assert "weights_dropped_at" in dropped_col
    # the upgraded store has the schema a new store gets, column for column
    fresh = tmp_path / "fresh.db"
    open_engine(fresh).dispose()
    with sqlite3.connect(db) as upgraded, sqlite3.connect(fresh) as new:
        assert columns(upgraded) == columns(new)
    assert snapshot(db) == before
    open_engine(db).dispose()  # and again: nothing left to apply, nothing changes
    assert snapshot(db) == before

    workbench = Workbench(Settings(home=home), say=lambda _: None)
    try:
        with workbench.session() as s:
            checks = {c.name: c.broken for c in run_checks(s, 1)}
        assert checks["checkpoints"] == []  # the weights on disk still read
        client = TestClient(
            create_app(workbench, token=WEB_TOKEN), base_url="http://localhost", headers=AUTH
        )
        pages = [
            "/runs",
            "/runs/1",
            "/runs/1/live",
            "/runs/1/checks",
            "/harnesses/1",
            "/training/1",
            "/checkpoints/1",
            "/checkpoints/2",
            "/rollouts",
            "/rollouts?evaluation=1&status=pass",
            "/rollouts/1",
        ]
        for path in pages:
            page = client.get(path)
            assert page.status_code == 200, (path, page.text[-2000:])
            data = client.get("/api" + path)
            assert data.status_code == 200, (path, data.text[-2000:])
        job = client.get("/api/training/1").json()
        assert (job["job"]["loss"], job["job"]["n_accepted"]) == (1.25, 2)
        assert job["time_split"] == []  # a step recorded before steps were timed
        assert "Where the time went" not in client.get("/training/1").text
        checkpoint = client.get("/api/checkpoints/2").json()
        assert checkpoint["weights"]["dropped"] is False
        assert [c["id"] for c in checkpoint["lineage"]] == [1, 2]
        assert len(client.get("/api/rollouts?evaluation=1&status=pass").json()["items"]) == 2
    finally:
        asyncio.run(workbench.stop())


def test_intervals_that_collapsed_to_a_point_are_made_exact_on_upgrade(tmp_path):
    """A store whose resampled intervals collapsed where every task scored the same: every
    task failed on 4 tasks ([0, 0] becomes 0 of 4's exact [0, 0.602]), every task at 0.5 (no
    interval then), and one that did not collapse (kept)."""
    db = write_old_store(tmp_path / "home", "012_checkpoint_retention")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE evaluation SET ci_low = 0.5, ci_high = 0.5 WHERE id = 1")
        conn.execute("UPDATE evaluation SET n_tasks = 4, ci_low = 0, ci_high = 0 WHERE id = 2")
        conn.execute(
            "INSERT INTO evaluation (id, run_id, harness_id, checkpoint_id, split, k, n_tasks, "
            "status, mean_at_k, n_done, created_at, ci_low, ci_high) "
            "VALUES (3, 1, 1, 2, 'test', 1, 4, 'done', 1.0, 4, ?, 1.0, 1.0), "
            "(4, 1, 1, 2, 'test', 1, 8, 'done', 0.5, 8, ?, 0.25, 0.75)",
            (T1, T1),
        )
    open_engine(db).dispose()
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, ci_low, ci_high FROM evaluation ORDER BY id").fetchall()
    assert rows[0] == (1, None, None)
    assert rows[1][1:] == pytest.approx(mean_interval([0.0] * 4))  # as app/stats.py gives it now
    assert rows[2][1:] == pytest.approx(mean_interval([1.0] * 4))
    assert rows[3] == (4, 0.25, 0.75)
