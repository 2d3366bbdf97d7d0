"""VLM critic behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

Works with vLLM, Ollama, llama.cpp's server, ``transformers serve`` and cloud APIs. Frames (or
one contact sheet) are sent as base64 ``data:`` URLs in ``image_url`` content parts; the HTTP
client (:class:`motionvl.llm.openai_client.ChatClient`, standard library only) applies the
timeout and retries 5xx/429/connection errors with exponential backoff. The answer goes through
the same parse / re-ask-once / ``valid=False`` path as the local backend.

``json_mode=True`` adds ``response_format={"type": "json_object"}`` (servers that do not know it
may reject or ignore it, hence off by default). ``request_logprobs=True`` asks for token
log-probabilities and, when the server returns them, combines them with the stated confidences.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..llm.openai_client import ChatClient, image_part, text_part
from .base import Reply
from .parsing import token_offsets
from .prompts import CritiquePrompt
from .vlm import VLMCritic


class OpenAICritic(VLMCritic):
    """``critique`` / ``compare`` (see :class:`~motionvl.critic.vlm.VLMCritic`) via an HTTP endpoint.

    Args:
        base_url: e.g. "http://127.0.0.1:8000" or "http://127.0.0.1:8000/v1".
        model: the model name the server expects.
        api_key: else env MOTIONVL_OPENAI_API_KEY, else OPENAI_API_KEY, else none (local servers).
        timeout_s, max_retries, backoff, backoff_max_s: per-request timeout; retries on
            5xx/429/connection errors/timeouts with delays backoff * 2**k (capped at backoff_max_s).
        max_tokens: generation budget per answer.
        image_format: "png" (lossless) or "jpeg" (smaller; jpeg_quality).
        json_mode: ask for ``response_format={"type": "json_object"}``.
        request_logprobs: ask for token log-probabilities (combined with stated confidences).
        extra_body: more request fields, sent as given.
        image_detail: the ``detail`` of each image part ("low", "high", "auto"), None = not sent.
        name: critic name in answers (default "openai:<model>").
        Other keyword arguments: :class:`~motionvl.critic.vlm.VLMCritic` (frames, contact sheet,
        temperature, token confidence, re-ask).
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, backoff: float = 1.0, backoff_max_s: float = 30.0, max_tokens: int = 1024,
                 image_format: str = "png", jpeg_quality: int = 90, json_mode: bool = False,
                 request_logprobs: bool = False, name: str | None = None, extra_body: dict | None = None,
                 image_detail: str | None = None, **options: Any):
        super().__init__(name or f"openai:{model}", **options)
        self.client = ChatClient(base_url, model, api_key=api_key, timeout_s=timeout_s, max_retries=max_retries,
                                 backoff_s=backoff, backoff_max_s=backoff_max_s)
        self.model = model
        self.max_tokens = int(max_tokens)
        self.image_format = image_format
        self.jpeg_quality = int(jpeg_quality)
        self.json_mode = bool(json_mode)
        self.request_logprobs = bool(request_logprobs)
        self.extra_body = dict(extra_body or {})
        self.image_detail = image_detail
        self.requests_made = 0
        """Chat-completion calls made by this critic (each may include HTTP retries)."""

    def messages(self, prompt: CritiquePrompt, followups: list[tuple[str, str]] = ()) -> list[dict]:
        """OpenAI chat messages: system text, a user turn with text and image_url parts, follow-ups."""
        parts: list[dict] = []
        for p in prompt.parts:
            if p.kind == "image":
                parts.append(image_part(p.image, self.image_format, self.jpeg_quality, self.image_detail))
            elif p.text:
                parts.append(text_part(p.text))
        msgs: list[dict] = [{"role": "system", "content": prompt.system}, {"role": "user", "content": parts}]
        msgs += [{"role": role, "content": text} for role, text in followups]
        return msgs

    def _ask(self, prompt: CritiquePrompt, followups: list[tuple[str, str]]) -> Reply:
        self.requests_made += 1
        res = self.client.chat(self.messages(prompt, followups), max_tokens=self.max_tokens,
                               temperature=self.temperature,
                               response_format={"type": "json_object"} if self.json_mode else None,
                               logprobs=self.request_logprobs, **self.extra_body)
        spans = probs = None
        if res.logprobs:
            spans = token_offsets([t for t, _ in res.logprobs])
            probs = [float(np.exp(lp)) for _, lp in res.logprobs]
        return Reply(text=res.text, token_spans=spans, token_probs=probs,
                     meta={"http_attempts": res.attempts, "finish_reason": res.finish_reason,
                           "generated_tokens": (res.usage or {}).get("completion_tokens"),
                           "prompt_tokens": (res.usage or {}).get("prompt_tokens"),
                           "latency_s": round(res.latency_s, 4)})

    def _describe(self) -> dict:
        return {"endpoint": self.client.url}
