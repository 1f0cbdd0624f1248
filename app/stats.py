"""How sure a mean@k is, and whether two differ (docs/statistics.md).

The k samples of one task are not independent draws (an easy task passes all k), so the unit
of resampling is the task: an evaluation is summarised by its per-task mean rewards, and the
interval of mean@k is a percentile bootstrap over tasks. Two evaluations of the same tasks are
compared paired, on per-task differences: a bootstrap interval of the mean difference and a
sign-flip permutation p-value (exact when the tasks are few). Everything is seeded, so a page
shows the same figures on every load.
"""

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
RESAMPLES = 4000


def per_task_means(rewards: Iterable[tuple[str, float | None]]) -> dict[str, float]:
    """{task: mean reward of its samples} from (task, reward) pairs; no reward counts 0."""
    sums: dict[str, list[float]] = {}
    for task, reward in rewards:
        sums.setdefault(task, []).append(reward or 0.0)
    return {task: sum(r) / len(r) for task, r in sums.items()}


def mean_interval(task_means: Iterable[float], seed: int = 0) -> tuple[float, float] | None:
    """The 95% interval of the mean over tasks (resampling tasks); None below two tasks. Every
    task at one value gives a zero-width interval: the data show no spread to resample."""
    x = np.asarray(list(task_means), dtype=float)
    if len(x) < 2:
        return None
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    from scipy import stats  # here: importing scipy.stats takes seconds, most callers never need it

    ci = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=RESAMPLES,
        confidence_level=LEVEL,
        method="percentile",
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Paired:
    """B minus A on the tasks both evaluated."""

    n_tasks: int
    difference: float  # mean over shared tasks of (B's task mean - A's)
    low: float | None  # its 95% interval (None below two tasks)
    high: float | None
    p_value: float  # sign-flip permutation (two-sided by default); 1.0 when every difference is 0
    b_better: int  # tasks where B's mean is higher
    a_better: int


def paired(
    a: dict[str, float], b: dict[str, float], seed: int = 0, alternative: str = "two-sided"
) -> Paired | None:
    """Compare two evaluations' per-task means on their shared tasks; None when none shared.
    `alternative="greater"`: the p-value is one-sided, for "B is better than A"."""
    shared = sorted(a.keys() & b.keys())
    if not shared:
        return None
    d = np.array([b[t] - a[t] for t in shared])
    interval = mean_interval(d, seed)
    if np.all(d == 0):
        p = 1.0
    elif len(d) == 1:  # one task: its two sign flips are the whole null distribution
        p = 0.5 if alternative == "greater" and d[0] > 0 else 1.0
    else:
        from scipy import stats

        test = stats.permutation_test(
            (np.array([a[t] for t in shared]), np.array([b[t] for t in shared])),
            lambda x, y, axis: np.mean(y - x, axis=axis),
            permutation_type="samples",
            n_resamples=RESAMPLES,
            alternative=alternative,
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
        p = float(test.pvalue)
    return Paired(
        n_tasks=len(shared),
        difference=float(d.mean()),
        low=interval[0] if interval else None,
        high=interval[1] if interval else None,
        p_value=p,
        b_better=int((d > 0).sum()),
        a_better=int((d < 0).sum()),
    )


def seed_interval(values: Iterable[float]) -> tuple[float, tuple[float, float] | None]:
    """The mean over seeds (one value per run) and its 95% t interval; no interval below two
    seeds. Seeds are few, so the interval is wide: that is what they say."""
    x = np.asarray(list(values), dtype=float)
    mean = float(x.mean())
    if len(x) < 2:
        return mean, None
    from scipy import stats

    half = stats.t.ppf(0.5 + LEVEL / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return mean, (float(mean - half), float(mean + half))
