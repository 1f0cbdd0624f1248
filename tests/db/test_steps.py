"""The stored form of model requests: what each call added to the one before."""

from app.db.steps import compact, expand_requests

A = {"role": "user", "content": "a"}
B = {"role": "assistant", "content": "b"}
C = {"role": "user", "content": "c"}


def test_compact_then_expand_gives_back_every_request():
    requests = [
        {"messages": [A], "temperature": 1.0},
        {"messages": [A, B, C], "max_tokens": 8},  # continues the conversation
        {"messages": [C], "seed": 3},  # a fresh conversation: nothing shared
        {"messages": [C, A]},
        {"messages": "not a list"},  # malformed (refused by the gateway later)
        {"messages": [C, A, B]},
    ]
    stored, sent = [], []
    for request in requests:
        stored.append(compact(sent, request))
        sent = request["messages"] if isinstance(request["messages"], list) else sent
    assert stored[1] == {"messages": [B, C], "messages_from": 1, "max_tokens": 8}
    assert stored[2] == requests[2] and stored[0] == requests[0]
    assert stored[5]["messages_from"] == 2
    assert expand_requests(stored) == requests


def test_requests_stored_whole_read_back_unchanged():
    """Rows written before requests were compacted have no messages_from: read as they are."""
    old = [{"messages": [A]}, {"messages": [A, B, C]}, None]
    assert expand_requests(old) == old


def test_token_ids_are_stored_against_the_call_before_and_read_back_exactly():
    """Each call's prompt ids repeat the conversation so far: stored, a call keeps only what it
    adds; a step without ids (a failed call) leaves the chain as it was."""
    import random

    from app.db.steps import pack_ids, unpack_ids

    rng = random.Random(0)
    calls, stored, before, prompt = [], [], [], [rng.randrange(150_000) for _ in range(500)]
    for _ in range(16):
        completion = [rng.randrange(150_000) for _ in range(200)]
        calls.append((prompt, completion))
        stored.append(pack_ids(before, prompt, completion))
        stored.append(None)  # a call that failed: no ids
        before = prompt + completion
        prompt = before + [rng.randrange(150_000) for _ in range(100)]  # a tool result
    assert unpack_ids(stored) == [ids for call in calls for ids in (call, None)]
    # 16 calls of up to 5,200 ids: 44,800 prompt ids, but only what each call added is stored
    assert sum(len(blob) for blob in stored if blob) < 4 * (500 + 15 * 100 + 16 * 200) + 16 * 64
    assert unpack_ids([pack_ids([1, 2], [9], [])]) == [([9], [])]  # nothing shared, nothing drawn


def test_only_lists_of_token_ids_are_taken_as_ids():
    from app.db.steps import token_list

    assert token_list([0, 5, 2**32 - 1]) == [0, 5, 2**32 - 1]
    for bad in (None, "1 2 3", [1, -1], [1, 2.0], [True], [2**32], {"ids": [1]}):
        assert token_list(bad) is None, bad
