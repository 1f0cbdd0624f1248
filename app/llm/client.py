"""An OpenAI-compatible chat endpoint: the one protocol the gateway speaks to every backend."""
import os

import openai

# Sampling parameters a harness may set; anything else in a request is dropped.
SAMPLING_KEYS = {
    "temperature", "top_p", "max_tokens", "seed", "stop", "n", "tools", "tool_choice",
    "presence_penalty", "frequency_penalty",
}  # fmt: skip


class ChatEndpoint:
    def __init__(self, base_url: str, model: str, api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.model = model
        # Keys come from the environment only: never stored, never handed to a sandbox.
        self.client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY", "none"),
            max_retries=0,
            timeout=600,
        )

    async def chat(self, model: str, messages: list[dict], **sampling) -> dict:
        """One completion; returns the response as the plain OpenAI JSON object."""
        params = {k: v for k, v in sampling.items() if k in SAMPLING_KEYS and v is not None}
        response = await self.client.chat.completions.create(
            model=model, messages=messages, **params
        )
        return response.model_dump(exclude_none=True)

    async def close(self) -> None:
        await self.client.close()
