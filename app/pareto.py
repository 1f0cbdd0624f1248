"""Selection over (success rate up, mean turns down), as in Meta-Harness."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Score:
    harness_id: int
    success: float  # mean reward on the harness split
    turns: float  # mean model calls per rollout

    def dominates(self, other: "Score") -> bool:
        return (
            self.success >= other.success
            and self.turns <= other.turns
            and (self.success > other.success or self.turns < other.turns)
        )


def frontier(scores: list[Score]) -> list[Score]:
    """The non-dominated scores, best success first; identical points keep the earliest."""
    kept: list[Score] = []
    for s in scores:
        if any(o.dominates(s) for o in scores):
            continue
        if any((o.success, o.turns) == (s.success, s.turns) for o in kept):
            continue
        kept.append(s)
    return sorted(kept, key=lambda s: (-s.success, s.turns))


def accept(incoming: Score, scores: list[Score]) -> Score:
    """The highest success rate, ties broken by fewer turns; the incoming harness stays unless
    something strictly beats it (docs/algorithm.md, "Selection")."""
    best = incoming
    for s in scores:
        if (s.success, -s.turns) > (best.success, -best.turns):
            best = s
    return best
