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
