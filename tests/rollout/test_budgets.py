"""The budget rule the loop stops on and the run page shows: one function each, same numbers."""

from app.rollout.usage import Usage, budget_lines, over_budget, phase_budget_left

SPENT = {
    "rollouts": 90,
    "tokens": 5_000,
    "proposer_usd": 1.5,
    "wall_s": 600.0,
    "weight_steps": 3,
    "proposing_iterations": 10,
}


def test_a_step_that_would_overshoot_the_rollout_budget_is_not_started():
    assert over_budget({"rollouts": 100}, SPENT, next_cost=10) is None  # lands on the budget
    assert over_budget({"rollouts": 100}, SPENT, next_cost=11) == "budget: rollouts"
    assert over_budget({"rollouts": 91}, SPENT, next_cost=0) is None  # even a free step costs 1


def test_the_other_budgets_stop_the_run_once_used_up():
    assert over_budget({"tokens": 5_000}, SPENT, 1) == "budget: tokens"
    assert over_budget({"tokens": 5_001}, SPENT, 1) is None
    assert over_budget({"proposer_usd": 1.5}, SPENT, 1) == "budget: proposer cost"
    assert over_budget({"wall_s": 600}, SPENT, 1) == "budget: wall time"
    assert over_budget({"rollouts": None, "wall_s": None}, SPENT, 1) is None  # unlimited


def test_the_page_shows_each_budget_used_and_left():
    lines = {b["name"]: b for b in budget_lines({"rollouts": 120, "wall_s": 400}, SPENT)}
    assert list(lines) == [
        "rollouts",
        "tokens",
        "proposer_usd",
        "wall_s",
        "weight_steps",
        "proposing_iterations",
    ]
    assert lines["rollouts"] == {
        "name": "rollouts",
        "used": 90,
        "limit": 120,
        "left": 30,
        "share": 0.75,
    }
    assert lines["wall_s"]["left"] == 0 and lines["wall_s"]["share"] == 1.0  # over: capped
    assert lines["tokens"]["limit"] is None and lines["tokens"]["left"] is None


def test_budgets_in_the_release_units_hold_their_own_kind_of_phase():
    """budget.weight_steps and budget.proposing_iterations do not end a run by themselves:
    each stops its kind of phase (stagewise goes on to its harness stage), the loop decides."""
    limits = {"weight_steps": 3, "proposing_iterations": 12}
    assert over_budget(limits, SPENT, 1) is None
    used = Usage(90, 5_000, 1.5, weight_steps=3, proposing_iterations=10)
    assert not phase_budget_left(limits, used, "weight")
    assert phase_budget_left(limits, used, "harness")
    assert phase_budget_left({}, used, "weight")  # unset: unlimited
