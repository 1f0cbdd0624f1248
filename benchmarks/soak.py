"""A soak: a WHALE loop on arith with the demo model and real sandboxes, for an hour
(`--minutes`), with faults injected at random moments, ending with `whale stop` and
`whale check`. The summary goes to docs/benchmarks.md.

The moments are seeded (`--seed`): gaps drawn from an exponential distribution of mean
`--mean-gap-s`, the fault chosen uniformly among those that have a target at that moment. Each
fault is logged with its time, what it hit and how long the loop took to move on after it:

  model_server  SIGKILL of the local model server `whale run` started (the workbench restarts it)
  sandboxes     SIGKILL of the store's sandbox containers (docker) or runner processes (process)
  training      SIGKILL of a running training process: tried once more; a second kill of the
                same job pauses the run naming it (docs/faults.md), and the soak resumes it
                (`whale resume`), as a researcher would
  kill_9        kill -9 of `whale run`, then the same command again (it resumes the run)
  sigterm       SIGTERM to `whale run`, then the same command again

A fault is recovered when what it broke works again, checked per kind (`Store.recovered`):

  model_server  the workbench logged `model_server_restarted` after the kill, and a model call
                was answered after that restart (a model step recorded without error)
  sandboxes     a rollout admitted after the kill ran in a sandbox to an answer (pass or fail)
  training      the training job that was killed ended `done` (retried, or trained again after
                the pause and the soak's resume)
  kill_9        the new `whale run` logged `run_resumed` after "an end its process did not
                record", and the loop moved on after that (a rollout, RFT step or search
                iteration finished)
  sigterm       `whale run` exited within its grace period (GRACE_S) with `run_interrupted`
                (SIGTERM) logged in the run's events, the new `whale run` logged `run_resumed`
                after "SIGTERM", and the loop moved on after that

Each fault should also be in the run's log as the event that names it (LOGGED_AS), between it and
the next fault: the report counts them.
Rollouts lost: a finished rollout seen before a fault and missing or changed at the end (must be
0). Rollouts that a fault failed are not lost: they are recorded with the reason (`crash`, or
`infrastructure` once their retries are spent) and counted apart, as are those retried and run.

    python -m benchmarks.soak [--minutes 60] [--seed 0] [--mean-gap-s 90] [--sandbox docker]
    python -m benchmarks.soak --minutes 30 --full --keep-last 3   # disk under retention

`--full` fine-tunes the whole model (each checkpoint is the whole model) and `--keep-last N` sets
the retention policy ([rft] keep_last, app/training/retention.py); the report then says how large
checkpoints/ grew and how many trained checkpoints kept their weights.
"""

import argparse
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from app.interrupts import GRACE_S
from app.search.knobs import with_knob
from app.training.retention import disk_bytes
from benchmarks.common import REPO, parse, report, table
from sandbox import docker as docker_backend

WHALE = str(Path(sys.executable).with_name("whale"))
# The quick loop (two RFT steps, then one search iteration, test points after each phase) from a
# harness whose rollouts mostly pass, so every RFT step trains (there is training to kill); a
# budget the soak never reaches.
EXPERIMENT = """
name = "soak"
domain = "arith"
strategy = "whale"
seed = 0
harness_code = {harness}

[switching]
rule = "fixed"
weight_steps_per_phase = 2
proposing_iterations_per_phase = 1

[rft]
prompts_per_step = 4
samples_per_prompt = 4
lora_rank = 4
batch_size = 4
{weights}

[search]
proposer = "knobs"
candidates = 2
tasks = 4

[test]
k = 1
tasks = 4

[budget]
rollouts = 10000000
max_phases = 10000
"""
FAULTS = ("model_server", "sandboxes", "training", "kill_9", "sigterm")
# The event of the run's log that tells each fault (app/faults.py, docs/faults.md), and a test of
# its detail: kill -9 leaves no word, the next process says so when it resumes the run.
LOGGED_AS = {
    "model_server": ("model_server_exited", lambda d: "SIGKILL" in d.get("why", "")),
    "sandboxes": ("sandbox_lost", lambda d: True),
    "training": ("training_retry", lambda d: "code -9" in d.get("error", "")),
    "kill_9": ("run_resumed", lambda d: "did not record" in d.get("after", "")),
    "sigterm": ("run_interrupted", lambda d: d.get("why") == "SIGTERM"),
}
FAILED_BY_A_FAULT = ("crash", "sandbox_start", "infrastructure")
# What each fault's recovery checks, in words (the report's notes; Store.recovered).
RECOVERY = {
    "model_server": "`model_server_restarted` logged, then a model call answered",
    "sandboxes": "a rollout admitted after the kill ran to an answer in a sandbox",
    "training": "the killed training job ended `done`",
    "kill_9": "`run_resumed` after an unrecorded end, then the loop moved on",
    "sigterm": f"exit within {GRACE_S:g} s with `run_interrupted` (SIGTERM) logged, then "
    "`run_resumed` after SIGTERM and the loop moved on",
}


def stamp(when: datetime | None = None) -> str:
    """A time (now by default) as the store writes its timestamps (UTC, no zone, microseconds):
    comparable with them as text."""
    return (when or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S.%f")


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below `pid`."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except FileNotFoundError:
            continue
        for task in tasks:
            try:
                kids = [int(c) for c in (task / "children").read_text().split()]
            except FileNotFoundError:
                continue
            for kid in kids:
                try:
                    cmd = Path(f"/proc/{kid}/cmdline").read_bytes().replace(b"\0", b" ")
                except FileNotFoundError:
                    continue
                found.append((kid, cmd.decode(errors="replace")))
                todo.append(kid)
    return found


class RunEnded(Exception):
    """The soak's run ended by itself (failed, or done) before the soak's time was up."""


class Store:
    """Read-only looks at the soak's store."""

    def __init__(self, db: Path):
        self.db = db

    def query(self, sql: str, *args) -> list[tuple]:
        if not self.db.exists():
            return []
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.OperationalError:
            return []  # the store is being created
        finally:
            con.close()

    def progress(self) -> int:
        """Finished rollouts, RFT steps and search iterations: what moves while the loop works."""
        rows = self.query(
            """SELECT (SELECT count(*) FROM rollout WHERE status != 'pending')
                    + (SELECT count(*) FROM training_job WHERE status IN ('done', 'skipped'))
                    + (SELECT count(*) FROM search_iteration WHERE status = 'done')"""
        )
        return rows[0][0] if rows else 0

    def moved_on_after(self, since: str) -> bool:
        """A rollout, an RFT step or a search iteration finished after `since`."""
        rows = self.query(
            """SELECT EXISTS(SELECT 1 FROM rollout WHERE finished_at > ?)
                   OR EXISTS(SELECT 1 FROM training_job WHERE status IN ('done', 'skipped')
                             AND finished_at > ?)
                   OR EXISTS(SELECT 1 FROM search_iteration WHERE status = 'done'
                             AND finished_at > ?)""",
            since,
            since,
            since,
        )
        return bool(rows and rows[0][0])

    def training_now(self) -> int | None:
        """The training job in its training part, if one is."""
        rows = self.query("SELECT id FROM training_job WHERE status = 'training' ORDER BY id")
        return rows[-1][0] if rows else None

    def first_event(self, kind: str, since: str, telling=lambda d: True) -> str | None:
        """When the first event of `kind` after `since` whose detail `telling` accepts was
        written, or None."""
        events = [e for e in self.events(kind) if stamp(e.created_at) > since]
        return next((stamp(e.created_at) for e in events if telling(e.detail or {})), None)

    def recovered(self, fault: dict) -> bool:
        """Whether what the fault broke works again (see the module's docstring)."""
        kind, since = fault["fault"], fault["since"]
        if kind == "model_server":
            back = self.first_event("model_server_restarted", since)
            answered = back and self.query(
                """SELECT 1 FROM step WHERE kind = 'model' AND error IS NULL
                   AND response IS NOT NULL AND created_at > ? LIMIT 1""",
                back,
            )
            return bool(answered)
        if kind == "sandboxes":
            ran = self.query(
                """SELECT 1 FROM rollout WHERE started_at > ? AND status IN ('pass', 'fail')
                   LIMIT 1""",
                since,
            )
            return bool(ran)
        if kind == "training":
            job = fault.get("job")
            done = self.query(
                "SELECT 1 FROM training_job WHERE status = 'done' AND finished_at > ?"
                + (" AND id = ?" if job is not None else "")
                + " LIMIT 1",
                since,
                *([job] if job is not None else []),
            )
            return bool(done)
        after = "did not record" if kind == "kill_9" else "SIGTERM"
        if kind == "sigterm":
            honoured = fault["exit_s"] < GRACE_S and self.first_event(
                "run_interrupted", since, lambda d: d.get("why") == "SIGTERM"
            )
            if not honoured:
                return False
        resumed = self.first_event("run_resumed", since, lambda d: after in d.get("after", ""))
        return bool(resumed) and self.moved_on_after(resumed)

    def finished(self) -> dict[int, tuple]:
        rows = self.query("SELECT id, status, reward FROM rollout WHERE status != 'pending'")
        return {i: (status, reward) for i, status, reward in rows}

    def run_status(self) -> tuple[int, str] | None:
        rows = self.query("SELECT id, status FROM run ORDER BY id LIMIT 1")
        return rows[0] if rows else None

    def last_error(self) -> str:
        """Why the last failed training job failed (its last line), or the run's own status."""
        rows = self.query("SELECT error FROM training_job WHERE status = 'failed' ORDER BY id")
        if rows and rows[-1][0]:
            return rows[-1][0].strip().splitlines()[-1][:300]
        return "the run ended: " + str(self.run_status())

    def paused_by_loop(self) -> str | None:
        """Why the loop paused the run (a training failed twice, a full disk), if it is paused
        and the last pause asked was the loop's."""
        status = self.run_status()
        if not status or status[1] != "paused":
            return None
        pauses = [e for e in self.events("control") if e.detail.get("action") == "pause"]
        if pauses and pauses[-1].detail.get("source") == "loop":
            return pauses[-1].detail.get("reason")
        return None

    def events(self, *kinds: str) -> list:
        """The run log's events of these kinds (their details decoded, as the workbench reads
        them), oldest first."""
        from sqlmodel import col, select

        from app.db import open_engine, read_session
        from app.db.schema import Event

        engine = open_engine(self.db)
        try:
            with read_session(engine) as s:
                query = select(Event).where(col(Event.kind).in_(kinds)).order_by(Event.id)
                return list(s.exec(query))
        finally:
            engine.dispose()


class Soak:
    def __init__(self, args, home: Path):
        self.args = args
        self.home = home
        self.store = Store(home / "whale.db")
        self.rng = random.Random(args.seed)
        self.experiment = home.parent / "soak.toml"
        harness = with_knob(
            (REPO / "harness_archive/seeds/arith/seed.py").read_text(), "SOLVER", "program"
        )
        # a full fine-tune at LoRA's rate (1e-3) wrecks the model within three steps, after
        # which nothing is accepted and no step trains: no checkpoints for retention to drop
        weights = ("lora = false\nlr = 1e-5\n" if args.full else "lr = 1e-3\n") + (
            f"keep_last = {args.keep_last}\n" if args.keep_last else ""
        )
        self.experiment.write_text(EXPERIMENT.format(harness=json.dumps(harness), weights=weights))
        self.env = {**os.environ, "WHALE_HOME": str(home), "WHALE_SANDBOX": args.sandbox}
        for key in ("WHALE_LLM_URL", "WHALE_LLM_MODEL"):  # the run starts its own model server
            self.env.pop(key, None)
        self.proc: subprocess.Popen | None = None
        self.log = open(home.parent / "whale-run.log", "ab")
        self.resumed: list[str] = []  # why each pause the loop asked was for
        self.records: list[dict] = []
        self.seen: dict[int, tuple] = {}  # every finished rollout seen, as first seen
        self.unexpected: list[str] = []  # `whale run` ended without a fault asking it to
        self.t0 = time.monotonic()  # the soak's start, once the loop runs
        self.peak_bytes, self._measured = 0, 0.0  # the checkpoints folder's largest size seen

    def say(self, what: str) -> None:
        print(f"[soak {time.strftime('%H:%M:%S')}] {what}", flush=True)

    def start_run(self) -> None:
        self.proc = subprocess.Popen(
            [WHALE, "run", str(self.experiment)],
            env=self.env,
            stdout=self.log,
            stderr=self.log,
            start_new_session=True,  # a kill -9 of it leaves the soak alone
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def targets(self) -> dict[str, list[int]]:
        """What each fault would hit now (pids, or container ids for docker sandboxes)."""
        if not self.alive():
            return {}
        below = descendants(self.proc.pid)
        found = {
            "model_server": [p for p, cmd in below if "app.llm.local_server" in cmd],
            "training": [p for p, cmd in below if "-m app.training" in cmd],
            "kill_9": [self.proc.pid],
            "sigterm": [self.proc.pid],
        }
        if self.args.sandbox == "docker":
            found["sandboxes"] = self._containers()
        else:
            found["sandboxes"] = [p for p, cmd in below if "runner.py serve" in cmd]
        return {k: v for k, v in found.items() if v}

    def _containers(self) -> list:
        import docker

        label = f"{docker_backend.LABEL}={docker_backend.owner_label(self.home)}"
        return docker.from_env().containers.list(filters={"label": label})

    def inject(self, kind: str, targets: list, fault: dict) -> str:
        """Inject one fault; what it hit, in words. How `whale run` ended goes into `fault`
        (exit_code, exit_s: seconds from the signal to its exit)."""
        if kind == "sandboxes" and self.args.sandbox == "docker":
            import docker

            for container in targets:
                try:
                    container.kill()
                except docker.errors.APIError:
                    pass  # gone meanwhile (its evaluation ended)
            return f"{len(targets)} container(s)"
        if kind in ("kill_9", "sigterm"):
            sig = signal.SIGKILL if kind == "kill_9" else signal.SIGTERM
            sent = time.monotonic()
            self.proc.send_signal(sig)
            code = self.proc.wait(120)
            fault["exit_code"], fault["exit_s"] = code, round(time.monotonic() - sent, 1)
            self.start_run()  # the same command: it resumes the run
            return f"whale run (exit {code} after {fault['exit_s']:g} s), started again"
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return f"pid {', '.join(map(str, targets))}"

    def started_within(self, timeout: float) -> bool:
        """Whether the loop finished something (a rollout, RFT step or search iteration) within
        `timeout`."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.store.progress() > 0:
                return True
            self.keep_running()
            time.sleep(0.5)
        return False

    def recovered_within(self, fault: dict, at: float, timeout: float) -> float | None:
        """Seconds from the fault (at `at`) until its recovery check holds, or None if it did
        not within `timeout`."""
        while time.monotonic() - at < timeout:
            if self.store.recovered(fault):
                return time.monotonic() - at
            self.keep_running()
            time.sleep(0.5)
        return None

    def keep_running(self) -> None:
        """`whale run` ended without a fault asking: recorded, and started again, unless its
        run has ended (RunEnded: the soak stops there and reports why). A run the loop paused
        (a training failed twice) is resumed, and that is recorded too."""
        why = self.store.paused_by_loop()
        if why is not None:
            run_id = self.store.run_status()[0]
            self.say(f"the loop paused run {run_id} ({why}); resuming it")
            self.resumed.append(why)
            subprocess.run(
                [WHALE, "resume", str(run_id), "--reason", "soak: resumed after the loop's pause"],
                env=self.env,
                capture_output=True,
            )
        if self.proc is not None and self.proc.poll() is not None:
            status = self.store.run_status()
            self.unexpected.append(f"whale run exited {self.proc.returncode}, run {status}")
            self.say(f"whale run exited on its own (code {self.proc.returncode}, run {status})")
            if status and status[1] in ("done", "failed", "stopped"):
                raise RunEnded(self.store.last_error())
            self.start_run()

    def soak(self) -> None:
        self.start_run()
        self.say("waiting for the loop to start")
        if not self.started_within(600):
            raise RuntimeError("the loop did not start within 10 minutes")
        self.t0 = time.monotonic()
        end = self.t0 + self.args.minutes * 60
        while True:
            gap = self.rng.expovariate(1 / self.args.mean_gap_s)
            if time.monotonic() + gap > end:
                break
            self._sleep(gap)
            targets = self.targets()
            kinds = [k for k in FAULTS if k in targets]
            if not kinds:  # `whale run` ended a moment ago: keep_running starts it again
                continue
            kind = self.rng.choice(kinds)
            self.seen = {**self.store.finished(), **self.seen}
            record = {
                "fault": kind,
                "job": self.store.training_now() if kind == "training" else None,
            }
            at = time.monotonic()
            record.update(at_s=round(at - self.t0, 1), since=stamp())
            record["hit"] = self.inject(kind, targets[kind], record)
            took = self.recovered_within(record, at, self.args.recover_timeout_s)
            record["recovered_s"] = None if took is None else round(took, 1)
            self.records.append(record)
            with open(self.home.parent / "faults.jsonl", "a") as f:  # kept should the soak die
                f.write(json.dumps(record) + "\n")
            self.say(
                f"{kind}: {record['hit']}; "
                + (f"recovered after {took:.0f} s" if took is not None else "NOT RECOVERED")
            )
        self._sleep(max(0.0, end - time.monotonic()))

    def _sleep(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.keep_running()
            if time.monotonic() - self._measured > 10:
                self.peak_bytes = max(self.peak_bytes, disk_bytes(self.home / "checkpoints"))
                self._measured = time.monotonic()
            time.sleep(min(1.0, max(0.0, until - time.monotonic())))

    def finish(self) -> tuple[int, list[dict]]:
        """`whale stop` and `whale check`: (the run id, the checks)."""
        run_id = self.store.run_status()[0]
        self.say(f"stopping run {run_id}")
        subprocess.run([WHALE, "stop", str(run_id), "--reason", "soak over"], env=self.env)
        if self.alive():
            self.proc.wait(900)
        checked = subprocess.run(
            [WHALE, "check", str(run_id), "--json"], env=self.env, capture_output=True, text=True
        )
        return run_id, json.loads(checked.stdout)


def disk_summary(soak: "Soak", run_id: int) -> str:
    """The checkpoints folder at the end and at its largest, and the run's trained checkpoints
    with and without their weights."""
    ((kept, dropped),) = soak.store.query(
        """SELECT sum(weights_dropped_at IS NULL), sum(weights_dropped_at IS NOT NULL)
           FROM checkpoint WHERE run_id = ? AND kind != 'base'""",
        run_id,
    )
    end = disk_bytes(soak.home / "checkpoints")
    return (
        f" Checkpoints ({'full fine-tune' if soak.args.full else 'LoRA'}, retention "
        + (f"keep_last {soak.args.keep_last}" if soak.args.keep_last else "none")
        + f"): {kept or 0} trained checkpoints with their weights, {dropped or 0} without; "
        f"{end / 1e9:.2f} GB under checkpoints/ at the end, {max(end, soak.peak_bytes) / 1e9:.2f} "
        "GB at the largest seen (sampled every 10 s)."
    )


def summarize(
    soak: Soak, run_id: int, checks: list[dict], minutes: float, ended: str | None
) -> None:
    store, records = soak.store, soak.records
    final = store.finished()
    lost = [i for i, row in soak.seen.items() if final.get(i) != row]
    rows = []
    for i, record in enumerate(records):  # each fault's event, between it and the next fault
        event, telling = LOGGED_AS[record["fault"]]
        until = records[i + 1]["since"] if i + 1 < len(records) else "9999"
        told = [e for e in store.events(event) if record["since"] < stamp(e.created_at) < until]
        record["logged"] = any(telling(e.detail or {}) for e in told)
    for kind in FAULTS:
        mine = [r for r in records if r["fault"] == kind]
        took = [r["recovered_s"] for r in mine if r["recovered_s"] is not None]
        event = LOGGED_AS[kind][0]
        told = sum(r["logged"] for r in mine)
        rows.append(
            [
                kind,
                len(mine),
                len(took),
                f"{statistics.median(took):.0f} / {max(took):.0f}" if took else "-",
                f"{told} `{event}`",
            ]
        )
    by_reason = dict(
        store.query(
            f"""SELECT reason, count(*) FROM rollout WHERE reason IN
                ({",".join("?" * len(FAILED_BY_A_FAULT))}) GROUP BY reason""",
            *FAILED_BY_A_FAULT,
        )
    )
    (counts,) = store.query(
        """SELECT (SELECT count(*) FROM rollout WHERE status != 'pending'),
                  (SELECT count(*) FROM rollout WHERE status = 'pending'),
                  (SELECT count(*) FROM training_job WHERE status = 'done'),
                  (SELECT count(*) FROM search_iteration WHERE status = 'done'),
                  (SELECT count(*) FROM phase),
                  (SELECT count(*) FROM rollout WHERE attempts > 1 AND status IN ('pass', 'fail'))"""
    )
    (status,) = store.query("SELECT status FROM run WHERE id = ?", run_id)[0]
    broken = [f"{c['name']} ({len(c['broken'])})" for c in checks if not c["ok"]]
    recovered = sum(r["recovered_s"] is not None for r in records)
    body = table(
        ["fault", "injected", "recovered", "time to recover, median / max s", "in the run's log"],
        rows,
    )
    body += (
        f"\n\n{len(records)} faults in {minutes:.0f} minutes, {recovered} recovered. "
        + (f"**The run ended by itself before the soak's time was up: {ended}.** " if ended else "")
        + f"**Rollouts lost: {len(lost)}** (of {len(soak.seen):,} seen finished before a fault). "
        f"The store at the end: {counts[0]:,} rollouts finished, {counts[1]} pending, "
        f"{counts[2]} RFT steps trained, {counts[3]} search iterations, {counts[4]} phases; "
        f"run {run_id} {status}. Rollouts failed by a fault, recorded with the reason: "
        + (", ".join(f"{r} {n}" for r, n in sorted(by_reason.items())) or "none")
        + f"; tried again after an infrastructure failure and then run: {counts[5]}"
        + ". Pauses the loop asked, resumed by the soak: "
        + (", ".join(soak.resumed) or "none")
        + ". `whale run` ended without a fault asking: "
        + (", ".join(soak.unexpected) or "never")
        + ". `whale check`: "
        + ("every invariant holds" if not broken else "broken: " + ", ".join(broken))
        + "."
        + disk_summary(soak, run_id)
    )
    notes = (
        f"`python -m benchmarks.soak --minutes {soak.args.minutes:g} --seed {soak.args.seed} --mean-gap-s "
        f"{soak.args.mean_gap_s:g} --sandbox {soak.args.sandbox}"
        + (" --full" if soak.args.full else "")
        + (f" --keep-last {soak.args.keep_last}" if soak.args.keep_last else "")
        + "`: `whale run` of a WHALE loop "
        "on arith (two RFT steps of 16 rollouts, LoRA rank 4 at lr 1e-3 or with --full the "
        "whole model at lr 1e-5, then one knobs search iteration, test points "
        "after each phase) on the demo model and its local server. Faults come at seeded "
        "exponential gaps, each chosen among those with a target at that moment (a training "
        "process only while one trains; a job killed twice pauses the run, which the soak "
        "resumes). Recovered, per fault: "
        + "; ".join(f"{kind}: {how}" for kind, how in RECOVERY.items())
        + " (the time is from the fault to then, and includes the restart of `whale run` and "
        "its model for kill_9 and sigterm). In the run's log: the fault's event, written "
        "between it and the next fault. The run ends with `whale stop` and `whale check`. The "
        f"fault log: {soak.home.parent}/faults.jsonl."
    )
    title = "Soak: a loop under injected faults" + (
        ", full fine-tuning under retention" if soak.args.full else ""
    )
    report(title, body, notes, replace=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mean-gap-s", type=float, default=90)
    parser.add_argument("--recover-timeout-s", type=float, default=600)
    parser.add_argument("--sandbox", default="docker", choices=("docker", "process"))
    parser.add_argument("--home", type=Path, help="the store (default: a new temporary one)")
    parser.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    parser.add_argument("--keep-last", type=int, help="[rft] keep_last: the retention policy")
    args = parse(parser)
    if args.sandbox == "docker" and (why := docker_backend.engine_available()):
        sys.exit(f"soak: {why}")
    home = args.home or Path(tempfile.mkdtemp(prefix="whale-soak-")) / "home"
    home.mkdir(parents=True, exist_ok=True)
    soak = Soak(args, home)
    soak.say(f"store {home}; {args.minutes:g} minutes, mean gap {args.mean_gap_s:g} s")
    ended = None
    try:
        try:
            soak.soak()
        except RunEnded as exc:
            ended = str(exc)
            soak.say(f"the run ended by itself: {ended}")
        minutes = (time.monotonic() - soak.t0) / 60 if ended else args.minutes
        run_id, checks = soak.finish()
    finally:
        if soak.alive():
            soak.proc.terminate()
    summarize(soak, run_id, checks, minutes, ended)


if __name__ == "__main__":
    main()
