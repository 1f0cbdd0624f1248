"""Stands in for the `claude` and `codex` CLIs (by the name it is called as), speaking each
one's documented machine-readable output (app/search/agent_presets.py). It records the command
line and the environment it got in the workspace, then, as the prompt's iteration says:
iteration 1 writes one candidate and reports its usage; iteration 2 fails as the real CLI does
(Claude Code: out of budget; Codex: an unauthenticated turn)."""

import json
import os
import re
import sys
from pathlib import Path

cli = Path(sys.argv[0]).name
workspace = Path.cwd()
prompt = next(a for a in sys.argv[1:] if "SKILL.md" in a)
iteration = int(re.search(r"for iteration (\d+)", prompt).group(1))
(workspace / f"seen-{cli}-{iteration}.json").write_text(
    json.dumps({"argv": sys.argv[1:], "env": sorted(os.environ), "home": os.environ.get("HOME")})
)
assert "SKILL.md" in prompt and (workspace / "SKILL.md").is_file()

if iteration == 1:
    accepted = (workspace / "accepted.py").read_text()
    (workspace / "candidates" / "program.py").write_text(
        accepted.replace('SOLVER = "model"', 'SOLVER = "program"')
    )
    (workspace / "candidates" / "program.json").write_text(json.dumps({"axis": "solver"}))

if cli == "claude":
    ok = iteration == 1
    print(
        json.dumps(
            {
                "type": "result",
                "subtype": "success" if ok else "error_max_budget_usd",
                "is_error": not ok,
                "duration_ms": 5100,
                "num_turns": 4,
                "result": "Wrote candidates/program.py" if ok else "Reached maximum budget ($0.50)",
                "session_id": "0b6f7c2e",
                "total_cost_usd": 0.0421 if ok else 0.5,
                "usage": {
                    "input_tokens": 120,
                    "cache_creation_input_tokens": 3000,
                    "cache_read_input_tokens": 9000,
                    "output_tokens": 850,
                },
            }
        )
    )
    sys.exit(0 if ok else 1)

print(json.dumps({"type": "thread.started", "thread_id": "0199a213-81c0"}))
print(json.dumps({"type": "turn.started"}))
if iteration == 1:
    for tokens in ((4000, 200), (6000, 300)):
        print(
            json.dumps(
                {
                    "type": "item.completed",
                    "item": {"id": "item_0", "type": "agent_message", "text": "ok"},
                }
            )
        )
        print(
            json.dumps(
                {
                    "type": "turn.completed",
                    "usage": {
                        "input_tokens": tokens[0],
                        "cached_input_tokens": 1000,
                        "output_tokens": tokens[1],
                    },
                }
            )
        )
    sys.exit(0)
print(
    json.dumps({"type": "error", "message": "unexpected status 401 Unauthorized: Missing bearer"})
)
print(
    json.dumps(
        {
            "type": "turn.failed",
            "error": {"message": "unexpected status 401 Unauthorized: Missing bearer"},
        }
    )
)
sys.exit(1)
