"""Phase-ending rules: fixed lengths, adaptive patience, caps."""

from app.experiment_schema import Switching
from app.loop.switching import harness_phase_end, weight_phase_end

FIXED = Switching(weight_steps_per_phase=3, proposing_iterations_per_phase=2)
ADAPTIVE = Switching(
    rule="adaptive",
    harness_min_iterations=3,
    harness_patience=2,
    harness_max_iterations=6,
    weight_window=2,
    weight_burn_in=2,
    weight_patience=2,
    weight_max_steps=8,
)


def test_fixed_lengths():
    assert harness_phase_end(FIXED, [0.1]) is None
    assert harness_phase_end(FIXED, [0.1, 0.2]) is None
    assert harness_phase_end(FIXED, [0.1, 0.2, 0.2]) == "fixed"
    assert weight_phase_end(FIXED, [0.1, 0.2]) is None
    assert weight_phase_end(FIXED, [0.1, 0.2, 0.3]) == "fixed"


def test_harness_patience_waits_for_min_iterations_and_counts_from_the_first_best():
    assert harness_phase_end(ADAPTIVE, [0.5, 0.4, 0.4]) is None  # 2 iterations < min 3
    assert harness_phase_end(ADAPTIVE, [0.5, 0.4, 0.4, 0.4]) == "patience"  # best at 0, 3 ago
    assert harness_phase_end(ADAPTIVE, [0.1, 0.2, 0.3, 0.3]) is None  # best at 2, 1 ago
    assert harness_phase_end(ADAPTIVE, [0.1, 0.2, 0.3, 0.3, 0.3]) == "patience"
    # a tie later does not reset patience: the first time the best was reached counts
    assert harness_phase_end(ADAPTIVE, [0.1, 0.3, 0.2, 0.3]) == "patience"


def test_harness_cap():
    rising = [i / 10 for i in range(7)]  # improves every iteration
    assert harness_phase_end(ADAPTIVE, rising[:6]) is None
    assert harness_phase_end(ADAPTIVE, rising) == "cap"


def test_weight_patience_on_the_smoothed_reward_after_burn_in():
    assert weight_phase_end(ADAPTIVE, [0.5, 0.1]) is None  # burn-in
    # windows of 2: [0.3, 0.35, 0.3, 0.25]; best at step 2, 2 steps ago at step 4
    assert weight_phase_end(ADAPTIVE, [0.5, 0.1, 0.6, 0.0, 0.5]) == "patience"
    assert weight_phase_end(ADAPTIVE, [0.1, 0.2, 0.3, 0.4, 0.5]) is None  # still improving


def test_weight_cap():
    assert weight_phase_end(ADAPTIVE, [i / 10 for i in range(8)]) == "cap"


def test_partial_windows_count_the_first_steps_of_a_phase():
    """The paper's rule (window = patience = minimum phase): the first steps are smoothed over
    the steps they have, so an early high reward can be the best a phase sees."""
    rule = ADAPTIVE.model_copy(
        update={"weight_window": 3, "weight_burn_in": 3, "weight_patience": 3}
    )
    partial = rule.model_copy(update={"weight_partial_windows": True})
    rewards = [0.9, 0.1, 0.1, 0.2]
    # full windows start at step 2: [0.367, 0.133], best at step 2, 1 step ago -> go on
    assert weight_phase_end(rule, rewards) is None
    # partial: [0.9, 0.5, 0.367, 0.133], best at step 0, 3 steps ago -> patience
    assert weight_phase_end(partial, rewards) == "patience"
    assert weight_phase_end(partial, rewards[:2]) is None  # within the minimum phase
    # the first checkpoint stayed the best for 3 updates: the phase ends at its minimum
    assert weight_phase_end(partial, rewards[:3]) == "patience"


def test_an_adaptive_weight_phase_of_the_paper_ends_at_the_earliest_after_its_minimum():
    """window = patience = minimum phase = 0.2 epoch (15 steps in search QA): a phase whose first
    checkpoint stays the best ends after step 15, as the release's fixed 15-step phases do."""
    from tests.loop.release_values import RELEASE

    minimum = RELEASE["searchqa"]["adaptive_round_steps"].value
    rule = Switching(
        rule="adaptive",
        weight_window=minimum,
        weight_burn_in=minimum,
        weight_patience=minimum,
        weight_partial_windows=True,
        weight_max_steps=296,
    )
    falling = [1 - i / 100 for i in range(minimum + 1)]
    assert weight_phase_end(rule, falling[: minimum - 1]) is None
    assert weight_phase_end(rule, falling[:minimum]) == "patience"
    rising = [i / 100 for i in range(40)]  # still improving: on past the minimum
    assert weight_phase_end(rule, rising[:minimum]) is None
    assert weight_phase_end(rule, rising) is None


def test_the_release_counts_iteration_zero_in_i_and_the_old_key_is_refused():
    from app.loop.experiment_file import ExperimentError, parse

    try:
        parse('name = "x"\n[switching]\nharness_iterations = 6\n', "x.toml")
    except ExperimentError as exc:
        assert "proposing_iterations_per_phase = 5" in str(exc)
    else:
        raise AssertionError("the old key was taken")
    # a run stored before the rename resumes with the same number of proposing iterations
    assert Switching.model_validate({"harness_iterations": 4}).proposing_iterations_per_phase == 4


def test_a_phase_length_under_its_old_name_is_refused_in_a_file_and_read_in_a_stored_run():
    """[switching]'s lengths are per phase, [budget]'s of the same stem per run: a file still
    using the old, shared name is told the new one; a run stored before keeps its meaning."""
    from app.experiment_schema import Experiment
    from app.loop.experiment_file import ExperimentError, parse

    for old, new in (
        ("weight_steps", "weight_steps_per_phase"),
        ("proposing_iterations", "proposing_iterations_per_phase"),
    ):
        try:
            parse(f'name = "x"\n[switching]\n{old} = 3\n', "x.toml")
        except ExperimentError as exc:
            assert f"switching.{old} is now {new}" in str(exc)
            assert f"budget.{old} is the run's total" in str(exc)
        else:
            raise AssertionError(f"switching.{old} was taken")
    stored = Experiment.model_validate(
        {"name": "x", "switching": {"weight_steps": 3, "proposing_iterations": 4}}
    )
    assert stored.switching.weight_steps_per_phase == 3
    assert stored.switching.proposing_iterations_per_phase == 4
    budget = parse('name = "x"\n[budget]\nweight_steps = 7\nproposing_iterations = 9\n', "x.toml")
    assert (budget.budget.weight_steps, budget.budget.proposing_iterations) == (7, 9)
