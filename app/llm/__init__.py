"""Model backends. Every backend speaks the OpenAI chat-completions protocol to the gateway."""
