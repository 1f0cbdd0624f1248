"""The local model server's sampler: each row of a batch drawn with its own settings and seed."""

import pytest
import torch
from scipy.stats import chisquare

from app.llm.local_engine import sample as _sample

PROBS = torch.tensor([0.5, 0.3, 0.2, 0.0])
LOGITS = PROBS.clamp(min=1e-30).log()  # softmax(LOGITS) == PROBS
OTHER = torch.tensor([0.1, 0.2, 0.3, 0.4])  # a second row's distribution, no zero in it
N = 20_000


def tempered(probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(log(p) / T), written without the sampler's softmax: p^(1/T), normalized."""
    powered = probs.double() ** (1 / temperature)
    return powered / powered.sum()


def fits(tokens: torch.Tensor, expected: torch.Tensor) -> float:
    """The chi-square test's p-value for the draws' counts against `expected` (tokens of
    expected probability 0 left out: they must simply never be drawn)."""
    counts = torch.bincount(tokens, minlength=len(expected)).double()
    possible = expected > 0
    assert counts[~possible].sum() == 0, counts
    return chisquare(counts[possible], len(tokens) * expected[possible]).pvalue


def draw(rows: int, temperature: float, top_p: float = 1.0, seed: int = 0) -> torch.Tensor:
    generators = [torch.Generator().manual_seed(seed + i) for i in range(rows)]
    return _sample(
        LOGITS.repeat(rows, 1),
        torch.full((rows,), temperature),
        torch.full((rows,), top_p),
        generators,
    )


def test_draws_follow_the_distribution_and_never_pick_a_zero_probability_token():
    tokens = draw(20_000, 1.0)
    shares = torch.bincount(tokens, minlength=4) / len(tokens)
    assert shares[3] == 0
    # binomial standard error at n = 20,000 is at most 0.0036: 0.015 is over 4 of them
    assert torch.allclose(shares, PROBS, atol=0.015), shares


def test_top_p_keeps_the_smallest_head_holding_that_mass():
    shares = torch.bincount(draw(20_000, 1.0, top_p=0.7), minlength=4) / 20_000
    assert shares[2] == shares[3] == 0  # 0.5 + 0.3 reaches 0.7: the tail is cut
    assert torch.allclose(shares[:2], torch.tensor([0.625, 0.375]), atol=0.015), shares
    assert set(draw(50, 1.0, top_p=0.1).tolist()) == {0}  # the top token always stays


def test_temperature_zero_is_greedy_and_a_seed_gives_the_same_draws():
    assert set(draw(50, 0.0).tolist()) == {0}
    assert torch.equal(draw(200, 1.0, seed=7), draw(200, 1.0, seed=7))
    assert not torch.equal(draw(200, 1.0, seed=7), draw(200, 1.0, seed=8))


def test_rows_of_one_batch_keep_their_own_settings():
    generators = [torch.Generator().manual_seed(i) for i in range(3)]
    logits = torch.stack([LOGITS, LOGITS.flip(0), LOGITS])
    tokens = _sample(
        logits, torch.tensor([0.0, 0.0, 1.0]), torch.tensor([1.0, 1.0, 0.1]), generators
    )
    assert tokens.tolist() == [0, 3, 0]  # greedy, greedy on the flipped row, top-p 0.1


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_draws_follow_the_tempered_distribution(temperature):
    """20,000 seeded draws at T fit softmax(logits / T) (chi-square p > 0.001), and do not fit
    the untempered distribution: at this size an ignored temperature gives p < 1e-50."""
    tokens = draw(N, temperature)
    assert fits(tokens, tempered(PROBS, temperature)) > 1e-3
    assert fits(tokens, PROBS.double()) < 1e-50


def test_each_row_draws_from_its_own_logits_temperature_and_generator():
    """Rows of one batch alternate two distributions and two temperatures, each with its own
    seed: each half fits its own tempered distribution, and every row draws the token it draws
    alone with its seed (rows that shared a generator would not)."""
    logits = torch.stack([LOGITS, OTHER.log()]).repeat(N // 2, 1)
    temperatures = torch.tensor([0.5, 2.0]).repeat(N // 2)
    seeds = [1000 + 7 * i for i in range(N)]
    tokens = _sample(
        logits,
        temperatures,
        torch.ones(N),
        [torch.Generator().manual_seed(s) for s in seeds],
    )
    assert fits(tokens[0::2], tempered(PROBS, 0.5)) > 1e-3
    assert fits(tokens[1::2], tempered(OTHER, 2.0)) > 1e-3
    alone = [
        _sample(logits[i : i + 1], temperatures[i : i + 1], torch.ones(1), [gen]).item()
        for i in range(0, N, 41)
        for gen in [torch.Generator().manual_seed(seeds[i])]
    ]
    assert tokens[0::41].tolist() == alone
