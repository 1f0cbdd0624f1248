"""Selection rules: the frontier over (success up, turns down) and acceptance."""

from app.pareto import Score, accept, frontier

INCOMING = Score(1, 0.50, 2.0)


def test_frontier_keeps_only_non_dominated_points_best_first():
    scores = [
        INCOMING,
        Score(2, 0.60, 3.0),
        Score(3, 0.40, 1.0),
        Score(4, 0.45, 2.5),
        Score(5, 0.60, 4.0),
    ]
    assert [s.harness_id for s in frontier(scores)] == [2, 1, 3]


def test_identical_points_keep_the_earliest_harness():
    assert [s.harness_id for s in frontier([INCOMING, Score(2, 0.50, 2.0)])] == [1]


def test_higher_success_is_accepted_even_with_more_turns():
    assert accept(INCOMING, [INCOMING, Score(2, 0.55, 5.0)]).harness_id == 2


def test_ties_on_success_go_to_fewer_turns():
    scores = [INCOMING, Score(2, 0.70, 3.0), Score(3, 0.70, 1.5), Score(4, 0.70, 1.5)]
    assert accept(INCOMING, scores).harness_id == 3  # 4 ties 3 exactly: the earlier one stays


def test_incoming_stays_when_nothing_beats_it():
    scores = [INCOMING, Score(2, 0.50, 2.0), Score(3, 0.40, 1.0), Score(4, 0.50, 2.5)]
    assert accept(INCOMING, scores) == INCOMING


def test_incoming_loses_to_an_equal_success_with_fewer_turns():
    assert accept(INCOMING, [INCOMING, Score(2, 0.50, 1.0)]).harness_id == 2
