"""What a proposer returns: candidates (code plus notes) and what proposing them cost."""

from dataclasses import dataclass, field


@dataclass
class Candidate:
    name: str
    code: str | None  # None: the proposer produced nothing usable (see error)
    hypothesis: str = ""
    axis: str = ""
    changes: str = ""
    parent_ids: list[int] = field(default_factory=list)
    error: str | None = None  # a problem found while collecting it (no code block, too big...)


@dataclass
class Proposal:
    candidates: list[Candidate] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    report: str = ""  # the proposer's own words about the iteration
    error: str | None = None  # the proposer as a whole failed (endpoint down, command hung...)
