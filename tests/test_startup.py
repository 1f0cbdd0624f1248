"""What a `whale` command loads before it does anything: the suite starts hundreds of them, and
a user starts one per step. torch, matplotlib and scipy.stats each take from half a second to
more than a second of processor time to import; a command only checking the model cache,
scoring an evaluation or reading the store must not pay for them."""

import json
import subprocess
import sys

from tests.conftest import REPO

HEAVY = ("torch", "transformers", "matplotlib", "scipy.stats")

PROBE = """
import json, sys
from pathlib import Path
import app.cli  # every command's modules
from app.llm.local import prepare_model
from app.stats import mean_interval
prepare_model(Path(sys.argv[1]), say=lambda m: None)  # the cache is complete: only checked
mean_interval([0.0, 0.5, 1.0], k=2)  # what an evaluation's end computes
print(json.dumps(sorted(m for m in sys.modules if m in HEAVY)))
"""


def test_a_command_s_start_a_cache_check_and_an_interval_import_nothing_heavy(model_cache):
    from app.llm.local import prepare_model

    prepare_model(model_cache, say=lambda m: None)  # converted once, before the probe checks it
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{PROBE}", str(model_cache)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == []


def test_the_training_process_loads_no_store_or_web_packages():
    """A weight phase starts a training process; it writes files, never the store, so it does
    not pay for importing SQLAlchemy, SQLModel or FastAPI (half a second a start)."""
    probe = "import json, sys\nimport app.training.train\n" + (
        "print(json.dumps(sorted(m for m in ('sqlalchemy', 'sqlmodel', 'fastapi') "
        "if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == []
