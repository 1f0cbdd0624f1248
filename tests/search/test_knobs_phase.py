"""The knobs proposer on the real demo model improves the arith seed harness."""

import pytest

from app.experiment_schema import SearchConfig


@pytest.mark.slow
def test_knobs_search_accepts_a_harness_that_beats_the_seed(search):
    cfg = SearchConfig(proposer="knobs", candidates=3, tasks=16, samples=1)
    phase, stored, _ = search(cfg, iterations=2)
    iterations = stored["iterations"]
    by_id = {h.id: h for h in stored["harnesses"]}
    incoming = by_id[phase.harness_in_id]
    print("figures:", [(i.iteration, i.best_success, i.accepted_harness_id) for i in iterations])

    assert [(i.iteration, i.status) for i in iterations] == [(0, "done"), (1, "done"), (2, "done")]
    assert phase.status == "done" and phase.ended_reason == "fixed"
    # iteration 1 moves PROMPT_STYLE, iteration 2 SOLVER (declaration order)
    assert {by_id[h].axis for h in by_id if by_id[h].iteration == 1} == {"PROMPT_STYLE"}
    assert {by_id[h].axis for h in by_id if by_id[h].iteration == 2} == {"SOLVER"}
    accepted = by_id[phase.harness_out_id]
    assert accepted.id != incoming.id and accepted.proposer == "knobs"
    seed_success = iterations[0].best_success
    frontier = {p["harness_id"]: p["success"] for p in iterations[-1].frontier}
    assert frontier[accepted.id] > seed_success
    assert 'SOLVER = "program"' in accepted.code  # the seed's quote style, kept
    # lineage: every candidate names its parent, which is in the run
    candidates = [h for h in stored["harnesses"] if h.iteration]
    assert len(candidates) == 3 and all(
        h.parent_ids and h.parent_ids[0] == h.parent_id in by_id for h in candidates
    )
    # rollouts: incoming + 3 candidates x 16 tasks, plus one smoke rollout per candidate
    assert phase.rollouts == 4 * 16 + 3 == len(stored["rollouts"])
    best = [m.y for m in stored["metrics"] if m.series == "harness/best_success"]
    assert best == [i.best_success for i in iterations] and best[-1] > best[0]
