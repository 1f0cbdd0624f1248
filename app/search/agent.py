"""The `agent` proposer (the paper's): a coding-agent command works in the run's archive.

The workspace is materialized (workspace.py), the user's command runs there (under bubblewrap by
default: its workspace, the system's toolchain and nothing else of the host; its network only
through an egress proxy to its API host, see agent_sandbox.py), and `candidates/*.py` with
their notes are collected afterwards. The command's output is kept in `agent-logs/` up to a
cap, followed by every connection the proxy refused; an agent that hangs is killed with its
whole process group.
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
from app.search.workspace import clear_candidates, materialize, workspace_root
from sandbox.agent_sandbox import AgentSandbox

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
        workspace: str = "run",
        fixed_functions: list[str] = (),
    ):
        self.cfg = cfg
        self.workspace = workspace  # "round": a fresh folder per harness phase
        self.fixed_functions = list(fixed_functions)  # named in SKILL.md
        self.archive_dir = archive_dir
        self.max_code_bytes = max_code_bytes
        self.hidden = list(hidden)  # what the agent must not see (the store, the test split)
        self.preset = PRESETS[cfg.preset] if cfg.preset else None
        if self.preset:  # a bad tool list is said when the run starts, not at iteration 1
            self.command = self.preset.argv(
                cfg.isolation, cfg.model, cfg.effort, cfg.allowed_tools, cfg.system_prompt
            )
        elif cfg.model or cfg.effort or cfg.allowed_tools is not None or cfg.system_prompt:
            raise ValueError(
                "search.agent: model, effort, allowed_tools and system_prompt are a preset's"
            )
        else:
            self.command = cfg.command

    def allowed_hosts(self) -> list[str] | None:
        """What the egress proxy lets through; None: no network at all."""
        if not self.cfg.network:
            return None
        if self.cfg.allow_hosts is not None:
            return self.cfg.allow_hosts
        return list(self.preset.hosts) if self.preset else []

    async def propose(self, ctx: SearchContext) -> Proposal:
        preset, command = self.preset, self.command
        if not command:
            raise ValueError("no agent configured (search.agent.preset or command)")
        root = workspace_root(self.archive_dir, ctx, self.workspace)
        await asyncio.to_thread(materialize, ctx, root, self.workspace, self.fixed_functions)
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
        env = {k: os.environ[k] for k in ("PATH", "LANG", *passed) if k in os.environ}
        env.update(preset.setenv if preset else {})
        if self.cfg.isolation == "none":
            env.setdefault("HOME", os.environ.get("HOME", "/"))
            if preset:  # its state in a home of the workspace, not the host's login
                env["HOME"] = str(root / ".home")
                (root / ".home").mkdir(exist_ok=True)
            rc, tail = await self._run(argv, root, log, env)
            refused = []
        else:
            sandbox = AgentSandbox(root, self.hidden, self.cfg.read_paths, self.allowed_hosts())
            async with sandbox:
                try:
                    rc, tail = await self._run(sandbox.wrap(argv), root, log, env | sandbox.env())
                finally:  # on a timeout too: what it tried to reach says what it was doing
                    _log_refusals(log, sandbox.refused)
            refused = sandbox.refused
        candidates, notes = collect(out, ctx.k, self.max_code_bytes, ctx.accepted.id)
        if refused:
            notes.append(
                f"its sandbox refused {len(refused)} connection(s), e.g. {refused[0]} "
                f"(all in agent-logs/{log.name})"
            )
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

    async def _run(
        self, argv: list[str], root: Path, log_path: Path, env: dict[str, str]
    ) -> tuple[int, str]:
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


def _log_refusals(log: Path, refused: list[str]) -> None:
    if refused:
        with open(log, "a") as f:
            f.write(f"\n--- the sandbox's egress proxy refused {len(refused)} connection(s) ---\n")
            f.writelines(f"refused {line}\n" for line in refused)


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
