"""`whale run FILE --rehearse`: the experiment's whole loop at CPU size, in a store of its own
(app/loop/rehearse.py says what stays and what shrinks)."""

import json
import time
from pathlib import Path

import uvloop

from app.config import Settings
from app.progress import err


def rehearse_file(path: Path, exp, text: str, as_json: bool = False) -> dict:
    """Rehearse the experiment of `path`; its result: file, phases, wall time, the run's end
    and `whale check`'s verdict. Prints what shrinks first."""
    from app.cli.loop import _run_one, print_summary
    from app.loop.rehearse import findings, rehearsal_home, shrink, stand_in_agent, verdict
    from app.workbench import Workbench

    small, changed = shrink(exp)
    home = rehearsal_home()
    settings = Settings(home=home, **small.runtime.model_dump(exclude_none=True))
    changed += stand_in_agent(home / "agent-bin", small)
    if not as_json:
        print(f"rehearsing {path} in {home}; what shrinks:")
        print("\n".join(f"  {line}" for line in changed))
    say = (lambda m: None) if as_json else (lambda m: err.print(f"[dim]{m}[/dim]"))

    async def main():
        workbench = Workbench(settings, say=say)
        try:
            await workbench.start()
            if workbench.vllm and settings.vllm_urls:  # a shared server: from the base weights
                await workbench.vllm.restore_base()
            result = await _run_one(workbench, small, text, path, None, True, False)
            with workbench.session() as s:
                result["check"] = verdict(s, result["run_id"])
                result["findings"] = findings(s, result["run_id"])
            return result
        finally:
            await workbench.stop()

    start = time.monotonic()
    try:
        result = uvloop.run(main())
        outcome = f"{result['status']} ({result['ended']})"
        if result["findings"]:
            outcome = "failed: " + "; ".join(result["findings"])
    except Exception as exc:  # the rehearsal's finding: what failed, as the table shows it
        result, outcome = {"phases": [], "check": "not run"}, f"failed: {exc!r}"[:500]
    row = {
        "file": str(path),
        "phases": " ".join(p["kind"][0].upper() for p in result["phases"]),
        "wall_s": round(time.monotonic() - start, 1),
        "result": outcome,
        "check": result["check"],
        "home": str(home),
        "shrunk": changed,
    }
    if as_json:
        print(json.dumps(row))
    else:
        if "run_id" in result:
            print_summary(result)
        print(
            f"rehearsal of {path}: {outcome}; phases {row['phases'] or 'none'}; "
            f"whale check: {row['check']}; {row['wall_s']} s; store kept in {home}"
        )
    return row
