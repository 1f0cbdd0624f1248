"""What a proposer is given: the workbench's part it may use (Hub), once when it is made, and
each iteration's context (SearchContext); and what it must be (Proposer)."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sqlmodel import Session

from app.config import Settings
from app.db.schema import Harness, sha_of
from app.domains import Domain
from app.llm.client import ChatEndpoint
from app.pareto import Score
from app.search.candidate import Proposal


class Hub(Protocol):
    """The part of the process's Workbench (app/workbench.py) a proposer may use: it reads the
    store and never writes it (the harness phase records what it proposes)."""

    settings: Settings  # WHALE_* settings: the store's folders, the rollout budgets
    endpoint: ChatEndpoint | None  # the run's own model server (None before the model is up)

    def session(self) -> Session:
        """A read-only session of the store: the run's harnesses, rollouts and traces."""
        ...

    @property
    def runtime(self) -> Path | None:
        """The sandboxes' folder (gateway socket, harness copies): kept from an agent."""
        ...


class Proposer(Protocol):
    """What a factory of app/search/proposers.py returns."""

    name: str

    async def propose(self, ctx: "SearchContext") -> Proposal: ...


@dataclass
class SearchContext:
    workbench: Hub  # read the store, the settings, the model endpoint
    run_id: int
    phase_id: int
    round: int
    iteration: int
    k: int  # candidates wanted
    domain: Domain
    checkpoint_id: int
    accepted: Harness
    incoming: Harness
    scores: dict[int, Score] = field(default_factory=dict)  # harness id -> score, this phase
    frontier: list[Score] = field(default_factory=list)
    shas: set[str] = field(default_factory=set)  # every harness code of the run so far
    proposals_before: int = 0  # proposing iterations of the run before this one, all phases

    def seen(self, code: str) -> bool:
        return sha_of(code) in self.shas
