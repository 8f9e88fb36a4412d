"""Proposers: where the next candidate comes from (`tune`: knob search, no model;
`llm`: a chat model through langchain-openai)."""
