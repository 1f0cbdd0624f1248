"""How sure a mean@k is, and whether two differ (docs/statistics.md).

A mean@k is the mean over n tasks of each task's mean reward over its k samples. Its interval is
an exact (Clopper-Pearson) binomial interval on an effective number of draws, after Korn and
Graubard (1998): at k = 1 the n tasks themselves (exact); at k > 1 the n x k draws divided by
their design effect, which the tasks' spread estimates, kept between 1 (independent draws) and k
(each task's samples all alike), and pulled towards k by two pseudo-tasks against the tasks
that show the clustering (those with the rarer outcome), so that a few tasks cannot claim draws
they do not have. Every task failed (or passed) gives the design effect k:
the width of n tasks, never a point.

Two evaluations of the same tasks are compared paired: the difference of the means, an interval
from the two intervals and the tasks' correlation (the MOVER of Zou and Donner, 2008, which is
Newcombe's 1998 paired interval at k = 1), and the two-sided p-value that inverts that interval:
p < 1 - level exactly when the interval leaves out 0. The arrays versions (`mean_intervals`,
`paired_intervals`) take many evaluations at once, for the simulations that check coverage.
"""

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
FEW_TASKS = 30  # below this many tasks a page says so beside the figure (docs/statistics.md)
PSEUDO_TASKS = 2  # the weight of the prior "each task's samples all alike" on the design effect
RESAMPLES = 4000  # the sign-flip test's permutations


def per_task_means(rewards: Iterable[tuple[str, float | None]]) -> dict[str, float]:
    """{task: mean reward of its samples} from (task, reward) pairs; no reward counts 0."""
    sums: dict[str, list[float]] = {}
    for task, reward in rewards:
        sums.setdefault(task, []).append(reward or 0.0)
    return {task: sum(r) / len(r) for task, r in sums.items()}


def few_tasks(n_tasks: int | None) -> bool:
    """Whether a figure rests on fewer than FEW_TASKS tasks (and so its page says so)."""
    return n_tasks is not None and n_tasks < FEW_TASKS


def _exact(successes: np.ndarray, draws: np.ndarray, level: float) -> tuple[np.ndarray, ...]:
    """Clopper-Pearson limits for (possibly fractional) successes out of draws."""
    # the beta quantile is scipy.special's betaincinv (what stats.beta.ppf calls): every
    # evaluation's end takes these limits, and importing scipy.stats costs half a second more
    from scipy.special import betaincinv

    tail = (1 - level) / 2
    with np.errstate(all="ignore"):
        low = betaincinv(successes, draws - successes + 1, tail)
        high = betaincinv(successes + 1, draws - successes, 1 - tail)
    low = np.where(successes <= 0, 0.0, low)
    high = np.where(successes >= draws, 1.0, high)
    return np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)


def mean_intervals(means: np.ndarray, k: float = 1, level: float = LEVEL) -> tuple[np.ndarray, ...]:
    """(mean@k, low, high), one of each per row of `means` (evaluations x n task means in
    [0, 1], each the mean of k samples)."""
    means = np.atleast_2d(np.asarray(means, dtype=float))
    n = means.shape[1]
    p = means.mean(axis=1)
    if k <= 1:
        draws = np.full(p.shape, float(n))
    else:
        spread = means.var(axis=1, ddof=1) / n if n > 1 else np.zeros(p.shape)
        binomial = p * (1 - p) / (n * k)  # the variance of p if all n x k draws were independent
        with np.errstate(all="ignore"):
            design = np.where(binomial > 0, spread / binomial, k)  # every task at 0 or 1: k
        design = np.clip(design, 1, k)
        # only tasks on both sides of the rare outcome show how samples cluster: one task with
        # one pass of k says nothing about it, so with few such tasks the prior k dominates
        informative = np.minimum((means > 0).sum(axis=1), (means < 1).sum(axis=1))
        design = (informative * design + PSEUDO_TASKS * k) / (informative + PSEUDO_TASKS)
        draws = np.clip(n * k / design, n, n * k)
    low, high = _exact(p * draws, draws, level)
    return p, np.minimum(low, p), np.maximum(high, p)


def mean_interval(
    task_means: Iterable[float], k: float = 1, level: float = LEVEL
) -> tuple[float, float] | None:
    """The interval of the mean over tasks of their means of k samples; None without tasks."""
    x = np.asarray(list(task_means), dtype=float)
    if len(x) == 0:
        return None
    _, low, high = mean_intervals(x[None, :], k, level)
    return float(low[0]), float(high[0])


def _correlation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, the tasks' correlation of A and B, shrunk by n / (n + 2) (a correlation of a few
    tasks is mostly noise, and an overstated one narrows the interval); 0 where undefined."""
    n = a.shape[1]
    da, db = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    scale = np.sqrt((da**2).sum(axis=1) * (db**2).sum(axis=1))
    with np.errstate(all="ignore"):
        r = np.where(scale > 0, (da * db).sum(axis=1) / scale, 0.0)
    return r * n / (n + PSEUDO_TASKS)


def paired_intervals(
    a: np.ndarray, b: np.ndarray, k_a: float = 1, k_b: float = 1, level: float = LEVEL
) -> tuple[np.ndarray, ...]:
    """(B - A, low, high) per row: rows are pairs of evaluations, columns the same tasks."""
    a, b = np.atleast_2d(np.asarray(a, float)), np.atleast_2d(np.asarray(b, float))
    pa, la, ua = mean_intervals(a, k_a, level)
    pb, lb, ub = mean_intervals(b, k_b, level)
    r = _correlation(a, b)
    d = pb - pa
    below = np.sqrt(np.maximum((pb - lb) ** 2 + (ua - pa) ** 2 - 2 * r * (pb - lb) * (ua - pa), 0))
    above = np.sqrt(np.maximum((ub - pb) ** 2 + (pa - la) ** 2 - 2 * r * (ub - pb) * (pa - la), 0))
    return d, np.maximum(d - below, -1.0), np.minimum(d + above, 1.0)


def _inverted_p(a: np.ndarray, b: np.ndarray, k_a: float, k_b: float, difference: float) -> float:
    """The two-sided p-value of "no difference" that the interval implies: the 1 - level at
    which the interval's nearer end reaches 0."""
    if difference == 0:
        return 1.0
    from scipy.optimize import brentq

    end = 1 if difference > 0 else 2  # the lower end when B is ahead, else the upper

    def gap(alpha: float) -> float:  # > 0 while the (1 - alpha) interval leaves out 0
        edge = paired_intervals(a, b, k_a, k_b, 1 - alpha)[end][0]
        return edge if difference > 0 else -edge

    if gap(1 - 1e-9) <= 0:  # even the narrowest interval holds 0
        return 1.0
    if gap(1e-12) > 0:
        return 1e-12
    # on log(alpha): three significant digits of a small p in a dozen steps
    log_p = brentq(lambda x: gap(float(np.exp(x))), np.log(1e-12), np.log(1 - 1e-9), xtol=1e-4)
    return float(np.exp(log_p))


@dataclass(frozen=True)
class Paired:
    """B minus A on the tasks both evaluated."""

    n_tasks: int
    difference: float  # mean over shared tasks of (B's task mean - A's)
    low: float | None  # its 95% interval
    high: float | None
    p_value: float  # two-sided, "no difference"; below 0.05 exactly when the interval leaves out 0
    b_better: int  # tasks where B's mean is higher
    a_better: int
    few_tasks: bool  # fewer than FEW_TASKS shared tasks


def _shared(a: dict[str, float], b: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """The two sides' scores on the tasks both have, as one-row arrays, in task order."""
    shared = sorted(a.keys() & b.keys())
    return np.array([[a[t] for t in shared]]), np.array([[b[t] for t in shared]])


def paired_interval(
    a: dict[str, float], b: dict[str, float], k_a: float = 1, k_b: float = 1
) -> tuple[float, float, float] | None:
    """(B - A, low, high) on the shared tasks, without the p-value; None when none shared."""
    xa, xb = _shared(a, b)
    if xa.size == 0:
        return None
    difference, low, high = (float(v[0]) for v in paired_intervals(xa, xb, k_a, k_b))
    return difference, low, high


def paired(
    a: dict[str, float], b: dict[str, float], k_a: float = 1, k_b: float = 1
) -> Paired | None:
    """Compare two evaluations' per-task means (of k_a and k_b samples) on their shared tasks;
    None when they share none."""
    xa, xb = _shared(a, b)
    if xa.size == 0:
        return None
    difference, low, high = paired_interval(a, b, k_a, k_b)
    d = xb[0] - xa[0]
    return Paired(
        n_tasks=d.size,
        difference=difference,
        low=low,
        high=high,
        p_value=_inverted_p(xa, xb, k_a, k_b, difference),
        b_better=int((d > 0).sum()),
        a_better=int((d < 0).sum()),
        few_tasks=few_tasks(d.size),
    )


def sign_flip(
    a: dict[str, float], b: dict[str, float], seed: int = 0, alternative: str = "two-sided"
) -> tuple[int, float, float] | None:
    """(shared tasks, mean difference B - A, p-value) of a sign-flip permutation test of the
    per-task differences (exact when the tasks are few); None when no task is shared. The commit
    gate's test (app/search/acceptance.py): it holds its level whatever the rewards' spread.
    `alternative="greater"`: one-sided, for "B is better than A"."""
    shared = sorted(a.keys() & b.keys())
    if not shared:
        return None
    d = np.array([b[t] - a[t] for t in shared])
    if np.all(d == 0):
        p = 1.0
    elif len(d) == 1:  # one task: its two sign flips are the whole null distribution
        p = 0.5 if alternative == "greater" and d[0] > 0 else 1.0
    else:
        from scipy import stats

        p = stats.permutation_test(
            (np.array([a[t] for t in shared]), np.array([b[t] for t in shared])),
            lambda x, y, axis: np.mean(y - x, axis=axis),
            permutation_type="samples",
            n_resamples=RESAMPLES,
            alternative=alternative,
            vectorized=True,
            rng=np.random.default_rng(seed),
        ).pvalue
    return len(shared), float(d.mean()), float(p)


@dataclass(frozen=True)
class OverSeeds:
    """The mean of one figure over seeds, its 95% interval and the p-value of "it is 0"."""

    mean: float
    low: float | None  # None below two seeds
    high: float | None
    p_value: float | None  # None below two seeds, or with no spread and no floor


def seed_interval(
    values: Iterable[float],
    floor: tuple[float, float] = (0.0, 0.0),
    bounds: tuple[float, float] = (0.0, 1.0),
) -> OverSeeds:
    """The mean over seeds (one value per run) and its 95% interval: the t interval over seeds,
    but reaching at least `floor` (below, above) from the mean: one run's interval on its test
    tasks, on average over the runs (half_widths; 0: none known). The seeds of one experiment
    share those tasks, so averaging seeds cannot remove their sampling error, and seeds that
    agree exactly do not make a figure certain. The p-value ("the mean is 0") is the larger of
    the t-test's and the floor's (its side read as 1.96 standard errors), so it is below 0.05
    exactly when the interval leaves out 0. Seeds are few, so the interval is wide: that is
    what they say."""
    x = np.asarray(list(values), dtype=float)
    mean = float(x.mean())
    if len(x) < 2:
        return OverSeeds(mean, None, None, None)
    from scipy import stats

    spread = float(x.std(ddof=1)) / np.sqrt(len(x))
    spread = 0.0 if spread < 1e-12 else spread  # equal values up to rounding: no spread
    t, z = stats.t(len(x) - 1), float(stats.norm.ppf(0.5 + LEVEL / 2))
    half = float(t.ppf(0.5 + LEVEL / 2)) * spread
    floor = float(floor[0]), float(floor[1])  # numpy means arrive as arrays
    below, above = max(half, floor[0]), max(half, floor[1])
    toward_zero = floor[0] if mean > 0 else floor[1]  # the floor's side that could reach 0
    p_values = [2 * float(t.sf(abs(mean) / spread))] if spread > 0 else []
    p_values += [2 * float(stats.norm.sf(z * abs(mean) / toward_zero))] if toward_zero > 0 else []
    p = 1.0 if mean == 0 else max(p_values, default=None)
    return OverSeeds(mean, max(mean - below, bounds[0]), min(mean + above, bounds[1]), p)


def half_widths(value: float | None, low: float | None, high: float | None) -> tuple[float, ...]:
    """How far an interval reaches below and above its figure ((0, 0) for none): one run's,
    as seed_interval's floor."""
    if value is None or low is None or high is None:
        return 0.0, 0.0
    return value - low, high - value
