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

import json
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
        connect_timeout_s, read_timeout_s (timeout_s: the older name of the read timeout), max_retries, backoff,
            backoff_max_s: per-request timeouts; retries on 5xx/429/connection errors/timeouts with delays
            backoff * 2**k (capped at backoff_max_s).
        max_tokens: generation budget per answer.
        image_format: "jpeg" (default: ~6x smaller than PNG at the playback's 448 x 336) or "png" (lossless).
        json_mode: ask for ``response_format={"type": "json_object"}``.
        request_logprobs: ask for token log-probabilities (combined with stated confidences).
        extra_body: more request fields, sent as given.
        image_detail: the ``detail`` of each image part ("low", "high", "auto"), None = not sent.
        name: critic name in answers (default "openai:<model>").
        Other keyword arguments: :class:`~motionvl.critic.vlm.VLMCritic` (frames, contact sheet,
        temperature, token confidence, re-ask).
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float | None = None,
                 max_retries: int = 3, backoff: float = 1.0, backoff_max_s: float = 30.0, max_tokens: int = 1024,
                 image_format: str = "jpeg", jpeg_quality: int = 90, json_mode: bool = False,
                 request_logprobs: bool = False, name: str | None = None, extra_body: dict | None = None,
                 image_detail: str | None = None, connect_timeout_s: float | None = None,
                 read_timeout_s: float | None = None, **options: Any):
        super().__init__(name or f"openai:{model}", **options)
        from motionvl.synth.llm import timeouts

        self.client = ChatClient(base_url, model, api_key=api_key, max_retries=max_retries, backoff_s=backoff,
                                 backoff_max_s=backoff_max_s, **timeouts(timeout_s, connect_timeout_s, read_timeout_s))
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
        from motionvl.llm.openai_client import ChatClientError
        from motionvl.llm.usage import estimate_tokens, reported_tokens

        self.requests_made += 1
        messages = self.messages(prompt, followups)
        images = len(prompt.images)
        text_chars = len(prompt.system) + len(prompt.text) + sum(len(t) for _, t in followups)
        try:
            res = self.client.chat(messages, max_tokens=self.max_tokens, temperature=self.temperature,
                                   response_format={"type": "json_object"} if self.json_mode else None,
                                   logprobs=self.request_logprobs, **self.extra_body)
        except ChatClientError as exc:  # the request went out (perhaps several times): it counts
            sent = len(json.dumps(messages)) * max(1, exc.attempts)
            exc.usage = {"calls": 1, "images": images, "bytes_sent": sent, "bytes_received": exc.bytes_received,
                         "prompt_tokens": estimate_tokens(text_chars)}
            raise
        spans = probs = None
        if res.logprobs:
            spans = token_offsets([t for t, _ in res.logprobs])
            probs = [float(np.exp(lp)) for _, lp in res.logprobs]
        reported = res.usage if isinstance(res.usage, dict) else {}
        prompt_tokens, guessed_prompt = reported_tokens(reported.get("prompt_tokens"), estimate_tokens(text_chars))
        completion_tokens, guessed_completion = reported_tokens(reported.get("completion_tokens"),
                                                                estimate_tokens(len(res.text)))
        usage = {"calls": 1, "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "images": images,
                 "bytes_sent": res.bytes_sent, "bytes_received": res.bytes_received}
        return Reply(text=res.text, token_spans=spans, token_probs=probs,
                     meta={"http_attempts": res.attempts, "finish_reason": res.finish_reason,
                           "generated_tokens": completion_tokens, "prompt_tokens": prompt_tokens,
                           "tokens_estimated": guessed_prompt or guessed_completion, "usage": usage,
                           "latency_s": round(res.latency_s, 4)})

    def _describe(self) -> dict:
        return {"endpoint": self.client.url}
