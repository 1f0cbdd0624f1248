"""The intervals and paired comparisons of app/stats.py, checked by simulation with the truth
known: many evaluations at once (numpy), at small and large task counts and at the extremes."""

import numpy as np
import pytest

from app.stats import (
    FEW_TASKS,
    half_widths,
    mean_interval,
    mean_intervals,
    paired,
    paired_intervals,
    per_task_means,
    seed_interval,
    sign_flip,
)

REPEATS = 2000  # evaluations per setting: coverage known to about +-0.005


def task_rates(rng, rate: float, n: int, spread: float, size: int = REPEATS) -> np.ndarray:
    """Each task's pass probability: all at `rate` (spread 0), or drawn around it from a Beta
    whose intra-task correlation is `spread` (some tasks easy, some hard)."""
    if spread == 0:
        return np.full((size, n), rate)
    total = (1 - spread) / spread
    return rng.beta(rate * total, (1 - rate) * total, size=(size, n))


def scores(rng, rates: np.ndarray, k: int) -> np.ndarray:
    """Per-task mean rewards of k Bernoulli samples per task."""
    return rng.binomial(k, rates) / k


# k = 1; k = 4 with every task at the rate, with tasks of varied difficulty and with tasks that
# mostly pass all or none of their samples; k = 16 so: a rare pass there says little
@pytest.mark.parametrize("k, spread", [(1, 0.0), (4, 0.0), (4, 0.3), (4, 0.7), (16, 0.7)])
def test_the_interval_of_mean_at_k_covers_the_true_rate_at_small_n_and_at_the_extremes(k, spread):
    rng = np.random.default_rng(k + int(10 * spread))
    for rate in (0.02, 0.1, 0.5, 0.9):
        for n in (4, 16, 64):
            _, low, high = mean_intervals(scores(rng, task_rates(rng, rate, n, spread), k), k)
            coverage = np.mean((low <= rate) & (rate <= high))
            assert coverage >= 0.93, (rate, n, k, spread, coverage)
            if n == 64:  # and not by being useless: about what 64 x k draws support
                assert np.mean(high - low) < (0.27 if k == 1 or spread else 0.16), (rate, k)


def test_clustered_samples_widen_the_interval_where_independent_draws_would_not_cover():
    """Tasks from almost never to almost always passing: the k samples of a task agree, so
    n x k draws are worth fewer. The interval covers; one that treats them as independent
    does not."""
    rng = np.random.default_rng(7)
    means = scores(rng, rng.beta(0.5, 0.5, size=(REPEATS, 40)), 4)  # true mean 0.5
    p, low, high = mean_intervals(means, 4)
    assert np.mean((low <= 0.5) & (0.5 <= high)) >= 0.93
    half = 1.96 * np.sqrt(p * (1 - p) / (40 * 4))
    assert np.mean((p - half <= 0.5) & (0.5 <= p + half)) < 0.85
    assert np.mean(high - low) > 1.5 * np.mean(2 * half)


def test_every_task_failed_is_not_a_point():
    # 0 of 4 is consistent with a true rate near 0.5: the interval says so
    low, high = mean_interval([0.0] * 4)
    assert low == 0.0 and 0.5 < high < 0.65  # Clopper-Pearson: 1 - 0.025 ** (1 / 4) = 0.602
    assert mean_interval([0.0] * 4, k=4) == (low, high)  # 16 samples agreeing: still 4 tasks
    assert mean_interval([1.0] * 4) == pytest.approx((1 - high, 1.0))
    assert mean_interval([0.0] * 64, k=4)[1] > 0.01  # not a point however many tasks
    assert mean_interval([]) is None
    low, high = mean_interval([0.5])  # one task: an interval, nearly all of [0, 1]
    assert low < 0.05 and high > 0.95
    low, high = mean_interval([0.0, 1.0, 0.5, 0.25], k=4)
    assert 0.0 <= low < 0.4375 < high <= 1.0
    # a task's samples are averaged first; a missing reward counts 0
    assert per_task_means([("a", 1.0), ("a", 0.0), ("b", None), ("b", 1.0), ("c", 1)]) == {
        "a": 0.5,
        "b": 0.5,
        "c": 1.0,
    }


def paired_scores(rng, rate_a: float, rate_b: float, n: int, k: int, together: bool):
    """Two evaluations of the same n tasks. together: B's task rates are A's moved up by the
    same map (an easy task stays easy: correlated); else drawn independently."""
    rates_a = task_rates(rng, rate_a, n, 0.3)
    if together:
        rates_b = 1 - (1 - rates_a) * (1 - rate_b) / (1 - rate_a)  # mean rate_b
    else:
        rates_b = task_rates(rng, rate_b, n, 0.3)
    return scores(rng, rates_a, k), scores(rng, rates_b, k)


@pytest.mark.parametrize("together", [True, False])
def test_the_paired_interval_covers_the_true_difference(together):
    rng = np.random.default_rng(int(together))
    for rate_a, rate_b in ((0.02, 0.02), (0.1, 0.3), (0.5, 0.5), (0.5, 0.7)):
        for n in (4, 16, 64):
            for k in (1, 4):
                a, b = paired_scores(rng, rate_a, rate_b, n, k, together)
                _, low, high = paired_intervals(a, b, k, k)
                truth = rate_b - rate_a
                coverage = np.mean((low <= truth + 1e-12) & (truth - 1e-12 <= high))
                assert coverage >= 0.93, (rate_a, rate_b, n, k, together, coverage)


def test_the_paired_p_value_agrees_with_the_interval_and_finds_a_real_difference():
    rng = np.random.default_rng(3)
    tasks = [f"t{i}" for i in range(40)]
    found = 0
    for i in range(30):
        a, b = paired_scores(rng, 0.3, 0.3 + 0.008 * i, 40, 4, together=i % 2 == 0)
        result = paired(dict(zip(tasks, a[0])), dict(zip(tasks, b[0])), 4, 4)
        excludes_zero = result.low > 0 or result.high < 0
        assert (result.p_value < 0.05) == excludes_zero, (i, result)
        assert result.low <= result.difference <= result.high
        found += i >= 20 and result.p_value < 0.05
    # +0.16 to +0.23 on 40 tasks x 4: found about as often as a paired t-test finds it (96% of
    # the time when B's tasks move with A's, 72% when independent at +0.2)
    assert found >= 6, found


def test_two_evaluations_failing_every_task_differ_by_zero_with_a_wide_interval():
    none = {f"t{i}": 0.0 for i in range(4)}
    result = paired(none, dict(none))
    assert (result.difference, result.p_value, result.n_tasks) == (0.0, 1.0, 4)
    assert result.low < -0.5 and result.high > 0.5 and result.few_tasks
    enough = {f"t{i}": 0.0 for i in range(FEW_TASKS)}
    assert not paired(enough, dict(enough)).few_tasks


def test_paired_uses_the_shared_tasks_only():
    a = {"x": 0.0, "y": 1.0, "z": 0.5}
    b = {"x": 1.0, "y": 1.0, "w": 0.0}
    result = paired(a, b)
    assert (result.n_tasks, result.difference, result.b_better, result.a_better) == (2, 0.5, 1, 0)
    assert paired(a, {"q": 1.0}) is None
    assert paired(a, dict(a)).p_value == 1.0


def test_the_sign_flip_test_of_the_commit_gate():
    assert sign_flip({"x": 0.0}, {"x": 1.0}) == (1, 1.0, 1.0)  # +1 and -1 equally likely
    assert sign_flip({"x": 0.0}, {"x": 1.0}, alternative="greater") == (1, 1.0, 0.5)
    a = {f"t{i}": 0.0 for i in range(10)}
    n, difference, p = sign_flip(a, {t: 1.0 for t in a}, alternative="greater")
    assert (n, difference) == (10, 1.0) and p == pytest.approx(2**-10)  # exact: 1024 flips
    assert sign_flip(a, dict(a))[2] == 1.0 and sign_flip(a, {"q": 1.0}) is None


def test_the_interval_over_seeds_is_a_t_interval_no_narrower_than_one_run():
    over = seed_interval([0.5, 0.6, 0.7])
    # mean 0.6, sd 0.1, t(0.975, 2) = 4.303: 0.6 +- 4.303 * 0.1 / sqrt(3)
    assert over.mean == pytest.approx(0.6) and over.high - over.mean == pytest.approx(0.2484, 1e-3)
    assert over.mean - over.low == pytest.approx(over.high - over.mean)
    assert seed_interval([0.4]).low is None
    # three seeds scoring 0 on the same 4 tasks: not certain, as wide as one run's interval
    one_run = mean_interval([0.0] * 4)
    agreed = seed_interval([0.0, 0.0, 0.0], half_widths(0.0, *one_run))
    assert (agreed.low, agreed.high, agreed.p_value) == (0.0, one_run[1], 1.0)
    # a difference the seeds agree on: its p-value is the floor's, and agrees with the interval
    moved = seed_interval([0.1, 0.1, 0.1], (0.08, 0.12), bounds=(-1, 1))
    assert (moved.low, moved.high) == pytest.approx((0.02, 0.22))
    assert moved.p_value == pytest.approx(0.0139, abs=1e-3)  # 0.1 / (0.08 / 1.96) = 2.45 sd
    assert seed_interval([0.1, 0.1, 0.1], (0.12, 0.12), bounds=(-1, 1)).p_value > 0.05
    spread = seed_interval([0.1, 0.3, 0.2], (0.01, 0.01), bounds=(-1, 1))  # the t interval wins
    assert spread.low == pytest.approx(0.2 - 0.2484, abs=1e-3) and spread.p_value > 0.05
