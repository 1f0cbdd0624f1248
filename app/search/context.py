"""What a proposer is given each iteration."""

from dataclasses import dataclass, field

from app.db.schema import Harness, sha_of
from app.domains import Domain
from app.pareto import Score


@dataclass
class SearchContext:
    workbench: object  # the Workbench: read sessions, settings, the model endpoint
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
