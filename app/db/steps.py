"""The storage format of steps: a model step's request keeps only the messages its call added.

A multi-turn harness resends the whole conversation on every model call, so storing each
request whole makes a rollout's size grow with the square of its turns (16 calls: 128 KiB of
JSON, 68 KiB compressed). A step instead stores `messages_from: k` and the messages after the
first k, the first k being those of the same rollout's previous model call. The gateway writes
with `compact`; everything that reads steps back (API, pages, export, proposer traces, training
examples) goes through `load_steps` or, for a window of one trace, `expand_requests`, which put
the whole lists back.

A model step's token ids (the prompt and completion ids the server returned) are stored the same
way: the length of the prefix its prompt shares with the previous model call's prompt plus
completion, then the rest of the prompt and the completion, as little-endian uint32, zlib'd
(`pack_ids`); `unpack_ids` puts them back for one rollout's model steps in order.
"""

import sys
import zlib
from array import array
from collections.abc import Iterable

from sqlmodel import Session, col, select

from app.db.schema import Step


def shared_prefix(previous: list, messages: list) -> int:
    n = 0
    for a, b in zip(previous, messages):
        if a != b:
            break
        n += 1
    return n


def compact(previous: list, request: dict) -> dict:
    """The request to store, given the previous call's messages (the whole list)."""
    messages = request.get("messages")
    k = shared_prefix(previous, messages) if isinstance(messages, list) else 0
    if k == 0:
        return request
    return {**request, "messages": messages[k:], "messages_from": k}


def expand_requests(requests: Iterable[dict | None]) -> list[dict | None]:
    """The whole requests of one rollout's model steps, given their stored forms in step order
    (every model step, refused ones included: each was stored against the one before)."""
    whole, previous = [], []
    for request in requests:
        if isinstance(request, dict) and "messages_from" in request:
            request = dict(request)
            k = request.pop("messages_from")
            request["messages"] = previous[:k] + list(request.get("messages") or [])
        if isinstance(request, dict) and isinstance(request.get("messages"), list):
            previous = request["messages"]
        whole.append(request)
    return whole


def expand_steps(steps: list[dict]) -> list[dict]:
    """The same step dicts (one rollout's, in step order), their model requests made whole."""
    model = [step for step in steps if step["kind"] == "model"]
    for step, whole in zip(model, expand_requests(step["request"] for step in model)):
        step["request"] = whole
    return steps


def load_steps(
    s: Session, rollout_ids: list[int], kind: str | None = None
) -> dict[int, list[tuple[Step, dict | None]]]:
    """Every step of these rollouts (or only those of one kind), in step order, each with its
    whole request: rollout id -> [(step, request)], rollout ids ascending."""
    steps: dict[int, list[Step]] = {rid: [] for rid in sorted(rollout_ids)}
    if rollout_ids:
        query = select(Step).where(col(Step.rollout_id).in_(rollout_ids))
        if kind is not None:
            query = query.where(Step.kind == kind)
        for step in s.exec(query.order_by(Step.rollout_id, Step.idx, Step.id)):
            steps[step.rollout_id].append(step)
    loaded = {}
    for rollout_id, rows in steps.items():
        whole = iter(expand_requests(step.request for step in rows if step.kind == "model"))
        loaded[rollout_id] = [
            (st, next(whole) if st.kind == "model" else st.request) for st in rows
        ]
    return loaded


TokenIds = tuple[list[int], list[int]]  # (prompt ids, completion ids)
MAX_TOKEN_ID = 2**32 - 1


def token_list(value) -> list[int] | None:
    """`value` if it is a list of token ids a uint32 holds, else None: a server's ids are
    stored only when they are what they claim to be."""
    if not isinstance(value, list):
        return None
    if all(type(t) is int and 0 <= t <= MAX_TOKEN_ID for t in value):
        return value
    return None


def _uint32(values: list[int]) -> array:
    packed = array("I", values)
    if packed.itemsize != 4:
        packed = array("L", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed


def pack_ids(before: list[int], prompt: list[int], completion: list[int]) -> bytes:
    """One call's ids stored against `before`, the previous model call's prompt + completion."""
    shared = shared_prefix(before, prompt)
    rest = prompt[shared:]
    return zlib.compress(_uint32([shared, len(rest), *rest, *completion]).tobytes(), 6)


def unpack_ids(blobs: Iterable[bytes | None]) -> list[TokenIds | None]:
    """The (prompt, completion) ids of one rollout's model steps, given their stored forms in
    step order (None where a step has none: a failed call, a server that gave no ids)."""
    out, before = [], []
    for blob in blobs:
        if blob is None:
            out.append(None)
            continue
        values = _uint32([])
        values.frombytes(zlib.decompress(blob))
        if sys.byteorder == "big":
            values.byteswap()
        shared, n_rest = values[0], values[1]
        prompt = before[:shared] + values[2 : 2 + n_rest].tolist()
        completion = values[2 + n_rest :].tolist()
        before = prompt + completion
        out.append((prompt, completion))
    return out
