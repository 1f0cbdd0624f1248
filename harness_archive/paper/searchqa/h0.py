"""Search QA h0: the paper's starting harness (release krafton-ai/WHALE,
domains/search_qa/environments/search_r1/base_harness.py) in this workbench's contract.

What it keeps from the release:
- a minimal prompt that asks for the answer alone inside <answer>...</answer>;
- one native tool, `search(query_list, topk, max_doc_tokens)`, sent as a tool schema with every
  call; each call the model makes is run (the release runs them all) and answered with a
  `role: tool` message holding `{"result": "Doc 1 (Title: ...)\\n<text>"}`: only the first
  query is used and exactly one passage comes back, whatever topk the model asks for;
- at most 2 model turns (MAX_TURNS = 2); a reply without a tool call ends the episode, and the
  tool calls of the last turn are not run (verl's loop stops at the turn limit first);
- a cumulative budget of 8192 assistant tokens (the launcher's MAX_RESP_LENGTH): each call gets
  `max_tokens` = what is left of it, and the episode ends once it is spent;
- the answer is the last assistant message's text, which the release's verifier reads.

The passage is cut by the domain's search tool, as the release's retrieval server cuts it: to
its first `max_doc_tokens` tokens of WHALE_SEARCHQA_PASSAGE_TOKENIZER (the paper files' policy
tokenizer), title line included, or words where no tokenizer is set.

Where it differs: a `query_list` given as a plain string counts as one query (verl's
search tool reads it so); verl's second cap, on assistant plus tool tokens (8192 + 1024 per
turn), is not applied, since one passage per call cannot reach it in two turns.
"""

import json

MAX_TURNS = 2
ASSISTANT_TOKEN_BUDGET = 8192
PASSAGE_TOKENS = 200  # the default per-passage cap (the release's max_doc_tokens)

SYSTEM_PROMPT = "You answer factual questions, searching for information when you need it."
USER_PROMPT = (
    "Question: {question}\n"
    "Search with the tool if it helps. Write only the final answer, inside <answer>...</answer>."
)
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Look up passages about one query. Returns the single best passage.",
        "parameters": {
            "properties": {
                "query_list": {
                    "description": "A list holding one search query.",
                    "items": {"type": "string"},
                    "title": "Query List",
                    "type": "array",
                },
                "topk": {
                    "default": 1,
                    "description": "Ignored: one passage is always returned.",
                    "title": "Topk",
                    "type": "integer",
                },
                "max_doc_tokens": {
                    "default": PASSAGE_TOKENS,
                    "description": "How long the passage may be.",
                    "title": "Max Doc Tokens",
                    "type": "integer",
                },
            },
            "required": ["query_list", "topk", "max_doc_tokens"],
            "title": "search_args",
            "type": "object",
            "additionalProperties": False,
        },
    },
}


def search(tools, query_list=None, topk=1, max_doc_tokens=PASSAGE_TOKENS):
    """The tool's answer, as the JSON text the model reads."""
    if isinstance(query_list, str):
        query_list = [query_list]
    queries = [str(q).strip() for q in query_list or [] if str(q).strip()]
    if not queries:
        return json.dumps({"result": "Error: query_list must be a list with one non-empty query."})
    try:
        cap = int(max_doc_tokens)
    except (TypeError, ValueError):
        cap = PASSAGE_TOKENS
    cap = cap if cap > 0 else PASSAGE_TOKENS
    found = tools.search([queries[0]], 1, max_doc_tokens=cap)[0]
    if not found:
        return json.dumps({"result": "No search results found."})
    passage = found[0]
    text = passage["text"]
    return json.dumps({"result": f"Doc 1 (Title: {passage['title']})\n{text}"}, ensure_ascii=False)


def run_tool(tools, call):
    """One tool call of the model -> the text of its `role: tool` answer."""
    function = call.get("function") or {}
    name = function.get("name")
    try:
        arguments = json.loads(function.get("arguments") or "{}")
        if not isinstance(arguments, dict):
            raise ValueError("the arguments are not an object")
    except ValueError as exc:
        return f"[parse error] {exc}: {function.get('arguments')!r}"
    if name != "search":
        return f"[unknown tool] {name}"
    try:
        return search(tools, **arguments)
    except Exception as exc:  # a bad argument or a failed search is the model's to read
        return f"[tool error] {exc}"


def assistant_message(reply):
    """The reply as the next call's history: its text, its thinking and its tool calls."""
    message = {"role": "assistant", "content": reply.content}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    return message


def run(task, llm, tools):
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_PROMPT.format(question=task["question"])},
    ]
    used, answer = 0, None
    for turn in range(MAX_TURNS):
        left = ASSISTANT_TOKEN_BUDGET - used
        if left <= 0:
            break
        try:
            reply = llm.chat(messages, tools=[SEARCH_TOOL], max_tokens=left)
        except Exception as exc:
            if getattr(exc, "reason", None) == "budget":  # the rollout's own budget: stop here
                break
            raise
        used += int(reply.usage.get("completion_tokens") or 0)
        answer = reply.content
        messages.append(assistant_message(reply))
        if not reply.tool_calls or used >= ASSISTANT_TOKEN_BUDGET or turn == MAX_TURNS - 1:
            break
        for call in reply.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.get("id"), "content": run_tool(tools, call)}
            )
    return answer
