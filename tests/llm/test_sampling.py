"""The local model server's sampler: each row of a batch drawn with its own settings and seed."""

import torch

from app.llm.local_engine import sample as _sample

PROBS = torch.tensor([0.5, 0.3, 0.2, 0.0])
LOGITS = PROBS.clamp(min=1e-30).log()  # softmax(LOGITS) == PROBS


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
