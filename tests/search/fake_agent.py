"""Stands in for a coding agent: reads the workspace the way one would, writes candidates.

argv: WORKSPACE K ITERATION. Iteration 1 writes candidates (one good, one symlink, one too big,
one file outside candidates/) and a report of what it saw; iteration 2 hangs.
"""

import json
import os
import re
import sys
import time
from pathlib import Path

workspace, k, iteration = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if iteration == 2:
    time.sleep(600)
skill = (workspace / "SKILL.md").read_text()
records = [
    json.loads(line)
    for path in workspace.glob("harnesses/*/traces.jsonl")
    for line in path.read_text().splitlines()
]
every_file = "".join(p.read_text(errors="replace") for p in workspace.rglob("*") if p.is_file())
seen = {
    "skill_asks_for_k": f"at most {k} complete harness files" in skill,
    "skill_guides_the_domain": "## The arith domain" in skill and "SOLVER" in skill,
    "trace_records": len(records),
    "model_steps": sum(s["kind"] == "model" for r in records for s in r["steps"]),
    "test_task_ids": len(re.findall(r'"test-\d+"', every_file)),
    "store_visible": os.path.exists(os.environ["STORE_PATH"]),
    "summary_rows": len((workspace / "summary.tsv").read_text().splitlines()) - 1,
}
accepted = (workspace / "accepted.py").read_text()
out = workspace / "candidates"
(out / "program.py").write_text(
    accepted.replace("SOLVER = 'model'", "SOLVER = 'program'").replace(
        'SOLVER = "model"', 'SOLVER = "program"'
    )
)
(out / "program.json").write_text(
    json.dumps(
        {
            "hypothesis": "failures show wrong sums; let the model write the expression",
            "axis": "solver",
            "changes": "SOLVER program",
            "parents": [1],
        }
    )
)
os.symlink("/etc/passwd", out / "link.py")
(out / "big.py").write_text("def run(task, llm, tools):\n    return '1'\n" + "#" * 30_000)
(workspace / "stray.py").write_text("def run(task, llm, tools):\n    return '1'\n")
(out / "usage.json").write_text(json.dumps({"prompt_tokens": 1234, "completion_tokens": 56}))
report = re.search(r"reports/iteration-\d+-\d+\.md", skill).group(0)
(workspace / report).write_text("saw " + json.dumps(seen))
sys.stdout.write("x" * (12 << 20))  # enormous output: the log keeps a capped prefix
