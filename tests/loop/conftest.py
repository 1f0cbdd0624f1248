"""Loop tests: quick experiments on the demo model, and the store invariants a crash must keep."""

import re
from pathlib import Path

from sqlalchemy import text

from tests.conftest import REPO

QUICK = (REPO / "tests" / "loop" / "tiny.toml").read_text()


def quick_toml(
    name: str = "quick", strategy: str = "whale", rollouts: int = 60, **sections: dict
) -> str:
    """tiny.toml (the smallest loop) with another name, strategy and rollout budget; `sections` replace
    single keys, e.g. rft={"samples_per_prompt": 4}."""
    text = re.sub(r"(?m)^name = .*$", f'name = "{name}"', QUICK)
    text = re.sub(r"(?m)^strategy = .*$", f'strategy = "{strategy}"', text)
    text = re.sub(r"(?m)^rollouts = .*$", f"rollouts = {rollouts}", text)
    for section, values in sections.items():
        for key, value in values.items():
            text, n = re.subn(
                rf"(?ms)(^\[{section}\].*?^){key} = [^\n]*", rf"\g<1>{key} = {value}", text
            )
            if n == 0:
                text = text.replace(f"[{section}]\n", f"[{section}]\n{key} = {value}\n")
    return text


def store_invariants(db: Path) -> dict:
    """What no crash may break (app/read/invariants.py, every run of the store), and that every
    run got to its end with nothing failed; returns counts for the caller's own checks."""
    from app.db import open_engine, read_session
    from app.read.invariants import run_checks, store_checks

    engine = open_engine(db)
    with read_session(engine) as s:
        runs = [i for (i,) in s.execute(text("SELECT id FROM run")).all()]
        checks = [c for r in runs for c in run_checks(s, r)] + store_checks(s)
        assert [(c.name, c.broken) for c in checks if not c.ok] == []
        q = lambda sql: s.execute(text(sql)).all()  # noqa: E731
        assert q("SELECT id FROM evaluation WHERE status != 'done'") == []
        assert q("SELECT id FROM phase WHERE status != 'done'") == []
        assert q("SELECT id FROM training_job WHERE status NOT IN ('done', 'skipped')") == []
        counts = {
            t: q(f"SELECT count(*) FROM {t}")[0][0]
            for t in ("phase", "rollout", "evaluation", "training_job", "search_iteration")
        }
    engine.dispose()
    return counts


def logged(db: Path, *kinds: str) -> list:
    """The events of these kinds in the store's logs, oldest first (their details decoded)."""
    from sqlmodel import col, select

    from app.db import open_engine, read_session
    from app.db.schema import Event

    engine = open_engine(db)
    with read_session(engine) as s:
        events = s.exec(select(Event).where(col(Event.kind).in_(kinds)).order_by(Event.id)).all()
    engine.dispose()
    return list(events)
