"""Runs sent on to MLflow (its local file store) and W&B (offline, no network): what the store
holds is what the trackers got; a tracker that fails, hangs or is missing never stops a run."""

import json
import socket
import sqlite3
import struct
import sys
import threading

import pytest
from sqlmodel import select

from app.config import Settings
from app.db.schema import Event, Run
from app.trackers import Sink
from app.workbench import Workbench
from tests.api.synthetic_store import Store
from tests.conftest import attached_settings
from tests.loop.conftest import logged, quick_toml
from tests.loop.test_strategies import run_in_process


def wandb_records(run_dir) -> list:
    """The records of an offline W&B run, read from its .wandb file: W&B's protobuf records in
    LevelDB's log framing (32 KiB blocks; each chunk: crc32, length, type; 7-byte file header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    data, pos, chunk, records = path.read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or a record's last chunk
            record = pb.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


@pytest.fixture
def tracker_env(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 would ask for a database
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield tmp_path
    # W&B keeps its settings (WANDB_MODE among them) in a process-wide singleton once set up:
    # a later test in the same process must start from the environment it sets, not this one's
    if "wandb" in sys.modules and sys.modules["wandb"] is not None:
        sys.modules["wandb"].teardown()


def store_rows(db, sql: str, *args) -> list:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_a_run_is_logged_to_mlflow_and_wandb(tracker_env, model_server, model_cache):
    import mlflow

    home = tracker_env / "home"
    settings = attached_settings(home, model_server, model_cache)
    settings.trackers = "mlflow,wandb"
    run_id = run_in_process(quick_toml(rollouts=44), settings)
    db = home / "whale.db"
    assert store_rows(db, "SELECT status FROM run WHERE id = ?", run_id) == [("done",)]
    assert logged(db, "tracker_failed", "tracker_skipped") == []
    points = store_rows(
        db,
        "SELECT m.rollouts, m.y, e.ci_low, e.ci_high FROM metric m JOIN evaluation e"
        " ON e.id = m.evaluation_id WHERE m.run_id = ? AND m.series = 'test/mean@k'"
        " ORDER BY m.id",
        run_id,
    )
    jobs = store_rows(
        db, "SELECT n_accepted FROM training_job WHERE run_id = ? ORDER BY id", run_id
    )
    accepted = store_rows(
        db,
        "SELECT h.code FROM phase p JOIN harness h ON h.id = p.harness_out_id"
        " WHERE p.run_id = ? AND p.kind = 'harness' ORDER BY p.id",
        run_id,
    )
    assert len(points) >= 2 and jobs and accepted

    # MLflow, read back through its client on the file store
    client = mlflow.MlflowClient()
    (found,) = client.search_runs([client.get_experiment_by_name("whale").experiment_id])
    assert found.info.status == "FINISHED" and found.info.run_name.endswith(f"(run {run_id})")
    assert found.data.params["rft.lr"] == "0.001" and found.data.params["strategy"] == "whale"
    history = client.get_metric_history(found.info.run_id, "test/mean_at_k")
    assert [(m.step, m.value) for m in history] == [(r, y) for r, y, _, _ in points]
    lows = client.get_metric_history(found.info.run_id, "test/ci_low")
    assert [m.value for m in lows] == [low for _, _, low, _ in points]
    steps = client.get_metric_history(found.info.run_id, "train/accepted")
    assert [m.value for m in steps] == [n for (n,) in jobs]
    assert "train/step_s/sampling" in found.data.metrics
    files = client.list_artifacts(found.info.run_id, "harnesses")
    texts = [client.download_artifacts(found.info.run_id, f.path) for f in files]
    assert sorted(open(t).read() for t in texts) == sorted(code for (code,) in accepted)

    # W&B, read back from the offline run's own record file
    (run_dir,) = (tracker_env / "wandb").glob("offline-run-*")
    records = wandb_records(run_dir)
    (run_record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run_record.config.update}
    assert config["rft.lr"] == 0.001 and config["strategy"] == "whale"
    logged_points = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            # a key with a slash is stored split, in nested_key
            items = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            if "test/mean_at_k" in items:
                logged_points.append((int(items["rollouts"]), items["test/mean_at_k"]))
    assert logged_points == [(r, y) for r, y, _, _ in points]
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert len(artifacts) == len(accepted)
    assert all(a.type == "harness" and a.name.startswith("harnesses-phase-") for a in artifacts)


class SilentServer:
    """A TCP port that accepts connections and never answers: a tracker server that hangs."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.slow
def test_a_failing_tracker_does_not_stop_the_run(
    tracker_env, monkeypatch, model_server, model_cache
):
    silent = SilentServer()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{silent.port}")  # hangs
    monkeypatch.setenv("WANDB_MODE", "nonsense")  # W&B refuses to start: raises
    home = tracker_env / "home"
    settings = attached_settings(home, model_server, model_cache)
    settings.trackers, settings.tracker_timeout = "wandb,neptune,mlflow", 2.0
    try:
        text = quick_toml(strategy="harness_only", rollouts=20, test={"at_start": "false"})
        run_id = run_in_process(text, settings)
    finally:
        silent.close()
    db = home / "whale.db"
    assert store_rows(db, "SELECT status FROM run WHERE id = ?", run_id) == [("done",)]
    notes = {e.detail["tracker"]: (e.kind, e.detail["why"]) for e in logged(db, *NOTES)}
    assert notes["mlflow"] == ("tracker_failed", TIMEOUT_NOTE)
    assert notes["wandb"][0] == "tracker_failed" and "nonsense" in notes["wandb"][1]
    assert notes["neptune"] == ("tracker_skipped", "unknown tracker (known: mlflow, wandb)")


NOTES = ("tracker_failed", "tracker_skipped")
TIMEOUT_NOTE = "did not answer within 2 s; what it had not logged is lost"


def test_a_missing_package_is_a_one_line_note(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: importing it fails
    workbench = Workbench(Settings(home=tmp_path / "home", sandbox="process"))
    try:
        run = Store(workbench).write(
            Run(name="r", kind="experiment", domain="arith", config={"experiment": {}})
        )
        Sink(workbench, run.id, ["wandb"], timeout_s=5).close("done")
        workbench.writer.flush()
        with workbench.session() as s:
            notes = [
                (e.kind, e.detail) for e in s.exec(select(Event).where(Event.run_id == run.id))
            ]
    finally:
        workbench.writer.close()
    why = "not installed: pip install wandb"
    assert notes == [("tracker_skipped", {"tracker": "wandb", "why": why})]
