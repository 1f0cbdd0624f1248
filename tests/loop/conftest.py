"""Loop tests: quick experiments on the demo model, and the store invariants a crash must keep."""

import re
import sqlite3
from pathlib import Path

from tests.conftest import REPO

QUICK = (REPO / "experiments" / "arith-quick.toml").read_text()


def quick_toml(
    name: str = "quick", strategy: str = "whale", rollouts: int = 60, **sections: dict
) -> str:
    """arith-quick.toml with another name, strategy and rollout budget; `sections` replace
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
    """What no crash may break; returns counts for the caller's own checks."""
    con = sqlite3.connect(db)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    # every finished evaluation has all its rollouts, each recorded once and finished
    assert (
        q("""SELECT e.id FROM evaluation e WHERE e.status = 'done' AND
                (e.n_done != e.n_tasks * e.k OR e.n_tasks * e.k !=
                 (SELECT count(*) FROM rollout r WHERE r.evaluation_id = e.id AND r.status != 'pending'))""")
        == []
    )
    assert q("SELECT count(*) FROM evaluation WHERE status != 'done'") == [(0,)]
    # no step recorded twice (an interrupted rollout's partial steps are dropped before its rerun)
    assert q("SELECT rollout_id, idx FROM step GROUP BY 1, 2 HAVING count(*) > 1") == []
    # no phase, iteration, RFT step or curve point twice
    assert q("SELECT run_id, kind, round FROM phase GROUP BY 1, 2, 3 HAVING count(*) > 1") == []
    assert q("SELECT count(*) FROM phase WHERE status != 'done'") == [(0,)]
    assert (
        q("SELECT phase_id, iteration FROM search_iteration GROUP BY 1, 2 HAVING count(*) > 1")
        == []
    )
    assert q("SELECT run_id, step FROM training_job GROUP BY 1, 2 HAVING count(*) > 1") == []
    assert q("SELECT count(*) FROM training_job WHERE status NOT IN ('done', 'skipped')") == [(0,)]
    assert (
        q("""SELECT evaluation_id, rollouts FROM metric WHERE series = 'test/mean@k'
                GROUP BY 1, 2 HAVING count(*) > 1""")
        == []
    )
    counts = {
        t: q(f"SELECT count(*) FROM {t}")[0][0]
        for t in ("phase", "rollout", "evaluation", "training_job", "search_iteration")
    }
    con.close()
    return counts
