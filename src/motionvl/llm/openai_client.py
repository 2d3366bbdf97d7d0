"""A small OpenAI-compatible chat client (``POST {base_url}/v1/chat/completions``), standard library only.

Why not the ``openai`` package: the critic and the reward synthesizer only need one endpoint,
and urllib keeps the core free of an HTTP stack whose major versions move fast; the request
and response shapes are the documented Chat Completions ones, so any compatible server works
(vLLM, Ollama, llama.cpp server, ``transformers serve``, a cloud API).

Behaviour:

* ``base_url`` may be given with or without the ``/v1`` suffix;
* the API key comes from the argument, else ``MOTIONVL_OPENAI_API_KEY``, else ``OPENAI_API_KEY``;
  without one no Authorization header is sent (local servers);
* per-request timeout ``timeout_s``; up to ``max_retries`` retries with exponential backoff
  (``backoff_s * 2**k``, capped at ``backoff_max_s``; a numeric ``Retry-After`` header is honoured
  within the cap) on connection errors, timeouts, HTTP 408/409/429 and 5xx; other HTTP errors
  raise at once;
* every failure is a :class:`ChatClientError` carrying the status (if any) and whether it was
  retryable.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np

API_KEY_ENV_VARS = ("MOTIONVL_OPENAI_API_KEY", "OPENAI_API_KEY")
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class ChatClientError(RuntimeError):
    def __init__(self, message: str, status: int | None = None, retryable: bool = False, attempts: int = 1):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.attempts = attempts
        self.retry_after: str | None = None


@dataclasses.dataclass
class ChatResult:
    text: str
    finish_reason: str | None
    usage: dict
    raw: dict
    attempts: int
    """HTTP requests made (1 + retries)."""
    latency_s: float
    logprobs: list[tuple[str, float]] | None = None
    """(token, logprob) per generated token when the server returned them."""


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def image_data_url(image: np.ndarray, fmt: str = "png", jpeg_quality: int = 90) -> str:
    """Encode an HxWx3 uint8 RGB image as a ``data:image/...;base64,`` URL (OpenCV encoder)."""
    import cv2

    img = np.asarray(image)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 RGB image, got shape {img.shape}")
    fmt = fmt.lower()
    if fmt in ("jpg", "jpeg"):
        ok, buf = cv2.imencode(".jpg", img[:, :, ::-1].astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)])
        mime = "image/jpeg"
    elif fmt == "png":
        ok, buf = cv2.imencode(".png", img[:, :, ::-1].astype(np.uint8))
        mime = "image/png"
    else:
        raise ValueError(f"unsupported image format {fmt!r} (png or jpeg)")
    if not ok:
        raise ValueError("image encoding failed")
    return f"data:{mime};base64,{base64.b64encode(buf.tobytes()).decode('ascii')}"


def image_part(image: np.ndarray | str, fmt: str = "png", jpeg_quality: int = 90, detail: str | None = None) -> dict:
    """An ``image_url`` content part from an RGB array (encoded to a data URL) or a URL string."""
    url = image if isinstance(image, str) else image_data_url(image, fmt, jpeg_quality)
    d: dict = {"url": url}
    if detail:
        d["detail"] = detail
    return {"type": "image_url", "image_url": d}


def chat_completions_url(base_url: str) -> str:
    b = base_url.rstrip("/")
    if b.endswith("/chat/completions"):
        return b
    if not b.endswith("/v1"):
        b += "/v1"
    return b + "/chat/completions"


def resolve_api_key(api_key: str | None) -> str | None:
    if api_key:
        return api_key
    for var in API_KEY_ENV_VARS:
        if os.environ.get(var):
            return os.environ[var]
    return None


class ChatClient:
    """Synchronous client for one model behind an OpenAI-compatible endpoint."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, backoff_s: float = 1.0, backoff_max_s: float = 30.0,
                 extra_headers: dict[str, str] | None = None):
        if not base_url:
            raise ValueError("base_url is required (e.g. http://127.0.0.1:8000/v1)")
        if not model:
            raise ValueError("model is required")
        self.url = chat_completions_url(base_url)
        self.model = model
        self.api_key = resolve_api_key(api_key)
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.extra_headers = dict(extra_headers or {})

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json", **self.extra_headers}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        d = self.backoff_s * (2 ** attempt)
        if retry_after:
            try:
                d = max(d, float(retry_after))
            except ValueError:
                pass
        return min(d, self.backoff_max_s)

    def chat(self, messages: list[dict], max_tokens: int | None = None, temperature: float | None = None,
             response_format: dict | None = None, logprobs: bool = False, **extra: Any) -> ChatResult:
        """POST one chat completion; returns the first choice. Raises :class:`ChatClientError`."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": False}
        if max_tokens is not None:
            body["max_tokens"] = int(max_tokens)
        if temperature is not None:
            body["temperature"] = float(temperature)
        if response_format is not None:
            body["response_format"] = response_format
        if logprobs:
            body["logprobs"] = True
        body.update(extra)
        data = json.dumps(body).encode("utf-8")
        t0 = time.monotonic()
        last: ChatClientError | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self._delay(attempt - 1, last.retry_after if last else None))
            try:
                raw = self._post(data)
            except ChatClientError as e:
                e.attempts = attempt + 1
                last = e
                if e.retryable and attempt < self.max_retries:
                    continue
                if e.retryable:
                    raise ChatClientError(f"{e} (gave up after {attempt + 1} attempts)", e.status, True,
                                          attempt + 1) from e
                raise
            return self._result(raw, attempt + 1, time.monotonic() - t0)
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, data: bytes) -> dict:
        req = urllib.request.Request(self.url, data=data, headers=self._headers(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as e:
            try:
                detail = e.read().decode("utf-8", "replace")[:500]
            except Exception:  # noqa: BLE001
                detail = ""
            err = ChatClientError(f"HTTP {e.code} from {self.url}: {detail or e.reason}", e.code,
                                  e.code in RETRYABLE_STATUS or e.code >= 500)
            err.retry_after = e.headers.get("Retry-After") if e.headers else None
            raise err from None
        except (socket.timeout, TimeoutError) as e:
            raise ChatClientError(f"timeout after {self.timeout_s:g} s from {self.url}", None, True) from e
        except urllib.error.URLError as e:
            retry = True
            if isinstance(e.reason, (socket.timeout, TimeoutError)):
                raise ChatClientError(f"timeout after {self.timeout_s:g} s from {self.url}", None, True) from e
            raise ChatClientError(f"cannot reach {self.url}: {e.reason}", None, retry) from e
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            raise ChatClientError(f"connection error with {self.url}: {type(e).__name__}: {e}", None, True) from e
        try:
            return json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ChatClientError(f"non-JSON response from {self.url}: {payload[:200]!r}", 200, False) from e

    def _result(self, raw: dict, attempts: int, latency: float) -> ChatResult:
        if not isinstance(raw, dict):
            raise ChatClientError(f"unexpected response from {self.url}: {str(raw)[:200]}", 200, False, attempts)
        if raw.get("error"):
            raise ChatClientError(f"server error from {self.url}: {json.dumps(raw['error'])[:300]}", 200, False,
                                  attempts)
        choices = raw.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            raise ChatClientError(f"response without choices from {self.url}: {json.dumps(raw)[:300]}", 200, False,
                                  attempts)
        ch = choices[0]
        msg = ch.get("message") or {}
        content = msg.get("content")
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        lp = None
        lp_obj = ch.get("logprobs")
        if isinstance(lp_obj, dict) and isinstance(lp_obj.get("content"), list):
            try:
                lp = [(str(t["token"]), float(t["logprob"])) for t in lp_obj["content"]]
            except (KeyError, TypeError, ValueError):
                lp = None
        return ChatResult(text=content or "", finish_reason=ch.get("finish_reason"), usage=raw.get("usage") or {},
                          raw=raw, attempts=attempts, latency_s=latency, logprobs=lp)
