"""Training examples from accepted rollouts.

Because the harness shapes every model call, each model call of an accepted rollout is one
example: exactly the messages the model was given -> the completion it wrote. The loss covers
the completion tokens only (the prompt, tool results and environment text are context).
"""

from sqlmodel import Session

from app.db.schema import Step
from app.db.steps import load_steps


def examples_from_rollouts(s: Session, rollout_ids: list[int]) -> list[dict]:
    """Every successful model call of these rollouts, in rollout and step order."""
    return [
        example
        for steps in load_steps(s, rollout_ids, kind="model").values()
        for step, request in steps
        if (example := _example(step, request)) is not None
    ]


def _example(step: Step, request: dict) -> dict | None:
    """The (messages -> completion) example of one successful model call, else None."""
    if step.error or not step.response or not step.response.get("message"):
        return None
    completion = step.response["message"].get("content")
    if not completion:
        return None
    return {
        "rollout_id": step.rollout_id,
        "step_id": step.id,
        "messages": request["messages"],
        "completion": completion,
        "finish_reason": step.response.get("finish_reason"),
    }


def encode(tokenizer, example: dict, max_len: int) -> tuple[list[int], list[int]]:
    """Token ids and labels (-100 on the prompt) for one example, cut to max_len tokens."""
    prompt = tokenizer.apply_chat_template(
        example["messages"], add_generation_prompt=True, tokenize=False
    )
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(example["completion"], add_special_tokens=False)["input_ids"]
    if example.get("finish_reason") == "stop":
        completion_ids.append(tokenizer.eos_token_id)  # the model chose to end its turn: learn that
    ids = (prompt_ids + completion_ids)[:max_len]
    labels = ([-100] * len(prompt_ids) + completion_ids)[:max_len]
    return ids, labels
