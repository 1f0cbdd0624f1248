"""A model call's allowance, the gateway's budget step by itself: what the rollout's token
budgets leave a call once the calls in flight get all they reserved, or the refusal."""

from fastapi.responses import JSONResponse

from app.gateway.gateway import Grant, _allowance
from app.llm.generation import Generation


def refusal(answer) -> tuple[int, str]:
    assert isinstance(answer, JSONResponse), answer
    return answer.status_code, answer.body.decode()


def test_the_allowance_is_what_both_budgets_leave():
    grant = Grant(1, "m", generation=Generation("local", max_tokens=1000))
    grant.prompt_tokens, grant.completion_tokens, grant.reserved_tokens = 300, 200, 100
    assert _allowance(grant, {}) == 400  # 1000 - 300 - 200 - 100
    limited = Generation("local", max_tokens=1000, max_completion_tokens=350)
    grant = Grant(1, "m", generation=limited)
    grant.prompt_tokens, grant.completion_tokens, grant.reserved_tokens = 300, 200, 100
    assert _allowance(grant, {}) == 50  # the completion budget is the tighter: 350 - 200 - 100


def test_a_used_up_budget_names_what_calls_in_flight_reserved():
    grant = Grant(1, "m", generation=Generation("local", max_tokens=1000))
    grant.prompt_tokens, grant.reserved_tokens = 900, 100
    status, body = refusal(_allowance(grant, {}))
    assert status == 429 and "token budget of 1000 tokens used up (100 reserved" in body
    grant = Grant(1, "m", generation=Generation("local", max_completion_tokens=10))
    grant.completion_tokens = 10
    status, body = refusal(_allowance(grant, {}))
    assert status == 429 and "completion budget of 10 tokens used up" in body
    assert "reserved" not in body  # nothing in flight


def test_the_call_budget_and_refused_fields_come_first():
    grant = Grant(1, "m", generation=Generation("local", max_calls=2))
    grant.calls = 2
    assert refusal(_allowance(grant, {}))[0] == 429
    assert refusal(_allowance(grant, {"logit_bias": {}}))[0] == 400  # no call may set it
