"""The `agent` proposer (the paper's): a coding-agent command works in the run's archive.

The workspace is materialized (workspace.py), the user's command runs there (under bubblewrap by
default: the whole filesystem read-only, the store hidden, only the workspace writable), and
`candidates/*.py` with their notes are collected afterwards (the store and the sandboxes'
runtime folder are hidden from it). The command's output is kept in
`agent-logs/` up to a cap; an agent that hangs is killed with its whole process group.
"""

import asyncio
import json
import os
import shutil
import signal
from pathlib import Path

from app.experiment_schema import AgentProposerConfig
from app.search.agent_presets import PRESETS, AgentOutput
from app.search.candidate import Candidate, Proposal
from app.search.context import SearchContext
from app.search.workspace import clear_candidates, materialize

LOG_CAP = 10 << 20  # bytes of agent output kept on disk; the rest is counted, not stored
TAIL = 4000


class AgentProposer:
    name = "agent"

    def __init__(
        self,
        cfg: AgentProposerConfig,
        archive_dir: Path,
        max_code_bytes: int,
        hidden: list[Path] = (),
    ):
        self.cfg = cfg
        self.archive_dir = archive_dir
        self.max_code_bytes = max_code_bytes
        self.hidden = list(hidden)  # directories the agent must not see (the store)

    async def propose(self, ctx: SearchContext) -> Proposal:
        preset = PRESETS[self.cfg.preset] if self.cfg.preset else None
        command = preset.argv(self.cfg.isolation) if preset else self.cfg.command
        if not command:
            raise ValueError("no agent configured (search.agent.preset or command)")
        root = self.archive_dir / "runs" / str(ctx.run_id)
        await asyncio.to_thread(materialize, ctx, root)
        out = clear_candidates(root)
        before = {p for p in root.rglob("*.py")}
        argv = [a.format(workspace=root, k=ctx.k, iteration=ctx.iteration) for a in command]
        if shutil.which(argv[0]) is None:
            raise FileNotFoundError(
                f"agent command not found: {argv[0]}"
                + (f" (the {preset.name} preset runs it; install it on the PATH)" if preset else "")
            )
        log = root / "agent-logs" / f"iteration-{ctx.phase_id}-{ctx.iteration}.log"
        passed = [*self.cfg.env, *(preset.env if preset else ())]
        # A known agent keeps its state in a home of the workspace: it sees no secret of the
        # host's but the API key variable it is given (and a login stored at ~ is not used).
        home = root / ".home" if preset else None
        rc, tail = await self._run(self._wrap(argv, root), root, log, passed, home)
        candidates, notes = collect(out, ctx.k, self.max_code_bytes, ctx.accepted.id)
        strays = sorted(
            str(p.relative_to(root))
            for p in set(root.rglob("*.py")) - before
            if out not in p.parents
        )
        if strays:
            notes.append(f"ignored files outside candidates/: {', '.join(strays[:10])}")
        report_file = root / "reports" / f"iteration-{ctx.phase_id}-{ctx.iteration}.md"
        report = report_file.read_text(errors="replace")[:20000] if report_file.is_file() else ""
        report = "\n".join([report, *(f"- {n}" for n in notes)]).strip()
        if preset:  # the agent's own account: tokens, dollars, its error
            said = preset.read(log.read_text(errors="replace"))
        else:  # a command of one's own may leave candidates/usage.json
            usage = _usage(out / "usage.json")
            said = AgentOutput(
                usage.get("prompt_tokens", 0),
                usage.get("completion_tokens", 0),
                usage.get("cost_usd"),
            )
        error = None
        if said.error and not candidates:
            error = f"{preset.name}: {said.error}"
        elif said.error:
            report += f"\n- the agent reported an error: {said.error}"
        elif rc != 0 and not candidates:
            error = f"the agent command exited with {rc}: {tail[-1000:]}"
        return Proposal(
            candidates, said.prompt_tokens, said.completion_tokens, said.cost_usd, report, error
        )

    def _wrap(self, argv: list[str], root: Path) -> list[str]:
        if self.cfg.isolation == "none":
            return argv
        # /tmp stays readable (tools may live there) but not writable: TMPDIR points into the
        # workspace (see _run).
        wrapped = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for path in self.hidden:
            wrapped += ["--tmpfs", str(path)]
        wrapped += [
            "--bind",
            str(root),
            str(root),
            "--unshare-all",
            "--die-with-parent",
            "--chdir",
            str(root),
        ]
        if self.cfg.network:
            wrapped.append("--share-net")
        return wrapped + ["--", *argv]

    async def _run(
        self, argv: list[str], root: Path, log_path: Path, passed: list[str], home: Path | None
    ) -> tuple[int, str]:
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", *passed) if k in os.environ}
        if home is not None:
            home.mkdir(exist_ok=True)
            env["HOME"] = str(home)
        if self.cfg.isolation == "bwrap":
            (root / ".tmp").mkdir(exist_ok=True)
            env["TMPDIR"] = str(root / ".tmp")
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=root,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # one process group: a timeout kills the agent's children too
        )
        tail = b""
        try:
            log_path.parent.mkdir(exist_ok=True)
            with open(log_path, "wb") as log:
                written = 0
                while chunk := await proc.stdout.read(1 << 16):
                    if written < LOG_CAP:
                        log.write(chunk[: LOG_CAP - written])
                    written += len(chunk)
                    tail = (tail + chunk)[-TAIL:]
            return await proc.wait(), tail.decode(errors="replace")
        finally:
            if proc.returncode is None:  # cancelled (the phase's time limit) or failed
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await proc.wait()


def collect(out: Path, k: int, max_bytes: int, parent_id: int) -> tuple[list[Candidate], list[str]]:
    """Candidates from `candidates/`: regular .py files directly inside, at most k; notes."""
    notes = []
    candidates = []
    for path in sorted(out.iterdir()):
        if path.suffix != ".py":
            continue
        if len(candidates) == k:
            notes.append(f"ignored {path.name}: more than {k} candidates")
            continue
        name = path.stem
        meta, meta_error = _notes(out / f"{name}.json")
        if meta_error:
            notes.append(meta_error)
        parents = [p for p in meta.get("parents", []) if isinstance(p, int)] or [parent_id]
        fields = {key: str(meta.get(key, ""))[:2000] for key in ("hypothesis", "axis", "changes")}
        if path.is_symlink() or not path.is_file():
            candidates.append(
                Candidate(
                    name,
                    None,
                    parent_ids=parents,
                    error="not a regular file (symlinks are refused)",
                    **fields,
                )
            )
        elif path.stat().st_size > max_bytes:
            candidates.append(
                Candidate(
                    name,
                    None,
                    parent_ids=parents,
                    **fields,
                    error=f"too large: {path.stat().st_size} bytes",
                )
            )
        else:
            code = path.read_text(errors="replace")
            candidates.append(Candidate(name, code, parent_ids=parents, **fields))
    for path in out.iterdir():
        if path.is_dir() and not path.is_symlink():
            notes.append(f"ignored directory candidates/{path.name}/")
    return candidates, notes


def _notes(path: Path) -> tuple[dict, str | None]:
    if not path.is_file() or path.is_symlink():
        return {}, None
    try:
        data = json.loads(path.read_text()[:100_000])
    except ValueError as exc:
        return {}, f"{path.name}: not JSON ({exc})"
    return (data, None) if isinstance(data, dict) else ({}, f"{path.name}: not a JSON object")


def _usage(path: Path) -> dict:
    data, _ = _notes(path)
    return data
