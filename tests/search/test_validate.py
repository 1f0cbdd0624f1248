"""Static validation: each broken candidate gets an error a proposer can act on."""

import pytest

from app.search.validate import static_error

FORBIDDEN = frozenset({"subprocess", "ctypes"})
OK = "import json\n\ndef run(task, llm, tools):\n    return json.dumps(task)\n"


@pytest.mark.parametrize(
    "code, expected",
    [
        (None, "empty"),
        ("   \n", "empty"),
        ("def run(task, llm, tools)\n    return 1\n", "syntax error: line 1"),
        ("def solve(task, llm, tools):\n    return 1\n", "no module-level `def run"),
        ("class H:\n    def run(self, task, llm, tools):\n        return 1\n", "no module-level"),
        ("import subprocess\n" + OK, "forbidden import: subprocess (line 1)"),
        (
            OK + "\ndef helper():\n    from ctypes import util\n",
            "forbidden import: ctypes (line 7)",
        ),
        ("import os.path, subprocess.run\n" + OK, "forbidden import: subprocess.run"),
        (OK + "#" * 300, "too large"),
    ],
)
def test_broken_candidates_are_named(code, expected):
    assert expected in static_error(code, FORBIDDEN, max_bytes=200)


def test_a_well_formed_harness_passes():
    assert static_error(OK, FORBIDDEN, max_bytes=10_000) is None
    # relative imports are not module names the domain can forbid
    assert static_error("from . import x\n" + OK, FORBIDDEN, 10_000) is None
