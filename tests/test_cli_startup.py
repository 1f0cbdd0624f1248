"""What every `whale` command loads before its own work: the command line's modules only. The
store's ORM, numpy and the proposers' HTTP client are loaded by the commands that use them, so
that `whale --help` and the commands that need none of them start without them."""

import subprocess
import sys

from tests.conftest import REPO

HEAVY = ("sqlmodel", "sqlalchemy", "numpy", "scipy", "aiohttp", "fastapi", "torch")


def test_the_command_line_loads_no_heavy_module():
    probe = f"import sys, app.cli; print(sorted(set({HEAVY!r}) & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
