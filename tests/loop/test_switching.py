"""Phase-ending rules: fixed lengths, adaptive patience, caps."""

from app.experiment_schema import Switching
from app.loop.switching import harness_phase_end, weight_phase_end

FIXED = Switching(weight_steps=3, harness_iterations=2)
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
