"""The proposer a search config asks for. Every proposer has `name` and
`async propose(ctx: SearchContext) -> Proposal`."""

from app.config import SearchConfig
from app.search.agent import AgentProposer
from app.search.knobs import KnobsProposer
from app.search.llm_proposer import LLMProposer


def make_proposer(cfg: SearchConfig, workbench):
    if cfg.proposer == "knobs":
        return KnobsProposer()
    if cfg.proposer == "llm":
        return LLMProposer(cfg.llm)
    s = workbench.settings
    # hidden from the agent: the store (test-split rollouts live there) and the sandboxes'
    # runtime folder (the gateway socket, harness copies)
    hidden = [s.home] + ([workbench.runtime] if workbench.runtime else [])
    return AgentProposer(cfg.agent, s.archive_dir, cfg.max_code_bytes, hidden=hidden)
