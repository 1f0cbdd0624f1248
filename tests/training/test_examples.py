"""Accepted rollouts become (messages -> completion) examples with the loss on the completion."""

from transformers import AutoTokenizer

from app.db import read_session
from app.db.schema import Step
from app.training.examples import encode, examples_from_rollouts
from tests.conftest import make_rollout

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]


def test_every_successful_model_call_is_an_example(store):
    engine, writer = store
    a, b = make_rollout(writer), make_rollout(writer)
    writer.add(
        Step(
            rollout_id=a,
            idx=0,
            kind="model",
            request={"messages": MESSAGES},
            response={"message": {"content": "4"}, "finish_reason": "stop"},
        ),
        Step(rollout_id=a, idx=1, kind="tool", tool="python", request={"args": []}),
        Step(
            rollout_id=a, idx=2, kind="model", request={"messages": MESSAGES}, error="backend down"
        ),
        Step(
            rollout_id=a,
            idx=3,
            kind="model",
            request={"messages": MESSAGES[1:]},
            response={"message": {"content": "four"}, "finish_reason": "length"},
        ),
        Step(
            rollout_id=b,
            idx=0,
            kind="model",
            request={"messages": MESSAGES},
            response={"message": {"content": "5"}, "finish_reason": "stop"},
        ),
    ).result()
    with read_session(engine) as s:
        examples = examples_from_rollouts(s, [a])
    assert [(e["completion"], e["finish_reason"]) for e in examples] == [
        ("4", "stop"),
        ("four", "length"),
    ]
    assert examples[0]["messages"] == MESSAGES and examples[0]["rollout_id"] == a
    with read_session(engine) as s:
        assert examples_from_rollouts(s, []) == []


def test_loss_covers_the_completion_and_the_chosen_end_of_turn(model_cache):
    from app.llm.local import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model(model_cache))
    ids, labels = encode(
        tokenizer, {"messages": MESSAGES, "completion": "4", "finish_reason": "stop"}, max_len=512
    )
    trained = [t for t in labels if t != -100]
    assert tokenizer.decode(trained) == "4" + tokenizer.eos_token
    assert len(ids) == len(labels)
    prompt = tokenizer.decode(ids[: len(ids) - len(trained)])
    assert prompt.endswith("<|im_start|>assistant\n") and "2+2?" in prompt
    # a completion cut by max_tokens did not choose to stop: no end-of-turn token to learn
    _, labels = encode(
        tokenizer, {"messages": MESSAGES, "completion": "4", "finish_reason": "length"}, max_len=512
    )
    assert tokenizer.decode([t for t in labels if t != -100]) == "4"
    ids, labels = encode(tokenizer, {"messages": MESSAGES, "completion": "4 " * 100}, max_len=20)
    assert len(ids) == len(labels) == 20
