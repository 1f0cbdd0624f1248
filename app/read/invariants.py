"""What no fault may break in a run's records: the checks behind `whale check RUN`, the run
page's warning and the fault tests (docs/faults.md).

Each check is a name, what it promises, and the rows that break it (empty: it holds). They read
one snapshot of the store (a read transaction), so a loop writing meanwhile never makes a check
see half a write: every write that must agree with another is one transaction.
"""

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import text
from sqlmodel import Session, col, or_, select

from app.db.queries import weights_needed
from app.db.schema import Checkpoint, Evaluation, Harness, Run, sha_of
from app.faults import FAULT_EVENTS
from app.phases import TEST_SERIES
from app.read.runs import get_runs
from app.rollout.usage import usage

FINISHED = ("done", "stopped", "failed")  # a run in one of these has nothing in flight
SANDBOX_STOPPED = (
    "the sandbox stopped answering"  # how a lost sandbox's rollouts end (sandbox/pool.py)
)


@dataclass
class Check:
    name: str
    promise: str
    broken: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.broken


def _rows(s: Session, sql: str, **params) -> list[tuple]:
    return [tuple(r) for r in s.execute(text(sql), params).all()]


def _rollouts_finished(s: Session, run: Run) -> list[str]:
    pending = _rows(
        s,
        """SELECT r.id, e.id, e.status FROM rollout r JOIN evaluation e ON e.id = r.evaluation_id
           WHERE r.run_id = :run AND r.status = 'pending'
             AND (e.status != 'running' OR :finished)""",
        run=run.id,
        finished=run.status in FINISHED,
    )
    return [f"rollout {r} pending in evaluation {e} ({status})" for r, e, status in pending]


def _nothing_in_flight(s: Session, run: Run) -> list[str]:
    if run.status not in FINISHED:
        return []
    rows = _rows(
        s,
        "SELECT 'evaluation', id FROM evaluation WHERE run_id = :run AND status = 'running'",
        run=run.id,
    )
    rows += _rows(
        s, "SELECT 'phase', id FROM phase WHERE run_id = :run AND status = 'running'", run=run.id
    )
    rows += _rows(
        s,
        """SELECT 'training job', id FROM training_job WHERE run_id = :run
           AND status NOT IN ('done', 'skipped', 'failed')""",
        run=run.id,
    )
    rows += _rows(
        s,
        "SELECT 'search iteration', id FROM search_iteration WHERE run_id = :run AND status = 'running'",
        run=run.id,
    )
    return [f"{kind} {i} still running in a {run.status} run" for kind, i in rows]


def _evaluation_counts(s: Session, run: Run) -> list[str]:
    rows = _rows(
        s,
        """SELECT e.id, e.status, e.n_tasks * e.k, e.n_done,
                  (SELECT count(*) FROM rollout r WHERE r.evaluation_id = e.id),
                  (SELECT count(*) FROM rollout r WHERE r.evaluation_id = e.id AND r.status != 'pending')
           FROM evaluation e WHERE e.run_id = :run""",
        run=run.id,
    )
    broken = []
    for i, status, planned, n_done, rows_, finished in rows:
        # a stopped evaluation dropped the rollouts that never started (app/phases.py)
        expected_rows = finished if status == "stopped" else planned
        if (
            n_done != finished
            or rows_ != expected_rows
            or (status == "done" and finished != planned)
        ):
            broken.append(
                f"evaluation {i} ({status}): {planned} planned, {rows_} rollout rows, "
                f"{finished} finished, n_done {n_done}"
            )
    return broken


def _phase_counts(s: Session, run: Run) -> list[str]:
    rows = _rows(
        s,
        """SELECT p.id, p.rollouts, (SELECT count(*) FROM rollout r JOIN evaluation e
                 ON e.id = r.evaluation_id WHERE e.phase_id = p.id AND e.split != 'test'
                 AND r.status != 'pending')
           FROM phase p WHERE p.run_id = :run AND p.status = 'done'""",
        run=run.id,
    )
    return [
        f"phase {i} says {said} rollouts, its evaluations hold {held}"
        for i, said, held in rows
        if said != held
    ]


def _recorded_once(s: Session, run: Run) -> list[str]:
    twice = {
        "step": """SELECT st.rollout_id, st.idx FROM step st JOIN rollout r ON r.id = st.rollout_id
                   WHERE r.run_id = :run GROUP BY 1, 2 HAVING count(*) > 1""",
        "phase": """SELECT kind, round FROM phase WHERE run_id = :run
                    GROUP BY 1, 2 HAVING count(*) > 1""",
        "search iteration": """SELECT phase_id, iteration FROM search_iteration WHERE run_id = :run
                               GROUP BY 1, 2 HAVING count(*) > 1""",
        "RFT step": """SELECT step, step FROM training_job WHERE run_id = :run
                       GROUP BY 1 HAVING count(*) > 1""",
        "curve point": """SELECT evaluation_id, rollouts FROM metric WHERE run_id = :run
                          AND series = 'test/mean@k' GROUP BY 1, 2 HAVING count(*) > 1""",
    }
    return [
        f"{what} {a}/{b} recorded twice"
        for what, sql in twice.items()
        for a, b in _rows(s, sql, run=run.id)
    ]


def _harnesses_hash(s: Session, run: Run) -> list[str]:
    harnesses = s.exec(select(Harness).where(Harness.run_id == run.id)).all()
    return [
        f"harness {h.id}: its code does not hash to {h.sha[:12]}"
        for h in harnesses
        if sha_of(h.code) != h.sha
    ]


def checkpoint_problem(checkpoint: Checkpoint) -> str | None:
    """Why a registered checkpoint could not be served, or None: its folder and weights exist
    and the weights file's header reads (the tensors themselves are not loaded)."""
    if not checkpoint.path:
        return None  # served under its name by the backend (a hosted model)
    folder = Path(checkpoint.path)
    if not folder.exists():
        return f"{folder} is missing"
    if checkpoint.kind == "lora":
        needed = [
            folder / "adapter" / "adapter_config.json",
            folder / "adapter" / "adapter_model.safetensors",
        ]
    else:
        merged = folder / "merged"
        needed = [(merged if merged.is_dir() else folder) / "config.json"]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        return "missing " + ", ".join(missing)
    weights = sorted(folder.rglob("*.safetensors"))
    if not weights:
        return f"no weights file under {folder}"
    from safetensors import safe_open

    for path in weights:
        try:
            with safe_open(path, "np") as f:  # "pt" would import torch into the server
                f.keys()
        except Exception:  # noqa: BLE001 - whatever the reason, it would not load
            return f"{path} does not read as safetensors"
    return None


def _checkpoints_load(s: Session, run: Run) -> list[str]:
    used = select(Evaluation.checkpoint_id).where(Evaluation.run_id == run.id)
    rows = s.exec(
        select(Checkpoint).where(or_(Checkpoint.run_id == run.id, col(Checkpoint.id).in_(used)))
    ).all()
    broken = [
        f"checkpoint {c.id}: {p}"
        for c in rows
        if c.weights_dropped_at is None and (p := checkpoint_problem(c))
    ]
    # retention may drop the weights of a trained checkpoint, never of one the run refers to
    must_keep = weights_needed(s, run.id)
    broken += [
        f"checkpoint {c.id}: its weights were dropped, but {must_keep[c.id]}"
        for c in rows
        if c.weights_dropped_at is not None and c.id in must_keep
    ]
    return broken


def _story_told(s: Session, run: Run) -> list[str]:
    broken = []
    if (
        run.kind == "experiment"
        and run.status in FINISHED
        and not _rows(
            s, "SELECT id FROM event WHERE run_id = :run AND kind = 'run_end'", run=run.id
        )
    ):
        broken.append(f"the run is {run.status} but no run_end event says why")
    failed = _rows(
        s,
        """SELECT id FROM training_job WHERE run_id = :run AND status = 'failed'
           AND (error IS NULL OR error = '')""",
        run=run.id,
    )
    broken += [f"training job {i} failed without its error" for (i,) in failed]
    return broken


def _faults_logged(s: Session, run: Run) -> list[str]:
    """Rollouts that the parts around the loop failed (model calls failing past their retries,
    a sandbox that stopped answering) each have a fault of those parts logged before they
    ended (app/faults.py)."""
    kinds = ", ".join(f"'{k}'" for k in FAULT_EVENTS)
    rows = _rows(
        s,
        f"""SELECT r.id, r.status, r.reason FROM rollout r
            WHERE r.run_id = :run AND (r.status = 'infra' OR (r.reason = 'crash'
                  AND r.error LIKE '{SANDBOX_STOPPED}%'))
              AND NOT EXISTS (SELECT 1 FROM event e WHERE e.run_id = r.run_id
                  AND e.kind IN ({kinds}) AND e.created_at <= r.finished_at)""",
        run=run.id,
    )
    return [
        f"rollout {i} ({status}, {reason}): no fault logged before it ended"
        for i, status, reason in rows
    ]


def _curve_and_budget(s: Session, run: Run) -> list[str]:
    """The run's curve plots what its evaluations scored, at rollout counts it had used, and it
    used no more rollouts than its budget allows."""
    broken = [
        f"curve point {m} plots {y} for evaluation {e} ({status}, mean@k {mean})"
        for m, y, e, status, mean in _rows(
            s,
            """SELECT m.id, m.y, e.id, e.status, e.mean_at_k FROM metric m
               JOIN evaluation e ON e.id = m.evaluation_id
               WHERE m.run_id = :run AND m.series = :series
                 AND (e.status != 'done' OR e.mean_at_k IS NOT m.y)""",
            run=run.id,
            series=TEST_SERIES,
        )
    ]
    used = usage(s, run.id).rollouts
    last = _rows(
        s,
        "SELECT max(rollouts) FROM metric WHERE run_id = :run AND series = :series",
        run=run.id,
        series=TEST_SERIES,
    )[0][0]
    if last is not None and last > used:
        broken.append(f"a curve point at {last} rollouts; the run used {used}")
    limit = ((run.config or {}).get("experiment") or {}).get("budget", {}).get("rollouts")
    if limit is not None and used > limit:
        broken.append(f"the run used {used} rollouts of a budget of {limit}")
    return broken


def _fork_link(s: Session, run: Run) -> list[str]:
    from app.read.forks import link_problems

    return link_problems(s, run)


RUN_CHECKS = (
    (
        "rollouts finished",
        "every rollout is finished, or pending inside a running evaluation",
        _rollouts_finished,
    ),
    (
        "nothing left running",
        "a finished run has no running evaluation, phase, training job or search iteration",
        _nothing_in_flight,
    ),
    (
        "evaluation counts",
        "an evaluation's rows, finished rollouts and n_done agree",
        _evaluation_counts,
    ),
    ("phase counts", "a phase's rollout count is what its evaluations hold", _phase_counts),
    ("recorded once", "no step, phase, iteration, RFT step or curve point twice", _recorded_once),
    ("harness code", "every harness's code hashes to its row", _harnesses_hash),
    (
        "checkpoints",
        "every checkpoint it registered or used has its files, and they read, unless retention "
        "dropped them from one the run no longer refers to",
        _checkpoints_load,
    ),
    ("event log", "a finished run and every failure say why in the event log", _story_told),
    (
        "faults logged",
        "every rollout the model server or a sandbox failed has that fault in the log before it",
        _faults_logged,
    ),
    (
        "curve and budget",
        "curve points are their evaluations' scores at rollouts used; the budget holds",
        _curve_and_budget,
    ),
    (
        "fork link",
        "a fork's parent run is in the store, and the harness and checkpoint of its fork point "
        "are there and are the ones the fork started from",
        _fork_link,
    ),
)


def run_checks(s: Session, run_id: int) -> list[Check]:
    """The run's checks, each with the rows that break it."""
    (run,) = get_runs(s, [run_id])
    return [Check(name, promise, check(s, run)) for name, promise, check in RUN_CHECKS]


def broken_checks(s: Session, run_id: int, rows: int = 5) -> list[dict]:
    """The run's checks that break, each with its first `rows` rows (the run page's warning)."""
    return [
        {"name": c.name, "promise": c.promise, "n": len(c.broken), "rows": c.broken[:rows]}
        for c in run_checks(s, run_id)
        if not c.ok
    ]


def store_checks(s: Session) -> list[Check]:
    """The store file's own: SQLite's integrity and foreign-key checks (they read every page:
    seconds on a large store, so `whale check` runs them and the run page does not)."""
    integrity = [r[0] for r in _rows(s, "PRAGMA integrity_check")]
    keys = _rows(s, "PRAGMA foreign_key_check")
    return [
        Check(
            "integrity", "PRAGMA integrity_check is ok", [] if integrity == ["ok"] else integrity
        ),
        Check(
            "foreign keys",
            "PRAGMA foreign_key_check finds no dangling reference",
            [f"{table} row {row} -> {parent}" for table, row, parent, _ in keys],
        ),
    ]
