"""Each run sent on to the experiment trackers people already keep: MLflow and W&B
(WHALE_TRACKERS=mlflow,wandb; docs/settings.md, "Trackers").

The loop only pokes the sink after it has written a test point, an RFT step or a phase's end
(app/loop/driver.py); the sink's own thread then reads what is new from the store and logs it:
the experiment's settings as parameters, test mean@k with its interval, the accepted counts and
timings of each RFT step as metrics keyed by the rollouts used, and each harness a harness phase
accepted as a file. A slow or hung tracker therefore never holds a rollout. A tracker that is
not installed, or that fails, is noted in the run's log (`tracker_skipped`, `tracker_failed`)
and dropped; the run goes on without it.
"""

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlmodel import col, select

from app.db.schema import Evaluation, Event, Harness, Metric, Phase, Run, TrainingJob, utc
from app.experiment_schema import flatten
from app.phases import TEST_SERIES

if TYPE_CHECKING:
    from app.workbench import Workbench

log = logging.getLogger(__name__)
KNOWN = ("mlflow", "wandb")
PROJECT = "whale"  # the MLflow experiment and the W&B project runs are logged under
PACKAGES = {"mlflow": "mlflow-skinny (or mlflow)", "wandb": "wandb"}


class MLflowTracker:
    """One MLflow run, through the client API (no process-wide active run: several runs of one
    process log side by side). Where it goes is MLflow's own setting, MLFLOW_TRACKING_URI."""

    name = "mlflow"

    def __init__(self, run_name: str, params: dict, resume_id: str | None):
        import mlflow

        self.client = mlflow.MlflowClient()
        if resume_id:
            self.id = resume_id
            return
        experiment = self.client.get_experiment_by_name(PROJECT)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(PROJECT)
        )
        self.id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes 100 parameters per batch
            self.client.log_batch(self.id, params=items[start : start + 100])

    def metrics(self, values: dict[str, float], rollouts: int, at_ms: int) -> None:
        from mlflow.entities import Metric as MLflowMetric

        points = [MLflowMetric(k, float(v), at_ms, rollouts) for k, v in values.items()]
        self.client.log_batch(self.id, metrics=points)

    def file(self, path: str, text: str) -> None:
        self.client.log_text(self.id, text, path)

    def finish(self, status: str) -> None:
        state = {"done": "FINISHED", "failed": "FAILED"}.get(status, "KILLED")
        self.client.set_terminated(self.id, status=state)


class WandbTracker:
    """One W&B run. Its x axis is the metric `rollouts` (W&B's own step counts log calls);
    WANDB_MODE, WANDB_DIR and WANDB_PROJECT are W&B's own settings (offline works unplugged)."""

    name = "wandb"

    def __init__(self, run_name: str, params: dict, resume_id: str | None):
        import os

        import wandb

        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", PROJECT),
            name=run_name,
            config=params,
            id=resume_id,
            resume="allow" if resume_id else None,
            reinit="create_new",  # one W&B run per workbench run, even in one process
            settings=wandb.Settings(silent=True, console="off"),
        )
        self.id = self.run.id
        self.run.define_metric("rollouts")
        self.run.define_metric("*", step_metric="rollouts")

    def metrics(self, values: dict[str, float], rollouts: int, at_ms: int) -> None:
        self.run.log({"rollouts": rollouts, **values})

    def file(self, path: str, text: str) -> None:
        name = path.replace("/", "-").replace(".py", "")
        artifact = self.wandb.Artifact(name, type="harness")
        with artifact.new_file(path.rsplit("/", 1)[-1]) as f:
            f.write(text)
        self.run.log_artifact(artifact)

    def finish(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "done" else 1)


TRACKERS: dict[str, Callable] = {"mlflow": MLflowTracker, "wandb": WandbTracker}


def wanted(setting: str | None) -> list[str]:
    return [name.strip().lower() for name in (setting or "").split(",") if name.strip()]


class Sink:
    """The trackers of one run, fed by a thread of their own. `poke` never waits; `close` waits
    at most `timeout_s` for what is left, then notes a tracker that did not answer."""

    def __init__(
        self, workbench: "Workbench", run_id: int, names: list[str], timeout_s: float = 30.0
    ):
        self.wb, self.run_id, self.names, self.timeout_s = workbench, run_id, names, timeout_s
        self.trackers: list = []
        self.status = "done"
        # what was logged so far (ids of the store's rows), kept across a resume in the log
        self.cursor = {"metric": 0, "job": 0, "phase": 0}
        self._wake = threading.Event()
        self._closing = False
        self._busy: str | None = None  # the tracker the thread is calling now
        self._thread = threading.Thread(target=self._work, name=f"trackers-{run_id}", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def close(self, status: str) -> None:
        self.status, self._closing = status, True
        self._wake.set()
        self._thread.join(self.timeout_s)
        if self._thread.is_alive():
            why = f"did not answer within {self.timeout_s:g} s; what it had not logged is lost"
            self._note("tracker_failed", self._busy or "trackers", why)

    # -- the thread --------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # noqa: BLE001 - reading the store failed: said, never raised
            log.exception("the trackers of run %s stopped", self.run_id)
            self._note("tracker_failed", "trackers", f"{type(exc).__name__}: {exc}"[:1000])

    def _serve(self) -> None:
        self._open()
        while True:
            self._wake.wait()
            self._wake.clear()
            closing = self._closing
            if self.trackers:
                self._sync()
            if closing:
                self._each("finish", self.status)
                ids = {t.name: t.id for t in self.trackers}
                if ids:
                    self._note("tracker_logged", None, None, trackers=ids, cursor=self.cursor)
                return

    def _open(self) -> None:
        with self.wb.session() as s:
            run = s.get(Run, self.run_id)
            last = s.exec(
                select(Event)
                .where(Event.run_id == self.run_id, Event.kind == "tracker_logged")
                .order_by(col(Event.id).desc())
                .limit(1)
            ).first()
        resumed = last.detail if last is not None else {"trackers": {}}
        self.cursor = {**self.cursor, **resumed.get("cursor", {})}
        params = flatten((run.config or {}).get("experiment", {}))
        run_name = f"{run.name} (run {run.id})"
        for name in self.names:
            if name not in TRACKERS:
                self._note("tracker_skipped", name, f"unknown tracker (known: {', '.join(KNOWN)})")
                continue
            try:
                __import__(name)
            except ImportError:
                self._note("tracker_skipped", name, f"not installed: pip install {PACKAGES[name]}")
                continue
            self._call(name, self._start, name, run_name, params, resumed["trackers"].get(name))

    def _start(self, name: str, run_name: str, params: dict, resume_id: str | None) -> None:
        self.trackers.append(TRACKERS[name](run_name, params, resume_id))

    def _sync(self) -> None:
        """Log what the store holds beyond the cursor."""
        with self.wb.session() as s:
            points = s.exec(
                select(Metric, Evaluation)
                .join(Evaluation, col(Metric.evaluation_id) == Evaluation.id)
                .where(
                    Metric.run_id == self.run_id,
                    Metric.series == TEST_SERIES,
                    Metric.id > self.cursor["metric"],
                )
                .order_by(Metric.id)
            ).all()
            jobs = s.exec(
                select(TrainingJob, Metric.rollouts)
                .join(Metric, col(Metric.training_job_id) == TrainingJob.id)
                .where(
                    TrainingJob.run_id == self.run_id,
                    TrainingJob.id > self.cursor["job"],
                    col(TrainingJob.status).in_(("done", "skipped")),
                    Metric.series == "train/accept_rate",
                )
                .order_by(TrainingJob.id)
            ).all()
            phases = s.exec(
                select(Phase, Harness)
                .join(Harness, col(Phase.harness_out_id) == Harness.id)
                .where(
                    Phase.run_id == self.run_id,
                    Phase.kind == "harness",
                    Phase.status == "done",
                    Phase.id > self.cursor["phase"],
                )
                .order_by(Phase.id)
            ).all()
        for metric, evaluation in points:
            values = {"test/mean_at_k": metric.y}
            if evaluation.ci_low is not None:
                values |= {"test/ci_low": evaluation.ci_low, "test/ci_high": evaluation.ci_high}
            self._log(values, metric.rollouts, metric.created_at)
            self.cursor["metric"] = metric.id
        for job, rollouts in jobs:
            self._log(job_values(job), rollouts, job.finished_at or job.created_at)
            self.cursor["job"] = job.id
        for phase, harness in phases:
            path = f"harnesses/phase-{phase.round}-harness-{harness.id}.py"
            self._each("file", path, harness.code)
            self.cursor["phase"] = phase.id

    def _log(self, values: dict, rollouts: int, at) -> None:
        self._each("metrics", values, rollouts, int(utc(at).timestamp() * 1000))

    def _each(self, method: str, *args) -> None:
        """Call `method` of every tracker still logging; one that fails is dropped."""
        for tracker in list(self.trackers):
            if not self._call(tracker.name, getattr(tracker, method), *args):
                self.trackers.remove(tracker)

    def _call(self, name: str, call: Callable, *args) -> bool:
        """Run one tracker call; a failure drops the tracker and is noted in the run's log."""
        self._busy = name
        try:
            call(*args)
            return True
        except Exception as exc:  # noqa: BLE001 - any failure of a tracker is its own
            log.warning("tracker %s failed for run %s: %s", name, self.run_id, exc)
            self._note("tracker_failed", name, f"{type(exc).__name__}: {exc}"[:1000])
            return False
        finally:
            self._busy = None

    def _note(self, kind: str, tracker: str | None, why: str | None, **detail) -> None:
        if tracker is not None:
            detail = {"tracker": tracker, "why": why, **detail}
        self.wb.writer.add(Event(run_id=self.run_id, kind=kind, detail=detail))


def job_values(job: TrainingJob) -> dict[str, float]:
    """An RFT step's metrics: its accepted counts, reward, loss and the seconds of each part."""
    values = {
        "train/accepted": job.n_accepted,
        "train/sampled": job.n_rollouts,
        "train/examples": job.n_examples,
        "train/mean_reward": job.mean_reward or 0.0,
    }
    if job.loss is not None:
        values["train/loss"] = job.loss
    for part, seconds in (job.timings or {}).items():
        values[f"train/step_s/{part.removesuffix('_s')}"] = seconds
    return values


def open_sink(workbench: "Workbench", run_id: int) -> Sink | None:
    """The run's sink, or None when no tracker is asked for (WHALE_TRACKERS unset)."""
    names = wanted(workbench.settings.trackers)
    if not names:
        return None
    return Sink(workbench, run_id, names, workbench.settings.tracker_timeout)
