"""The coding agents the `agent` proposer knows by name: `[search.agent] preset = "claude-code"`
or `"codex"`. A preset is the exact command line, the variables passed to it, and a reader of
the agent's own machine-readable output: its tokens and dollars go into the iteration (and the
run's proposer budget), its error fails the iteration with the agent's words.

Both run non-interactively in the workspace, which the proposer's bubblewrap isolation makes
the only writable place (app/search/agent.py). Output formats, as each CLI documents them:
- Claude Code, `claude -p --output-format json`: one JSON object, `{"type": "result",
  "subtype": "success" | "error_max_turns" | "error_max_budget_usd" | ..., "is_error",
  "result", "total_cost_usd", "usage": {"input_tokens", "output_tokens",
  "cache_creation_input_tokens", "cache_read_input_tokens"}, ...}`.
- Codex CLI, `codex exec --json`: JSON lines, one event each; `turn.completed` carries
  `usage: {"input_tokens", "cached_input_tokens", "output_tokens"}`, and `turn.failed`
  (`error.message`) or `error` (`message`) report a failure. Codex reports no dollars.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field

PROMPT = (
    "Read SKILL.md in this directory and do what it asks for iteration {iteration}: write at "
    "most {k} complete candidate harnesses into candidates/, each with its notes, and the "
    "report it names. Work only in this directory. Do not ask questions: nobody will answer."
)


@dataclass
class AgentOutput:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    error: str | None = None  # the agent's own account of why it failed


@dataclass(frozen=True)
class Preset:
    name: str
    # {workspace}, {k}, {iteration} are filled in; "{options}" is where the model, effort and
    # tool flags go, "{sandbox}" the agent's own sandbox flags
    command: tuple[str, ...]
    env: tuple[str, ...]  # variables passed through (its API key); nothing else of the host's
    read: Callable[[str], AgentOutput]
    hosts: tuple[str, ...]  # what its sandbox's egress proxy lets it reach: its API
    options: Callable[[str | None, str | None, tuple[str, ...] | None, str | None], list[str]]
    model: str | None = None  # defaults, each overridable in [search.agent]
    effort: str | None = None
    tools: tuple[str, ...] | None = None
    timeout_s: float | None = None  # its time limit unless search.proposer_timeout_s is set
    setenv: dict[str, str] = field(default_factory=dict)  # variables it always gets
    # the agent's own sandbox flags, by the proposer's isolation
    sandbox: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def argv(
        self,
        isolation: str,
        model: str | None = None,
        effort: str | None = None,
        tools: list[str] | None = None,
        system_prompt: str | None = None,
    ) -> list[str]:
        flags = self.options(
            model or self.model,
            effort or self.effort,
            tuple(tools) if tools is not None else self.tools,
            system_prompt,
        )
        expand = {"{options}": flags, "{sandbox}": list(self.sandbox.get(isolation, ()))}
        return [word for arg in self.command for word in expand.get(arg, [arg])]


def _claude_options(model, effort, tools, system_prompt=None) -> list[str]:
    flags = ["--model", model] if model else []
    flags += ["--effort", effort] if effort else []
    # after Claude Code's own system prompt, as the release's chess proposer adds its rules
    flags += ["--append-system-prompt", system_prompt] if system_prompt else []
    if tools is not None:
        # the tools it has (--tools) are the tools it may use without asking (--allowedTools)
        flags += ["--tools", ",".join(tools), "--allowedTools", ",".join(tools)]
    return flags


def _codex_options(model, effort, tools, system_prompt=None) -> list[str]:
    if tools is not None:
        raise ValueError("the codex preset has no tool list (search.agent.allowed_tools)")
    if system_prompt:
        raise ValueError("the codex preset takes no system prompt (search.agent.system_prompt)")
    flags = ["--model", model] if model else []
    return flags + (["-c", f"model_reasoning_effort={effort}"] if effort else [])


def _json_lines(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found


def read_claude(text: str) -> AgentOutput:
    results = [o for o in _json_lines(text) if o.get("type") == "result"]
    if not results:
        return AgentOutput(error=f"claude printed no result: {text.strip()[-500:] or 'nothing'}")
    result = results[-1]
    usage = result.get("usage") or {}
    prompt = sum(
        int(usage.get(key) or 0)
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    error = None
    if result.get("is_error") or result.get("subtype") != "success":
        error = f"{result.get('subtype', 'error')}: {str(result.get('result', ''))[:1000]}"
    cost = result.get("total_cost_usd")
    return AgentOutput(
        prompt,
        int(usage.get("output_tokens") or 0),
        float(cost) if cost is not None else None,
        error,
    )


def read_codex(text: str) -> AgentOutput:
    out = AgentOutput()
    for event in _json_lines(text):
        kind = event.get("type")
        if kind == "turn.completed":
            usage = event.get("usage") or {}
            out.prompt_tokens += int(usage.get("input_tokens") or 0)
            out.completion_tokens += int(usage.get("output_tokens") or 0)
        elif kind == "turn.failed":
            out.error = str((event.get("error") or {}).get("message", "turn failed"))[:1000]
        elif kind == "error":
            out.error = str(event.get("message", "error"))[:1000]
    return out


PRESETS = {
    # As the release ran its proposer (krafton-ai/WHALE, domains/*/meta_harness/): Claude Opus
    # 4.7 at effort max, with the file tools and Bash, 2400 s an iteration. Bash runs inside
    # the agent's sandbox, like everything the agent starts (sandbox/agent_sandbox.py).
    "claude-code": Preset(
        "claude-code",
        (
            "claude",
            "-p",
            PROMPT,
            "--output-format",
            "json",
            # the tools it is given are accepted without asking; nobody is there to answer
            "--permission-mode",
            "acceptEdits",
            "--strict-mcp-config",  # no MCP server of a config file
            "--no-session-persistence",
            "{options}",
        ),
        ("ANTHROPIC_API_KEY",),
        read_claude,
        hosts=("api.anthropic.com",),
        options=_claude_options,
        model="claude-opus-4-7",
        effort="max",
        tools=("Read", "Write", "Edit", "Glob", "Grep", "Bash"),
        timeout_s=2400.0,
        # no telemetry, error reports or update checks: its sandbox reaches its API only
        setenv={"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"},
    ),
    "codex": Preset(
        "codex",
        (
            "codex",
            "exec",
            "{sandbox}",
            "--json",
            "--skip-git-repo-check",
            "--ephemeral",
            "-C",
            "{workspace}",
            "{options}",
            PROMPT,
        ),
        ("OPENAI_API_KEY", "CODEX_API_KEY"),
        read_codex,
        hosts=("api.openai.com",),
        options=_codex_options,
        sandbox={
            # Codex's own sandbox needs namespaces bubblewrap has already taken: there the
            # proposer's isolation is the boundary, the case its docs give for this flag
            "bwrap": ("--dangerously-bypass-approvals-and-sandbox",),
            "none": ("--sandbox", "workspace-write"),
        },
    ),
}
