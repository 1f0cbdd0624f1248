"""The intervals and paired tests of app/stats.py, checked by simulation: tasks of varied
difficulty, k samples each, many repetitions with the truth known."""

import numpy as np
import pytest

from app.stats import mean_interval, paired, per_task_means

REPEATS = 300


def draw(rng, difficulty: np.ndarray, k: int) -> np.ndarray:
    """Per-task mean rewards of k binary samples per task."""
    return rng.binomial(k, difficulty) / k


def test_the_interval_covers_the_true_mean_at_its_level_when_samples_cluster_by_task():
    rng = np.random.default_rng(0)
    covered = naive_covered = 0
    for i in range(REPEATS):
        difficulty = rng.beta(0.5, 0.5, size=40)  # some tasks almost always pass, some never
        truth = 0.5  # the mean of Beta(0.5, 0.5): mean@k's expectation over fresh tasks
        means = draw(rng, difficulty, k=4)
        low, high = mean_interval(means, seed=i)
        covered += low <= truth <= high
        # what treating the 160 samples as independent would claim
        p, n = means.mean(), 40 * 4
        half = 1.96 * np.sqrt(p * (1 - p) / n)
        naive_covered += p - half <= truth <= p + half
    assert 0.90 <= covered / REPEATS <= 0.99, covered
    assert naive_covered / REPEATS < 0.88, naive_covered  # why the tasks are resampled


def test_degenerate_and_tiny_evaluations():
    assert mean_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert mean_interval([0.5]) is None
    low, high = mean_interval([0.0, 1.0, 0.5, 0.25], seed=3)
    assert 0.0 <= low < 0.4375 < high <= 1.0
    assert mean_interval([0.0, 1.0, 0.5, 0.25], seed=3) == (low, high)  # seeded: same figures
    # a task's samples are averaged first; a missing reward counts 0
    assert per_task_means([("a", 1.0), ("a", 0.0), ("b", None), ("b", 1.0), ("c", 1)]) == {
        "a": 0.5,
        "b": 0.5,
        "c": 1.0,
    }


def test_the_paired_test_holds_its_level_and_finds_a_real_difference():
    rng = np.random.default_rng(1)
    false_alarms = found = 0
    for i in range(REPEATS // 3):
        difficulty = rng.beta(0.5, 0.5, size=40)
        tasks = [f"t{j}" for j in range(40)]
        a = dict(zip(tasks, draw(rng, difficulty, 4)))
        same = dict(zip(tasks, draw(rng, difficulty, 4)))  # no difference at all
        better = dict(zip(tasks, draw(rng, np.clip(difficulty + 0.2, 0, 1), 4)))
        false_alarms += paired(a, same, seed=i).p_value < 0.05
        result = paired(a, better, seed=i)
        found += result.p_value < 0.05
        assert result.n_tasks == 40 and result.low <= result.difference <= result.high
    assert false_alarms / (REPEATS // 3) <= 0.1, false_alarms
    assert found / (REPEATS // 3) >= 0.8, found


def test_paired_uses_the_shared_tasks_only():
    a = {"x": 0.0, "y": 1.0, "z": 0.5}
    b = {"x": 1.0, "y": 1.0, "w": 0.0}
    result = paired(a, b)
    assert (result.n_tasks, result.difference, result.b_better, result.a_better) == (2, 0.5, 1, 0)
    assert paired(a, {"q": 1.0}) is None
    assert paired(a, dict(a)).p_value == 1.0


def test_one_shared_task_is_compared_without_an_interval():
    one = paired({"x": 0.0}, {"x": 1.0})
    assert (one.n_tasks, one.difference, one.low, one.high) == (1, 1.0, None, None)
    assert one.p_value == 1.0  # +1 and -1 are equally likely under no difference
    assert paired({"x": 0.0}, {"x": 1.0}, alternative="greater").p_value == 0.5


def test_the_interval_over_seeds_is_a_t_interval():
    from app.stats import seed_interval

    mean, (low, high) = seed_interval([0.5, 0.6, 0.7])
    # mean 0.6, sd 0.1, t(0.975, 2) = 4.303: 0.6 +- 4.303 * 0.1 / sqrt(3)
    assert mean == pytest.approx(0.6) and high - mean == pytest.approx(0.2484, abs=1e-3)
    assert mean - low == pytest.approx(high - mean)
    assert seed_interval([0.4]) == (0.4, None)
