"""compare_runs: best and final test mean@k, rollouts to the best, rollouts used, per run."""

import pytest

from app.read.compare import compare_runs
from app.read.runs import UnknownRuns


def test_summaries_in_the_order_asked(session, filled):
    runs = filled.runs
    order = ["harness_only", "whale", "rft", "weight_only", "stagewise"]
    rows = compare_runs(session, [runs[s].id for s in order])
    assert [row["strategy"] for row in rows] == order  # an rft run shows its kind
    by = {row["strategy"]: row for row in rows}
    # The whale run reaches 0.75 at 1024 rollouts and again at 2048: the first counts.
    assert by["whale"] == {
        "id": runs["whale"].id,
        "name": "arith whale",
        "strategy": "whale",
        "status": "done",
        "domain": "arith",
        "k": 4,
        "ks": None,  # its test points agree on k
        "scoring": None,  # its store holds metrics, not evaluations
        "best": 0.75,
        "rollouts_to_best": 1024,
        # its phases end on a harness and a trained checkpoint its test points never measured
        # (they all score the run's first harness under the base): untested, no score
        "final": None,
        "rollouts_used": 1536 + 2000,  # its phases counted more than its metrics
        "test_points": 5,
        # no harness-split scores: the point shown without peeking at test is the final one
        "selected": 0.7,
        "selected_ci": None,
        "selected_by": "final point",
        "rollouts_to_selected": by["whale"]["rollouts_to_selected"],
        # synthetic test points have no rollouts: no interval, nothing to pair
        "best_ci": None,
        "final_ci": None,
        "final_evaluation_id": None,
        "selected_evaluation_id": by["whale"]["selected_evaluation_id"],
        # the final pair was not tested: no final score, so no tasks behind it either
        "test_tasks": None,
        "few_tasks": False,
        "final_pair": {
            "harness_id": by["whale"]["final_pair"]["harness_id"],
            "checkpoint_id": by["whale"]["final_pair"]["checkpoint_id"],
            "tested": False,
        },
        "paired": None,
        "group": None,  # not one of a seed group
        "seed": None,  # nor run from an experiment file
    }
    assert (by["harness_only"]["best"], by["harness_only"]["rollouts_to_best"]) == (0.6, 800)
    assert by["weight_only"]["rollouts_used"] == 2304  # a train metric after the last test
    assert (by["rft"]["k"], by["rft"]["best"], by["rft"]["rollouts_to_best"]) == (2, 0.3, 64)
    stagewise = by["stagewise"]  # no test point yet
    assert (stagewise["status"], stagewise["test_points"], stagewise["rollouts_used"]) == (
        "running",
        0,
        0,
    )
    assert stagewise["best"] is stagewise["rollouts_to_best"] is stagewise["final"] is None


def test_unknown_runs_are_named(session, filled):
    with pytest.raises(UnknownRuns) as caught:
        compare_runs(session, [filled.runs["whale"].id, 998, 999])
    assert caught.value.ids == [998, 999]
    assert "998, 999" in str(caught.value)
