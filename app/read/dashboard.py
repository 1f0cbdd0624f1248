"""A loop run's dashboard: its phases on a timeline, its budgets, what it is doing now, the
controls it accepts, its event log, and its curves on the x axis the reader picks, with a
baseline run overlaid. The run page shows it, and /api/runs/{id} gives it as `dashboard`."""

from typing import Annotated, Any, Literal

from fastapi import Query
from sqlalchemy import func
from sqlmodel import Session, col, select

from app import control
from app.db.schema import (
    Evaluation,
    Event,
    Phase,
    Rollout,
    Run,
    SearchIteration,
    TrainingJob,
    now,
    utc,
)
from app.phases import phase_rollouts
from app.read.common import NotFound, as_dict, step_numbers
from app.read.curves import X_LABELS, label, measured, mixed_scales, phase_spans, test_scale
from app.read.metrics import series
from app.rollout.usage import budget_lines, spending

XAxis = Literal["rollouts", "weight_steps", "wall_s"]
XQuery = Annotated[XAxis, Query(description="x axis of the test curve")]
BaselineQuery = Annotated[int | None, Query(le=2**63 - 1, description="run overlaid as baseline")]
# A run in one of these states can still change: its page keeps polling.
LIVE_STATUSES = ("created", "resuming", "running", "paused", "stopping")
# The buttons: (action, its arguments, label). Force comes once per phase kind.
BUTTONS = [
    ("pause", {}, "Pause"),
    ("resume", {}, "Resume"),
    ("skip", {}, "Skip phase"),
    ("force", {"kind": "weight"}, "Force weight phase"),
    ("force", {"kind": "harness"}, "Force harness phase"),
    ("stop", {}, "Stop"),
]
N_EVENTS = 30


def timeline(s: Session, run_id: int) -> list[dict[str, Any]]:
    """The run's phases in order, each with the rollouts it used (counted live while it runs)
    and its share of the run's rollouts, which sets its width on the timeline."""
    phases = s.exec(select(Phase).where(Phase.run_id == run_id).order_by(Phase.id)).all()
    rows = [
        {**as_dict(p), "rollouts": p.rollouts if p.status == "done" else phase_rollouts(s, p.id)}
        for p in phases
    ]
    total = sum(r["rollouts"] for r in rows) or 1
    for r in rows:
        r["share"] = r["rollouts"] / total
    return rows


def forkable(run: Run, phase_status: str) -> bool:
    """Whether a new run may start from the run's state after a phase in this status: a
    finished phase of a finished or paused experiment run (an imported fork's is refused)."""
    from app.read.forks import FORKABLE, imported_fork

    return (
        run.kind == "experiment"
        and run.status in FORKABLE
        and phase_status == "done"
        and not imported_fork(run)
    )


def budgets(s: Session, run: Run) -> list[dict[str, Any]]:
    """Each budget the experiment set: what it allows, what the run used, what is left."""
    limits = ((run.config or {}).get("experiment") or {}).get("budget") or {}
    wall_s = ((utc(run.finished_at) or now()) - utc(run.created_at)).total_seconds()
    return budget_lines(limits, spending(s, run.id, wall_s))


def in_flight(s: Session, run_id: int) -> int:
    """The run's rollouts running in a sandbox now (pending, with their start recorded)."""
    return s.exec(
        select(func.count()).where(
            Rollout.run_id == run_id,
            Rollout.status == "pending",
            col(Rollout.started_at).is_not(None),
        )
    ).one()


def _training(s: Session, run_id: int) -> TrainingJob | None:
    return s.exec(
        select(TrainingJob).where(TrainingJob.run_id == run_id, TrainingJob.status == "training")
    ).first()


def _rollouts(n: int, what: str = "") -> str:
    return f"{n} {what + ' ' if what else ''}rollout{'s' if n != 1 else ''}"


def _training_of(s: Session, job: TrainingJob) -> str:
    """ "training (RFT step 1 of weight phase 3, step 3 of the run)": the step named as
    everywhere (app/read/common.py, step_numbers)."""
    return f"training (RFT {step_numbers(s, job)['step_name']})"


def holding(s: Session, run: Run) -> tuple[str, str] | None:
    """(status to show, what it waits for) of a live run asked to pause or stop: "pausing" or
    "stopping" while rollouts it started (or a training) are still running - none new starts -
    then "paused"; None for a run not asked to hold. The stored status changes only when the
    loop acts, so the page says at once what the request is waiting for."""
    if run.status not in LIVE_STATUSES or run.desired not in ("paused", "stopped"):
        return None
    running = in_flight(s, run.id)
    job = _training(s, run.id) if not running else None
    if run.desired == "stopped":
        if running:
            return "stopping", f"stopping: waiting for {_rollouts(running)} in flight"
        if job:
            return "stopping", f"stopping: {_training_of(s, job)} ends first"
        return "stopping", "stopping"
    if running:
        return "pausing", f"pausing: {_rollouts(running)} in flight"
    if job:
        return "pausing", f"pausing: {_training_of(s, job)} ends first"
    return "paused", "paused: no rollout is running, none starts until it is resumed"


def shown_status(s: Session, run: Run) -> str:
    """The run's status as its badge shows it (pausing and stopping included)."""
    held = holding(s, run)
    return held[0] if held else run.status


def activity(s: Session, run: Run) -> str | None:
    """One line on what the run is doing now; None once it is finished."""
    if run.status not in LIVE_STATUSES:
        return None
    held = holding(s, run)
    if held:
        return held[1]
    if run.status in ("paused", "created", "resuming"):
        return {
            "paused": "paused",
            "created": "waiting to start",
            "resuming": "resuming after a restart",
        }[run.status]
    phase = s.exec(
        select(Phase)
        .where(Phase.run_id == run.id, Phase.status == "running")
        .order_by(col(Phase.id).desc())
    ).first()
    where = f"{phase.kind} phase {phase.round}: " if phase else ""
    job = s.exec(
        select(TrainingJob).where(
            TrainingJob.run_id == run.id, col(TrainingJob.status).in_(("sampling", "training"))
        )
    ).first()
    if job and job.status == "training":
        return f"{where}{_training_of(s, job)} on {_rollouts(job.n_accepted, 'accepted')}"
    evaluation = s.exec(
        select(Evaluation)
        .where(Evaluation.run_id == run.id, Evaluation.status != "done")
        .order_by(col(Evaluation.id).desc())
    ).first()
    if evaluation:
        total = evaluation.n_tasks * evaluation.k
        what = f"{evaluation.split} evaluation of harness {evaluation.harness_id}"
        if evaluation.split == "train" and job is not None:  # no test: the step's sampling
            what = f"sampling for RFT {step_numbers(s, job)['step_name']}"
        return f"{where}{what}: {evaluation.n_done} / {total} rollouts"
    return f"{where}between steps" if phase else "between phases"


# What the workbench records in a run's log about the model server serving it: loading it for
# a resumed run (app/loop/manager.py), and its crashes, restarts and being given up on
# (app/workbench.py, from the supervisor's watcher).
MODEL_SERVER_EVENTS = (
    "model_loading",
    "model_ready",
    "model_failed",
    "model_server_exited",
    "model_server_restarted",
    "model_server_gave_up",
)


def waiting(s: Session, run: Run) -> dict[str, Any] | None:
    """What a live run is held up by, and since when, where its activity line cannot say: the
    model server down (it exited and is not back yet, or was given up on: the newest such event
    of its log says which), or a run just started, none of whose rollouts has finished yet.
    None when it is not waiting (or is finished). `since` is a time: the page says how long."""
    if run.status not in LIVE_STATUSES:
        return None
    last = s.exec(
        select(Event)
        .where(Event.run_id == run.id, col(Event.kind).in_(MODEL_SERVER_EVENTS))
        .order_by(col(Event.id).desc())
        .limit(1)
    ).first()
    if last is not None and last.kind == "model_loading":  # the loop worker loads it for them
        return {
            "on": "model_server",
            "text": f"waiting for the model server to load ({(last.detail or {}).get('backend')} "
            "backend): the run goes on once it answers",
            "why": None,
            "since": utc(last.created_at),
        }
    if last is not None and last.kind not in ("model_server_restarted", "model_ready"):
        return {
            "on": "model_server",
            "text": {
                "model_server_gave_up": "the model server is down and is not restarted again: "
                "rollouts fail as infrastructure failures",
                "model_failed": "the model server did not start: the loop process tries "
                "again when the server starts it again",
            }.get(
                last.kind,
                "waiting for the model server to come back: rollouts wait, then try again",
            ),
            "why": (last.detail or {}).get("why"),
            "since": utc(last.created_at),
        }
    if run.status != "running":
        return None
    finished = s.exec(
        select(Rollout.id).where(Rollout.run_id == run.id, Rollout.status != "pending").limit(1)
    ).first()
    if finished is not None:
        return None
    return {
        "on": "start",
        # the first evaluation starts its sandboxes and its first model calls: on a fresh
        # server or a CPU that is seconds, with a large model or many sandboxes much more
        "text": "starting: no rollout has finished yet",
        "why": None,
        "since": utc(run.created_at),
    }


def controls(s: Session, run: Run) -> list[dict[str, Any]]:
    """The buttons, each with whether the run would take it now and, if not, why not."""
    out = []
    for action, args, text in BUTTONS:
        try:
            control.check(s, run, action, args)
            refused = None
        except control.Refused as exc:
            refused = str(exc)
        out.append({"action": action, "kind": args.get("kind"), "label": text, "refused": refused})
    return out


def describe(event: Event) -> str:
    """An event of the run's log as one line for people."""
    d = event.detail or {}
    what = " ".join(str(v) for v in (d.get("action"), d.get("kind")) if v)
    why = f": {d['reason']}" if d.get("reason") else ""
    return {
        "run_start": lambda: f"run started ({d.get('strategy')})",
        "run_end": lambda: (
            f"run ended {d.get('status')}" + (f": {d['reason']}" if d.get("reason") else "")
        ),
        "control": lambda: f"{what} asked from {d.get('source')}{why}",
        "control_refused": lambda: f"{what} refused: {d.get('why')}",
        "control_applied": lambda: f"{what} taken",
        "phase_start": lambda: (
            f"{d.get('kind')} phase {d.get('round')} started from harness "
            f"{d.get('harness_id')}, checkpoint {d.get('checkpoint_id')}"
        ),
        "phase_end": lambda: f"{d.get('kind')} phase {d.get('round')} ended: {d.get('reason')}",
        "paused": lambda: "paused: nothing was running any more, nothing new starts",
        "resumed": lambda: "resumed: running again",
        "model_loading": lambda: f"waiting for the model server to load ({d.get('backend')})",
        "model_ready": lambda: f"the model server is up (loaded in {d.get('load_s')} s)",
        "model_failed": lambda: f"the model server did not start: {d.get('why')}",
        "model_server_exited": lambda: d.get("why") or "the model server exited",
        "model_server_restarted": lambda: f"the model server is back (down {d.get('down_s')} s)",
        "model_server_gave_up": lambda: d.get("why") or "the model server is not restarted again",
        "model_calls_failing": lambda: f"model calls failing: {d.get('why')}",
        "model_calls_back": lambda: f"model calls answered again (failing for {d.get('down_s')} s)",
        "sandbox_start_failing": lambda: f"sandboxes do not start: {d.get('why')}",
        "sandbox_start_back": lambda: f"sandboxes start again (failing for {d.get('down_s')} s)",
        "sandbox_lost": lambda: (
            f"a {d.get('backend')} sandbox stopped answering ({d.get('why')}): "
            "the rollouts in it end as crash"
        ),
        "run_interrupted": lambda: f"interrupted ({d.get('why')}): resumes when started again",
        "run_resumed": lambda: (
            f"resumed after {d.get('after')}; {d.get('pending_rollouts')} pending rollouts run"
        ),
        "training_retry": lambda: (
            f"training job {d.get('job_id')} failed, tried again: "
            + ((d.get("error") or "").strip().splitlines() or ["no output"])[0]
        ),
    }.get(event.kind, lambda: f"{event.kind} {d}")()


def events(s: Session, run_id: int, limit: int = N_EVENTS) -> list[dict[str, Any]]:
    """The newest entries of the run's log, newest first, each with a line for people."""
    rows = s.exec(
        select(Event).where(Event.run_id == run_id).order_by(col(Event.id).desc()).limit(limit)
    )
    return [{**as_dict(e), "text": describe(e)} for e in rows]


def run_log(s: Session, run_id: int) -> list[dict[str, Any]]:
    """The run's whole log, oldest first: starts, control actions (taken and refused), the
    moments a pause and a resume took effect, phase starts and ends, the end."""
    if s.get(Run, run_id) is None:
        raise NotFound("run", run_id)
    rows = s.exec(select(Event).where(Event.run_id == run_id).order_by(Event.id))
    return [{**as_dict(e), "text": describe(e)} for e in rows]


def harness_success(s: Session, run_id: int) -> list[dict[str, Any]]:
    """Best success on the harness split after each search iteration, iterations of all the
    run's harness phases numbered in one sequence."""
    rows = s.exec(
        select(SearchIteration)
        .where(SearchIteration.run_id == run_id, col(SearchIteration.best_success).is_not(None))
        .order_by(SearchIteration.phase_id, SearchIteration.iteration)
    ).all()
    return [{"x": i, "y": row.best_success, "phase_id": row.phase_id} for i, row in enumerate(rows)]


def step_series(s: Session, run_id: int) -> dict[str, list[dict[str, Any]]]:
    """Accept rate and mean reward per RFT step, RFT step N at x = N (the store keeps the
    step's 0-based number): where the test curve's RFT-steps axis puts the point after it."""
    found = series(s, run_id, ["train/accept_rate", "train/mean_reward"])
    return {name: [{**p, "x": p["x"] + 1} for p in points] for name, points in found.items()}


def curves(
    s: Session, run: Run, x: XAxis, baseline: Run | None, phases: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "x": x,
        "x_label": X_LABELS[x],
        "test": {label(r): measured(s, r, x) for r in ([run, baseline] if baseline else [run])},
        # the run's own phases only: a baseline's would shade the same chart twice
        "phases": phase_spans(s, run, phases, x),
        "harness_success": harness_success(s, run.id),
        "training": step_series(s, run.id),
    }


def warnings(run: Run) -> list[str]:
    """Settings of the run that make its numbers mean less than they seem."""
    rft = ((run.config or {}).get("experiment") or {}).get("rft") or {}
    if rft.get("temperature") == 0 and (rft.get("samples_per_prompt") or 0) > 1:
        return [
            f"RFT samples at temperature 0: the {rft['samples_per_prompt']} samples of a prompt "
            "are one greedy sample repeated, so accepting among them selects nothing"
        ]
    return []


def get_dashboard(
    s: Session, run_id: int, x: XAxis = "rollouts", baseline_id: int | None = None
) -> dict[str, Any]:
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound("run", run_id)
    baseline = s.get(Run, baseline_id) if baseline_id is not None else None
    if baseline_id is not None and baseline is None:
        raise NotFound("run", baseline_id)
    phases = timeline(s, run_id)
    for n, phase in enumerate(phases, 1):  # "Fork from here" (app/loop/fork.py)
        phase["fork_from"] = f"{run.id}:{n}" if forkable(run, phase["status"]) else None
    return {
        "run": {
            "id": run.id,
            "status": run.status,
            # what the badge shows: "pausing" or "stopping" while what it started still runs
            "shown_status": shown_status(s, run),
            "desired": run.desired,
            "command": run.command,
            "live": run.status in LIVE_STATUSES,
        },
        "timeline": phases,
        "budgets": budgets(s, run),
        "activity": activity(s, run),
        "waiting": waiting(s, run),
        # a finished run takes no action: no buttons, only its log
        "controls": (
            controls(s, run)
            if run.kind == "experiment" and run.status not in control.FINISHED
            else []
        ),
        "events": events(s, run_id),
        "curves": curves(s, run, x, baseline, phases),
        "baseline": {"id": baseline.id, "name": baseline.name} if baseline else None,
        # a baseline overlaid on another scale (domain, k, scoring) is named, not drawn silently
        "warnings": warnings(run)
        + (
            mixed_scales([{"id": r.id, **test_scale(s, r)} for r in (run, baseline)])
            if baseline
            else []
        ),
    }


def run_choices(s: Session) -> list[dict[str, Any]]:
    """Every run as a choice for the baseline picker, newest first."""
    rows = s.exec(select(Run.id, Run.name, Run.strategy, Run.kind).order_by(col(Run.id).desc()))
    return [{"id": i, "name": n, "strategy": st or k} for i, n, st, k in rows]
