"""Proposers are plugins: a package of the user's adds one by declaring, in its own
pyproject.toml, an entry point in the group `whale.proposers` (name = "module:factory"); the
built-in ones (knobs, llm, agent, gepa) are declared the same way in this project's.

A factory is called once per harness phase as `factory(cfg, hub)` and returns a `Proposer`
(app/search/context.py): an object with `name` and `async propose(ctx: SearchContext) ->
Proposal` (app/search/candidate.py), called each proposing iteration.
- `cfg` is the experiment's `[search]` table (SearchConfig, app/experiment_schema.py); the
  plugin's own settings are its `[search.options]` table, `cfg.options`. A factory whose
  `options` attribute is a pydantic model has that table checked against it when the
  experiment is read, before any run exists.
- `hub` is the part of the workbench a proposer may use (`Hub`): `hub.session()` reads the
  store (the run's harnesses, rollouts and traces), `hub.settings` the WHALE_* settings,
  `hub.endpoint` the run's model server, `hub.runtime` the sandboxes' folder. The same object
  is `ctx.workbench` at each iteration. A proposer writes nothing: what it returns is recorded.
"""

from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from app.search.context import Hub, Proposer

if TYPE_CHECKING:  # only named here: the schema module stands below the search package
    from app.experiment_schema import SearchConfig

ENTRY_POINTS = "whale.proposers"


class ProposerError(ValueError):
    pass


def known_proposers() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINTS))


def check_proposer(name: str) -> None:
    """Refuse a name no installed package declares, listing the known ones."""
    if name not in known_proposers():
        raise ProposerError(
            f"unknown proposer {name!r}; known: {', '.join(known_proposers()) or 'none'}"
            f" (proposers register under the entry point group {ENTRY_POINTS!r})"
        )


def proposer_factory(name: str):
    """The factory registered under `name`, imported (what `whale run --dry-run` checks)."""
    check_proposer(name)
    (found,) = [ep for ep in entry_points(group=ENTRY_POINTS) if ep.name == name]
    try:
        return found.load()
    except Exception as exc:  # a broken plugin names itself, not a traceback from importlib
        raise ProposerError(
            f"proposer {name!r} ({found.value}) failed to load: {type(exc).__name__}: {exc}"
        ) from exc


def make_proposer(cfg: "SearchConfig", hub: Hub) -> Proposer:
    """The proposer `cfg.proposer` names, built by its factory."""
    factory = proposer_factory(cfg.proposer)
    try:
        return factory(cfg, hub)
    except Exception as exc:  # e.g. a setting of [search.options] it does not accept
        raise ProposerError(
            f"proposer {cfg.proposer!r} could not start: {type(exc).__name__}: {exc}"
        ) from exc


# --- the built-in factories (pyproject.toml declares them) ---------------------------------


def knobs(cfg: "SearchConfig", hub: Hub) -> Proposer:
    from app.search.knobs import KnobsProposer

    return KnobsProposer()


def llm(cfg: "SearchConfig", hub: Hub) -> Proposer:
    from app.search.llm_proposer import LLMProposer

    return LLMProposer(cfg.llm)


def agent(cfg: "SearchConfig", hub: Hub) -> Proposer:
    from app.search.agent import AgentProposer

    s = hub.settings
    # Never shown to the agent (its sandbox shows none of them; these are masked should a
    # folder it is given hold one): the store (test-split rollouts live there), the sandboxes'
    # runtime folder (the gateway socket, harness copies), the test splits' files.
    hidden = [s.home, *([hub.runtime] if hub.runtime else []), *held_out_files()]
    return AgentProposer(
        cfg.agent, s.archive_dir, cfg.max_code_bytes, hidden, cfg.workspace, cfg.fixed_functions
    )


DEFAULT_PROPOSER_TIMEOUT_S = 1800.0


def proposer_timeout(cfg: "SearchConfig") -> float:
    """Seconds one proposing session may take: the experiment's `proposer_timeout_s`, else the
    agent preset's own (the release's 2400 s for Claude Code), else 1800."""
    from app.search.agent_presets import PRESETS

    preset = PRESETS.get(cfg.agent.preset) if cfg.proposer == "agent" else None
    return cfg.proposer_timeout_s or (preset and preset.timeout_s) or DEFAULT_PROPOSER_TIMEOUT_S


def held_out_files() -> list:
    """The repository's data/*/test.jsonl and every file a WHALE_*_TEST or WHALE_*_VAL
    variable names (validation rows are test rows: search QA's test_100)."""
    import os
    from pathlib import Path

    from app import ROOT

    files = list((ROOT / "data").glob("*/test*"))
    for name, value in os.environ.items():
        if name.startswith("WHALE_") and name.endswith(("_TEST", "_VAL")):
            files += [Path(p) for p in value.split(os.pathsep) if p]
    return files


def gepa(cfg: "SearchConfig", hub: Hub) -> Proposer:
    from app.search.gepa import GepaProposer

    return GepaProposer(cfg.llm, gepa.options.model_validate(cfg.options), cfg.seed)


def _gepa_options():
    from app.search.gepa import GepaOptions

    return GepaOptions


gepa.options = _gepa_options()
