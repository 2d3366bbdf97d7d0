"""A small OpenAI-compatible chat client (``POST {base_url}/v1/chat/completions``), standard library only.

Why not the ``openai`` package: the critic and the reward synthesizer only need one endpoint,
and the standard library keeps the core free of an HTTP stack whose major versions move fast; the
request and response shapes are the documented Chat Completions ones, so any compatible server works
(vLLM, Ollama, llama.cpp server, ``transformers serve``, a cloud API).

Behaviour:

* ``base_url`` may be given with or without the ``/v1`` suffix;
* the API key comes from the argument, else ``MOTIONVL_OPENAI_API_KEY``, else ``OPENAI_API_KEY``;
  without one no Authorization header is sent (local servers);
* two timeouts per request: ``connect_timeout_s`` to open the connection, ``read_timeout_s`` for the
  whole answer from the moment the request is sent (a server that trickles bytes still ends there);
  while a request waits longer than ``wait_log_s`` a line says so (and again every ``wait_log_s``);
* an answer larger than ``max_response_bytes`` is refused unread beyond that (a model cannot fill
  memory or the ledger);
* up to ``max_retries`` retries with exponential backoff (``backoff_s * 2**k``, capped at
  ``backoff_max_s``; a numeric ``Retry-After`` header is honoured within the cap) on connection
  errors, timeouts, HTTP 408/409/429 and 5xx; other HTTP errors raise at once;
* every failure is a :class:`ChatClientError` carrying the status (if any) and whether it was
  retryable; every result counts the bytes sent and received over all attempts.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import logging
import math
import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, Callable

import numpy as np

API_KEY_ENV_VARS = ("MOTIONVL_OPENAI_API_KEY", "OPENAI_API_KEY")
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
DEFAULT_CONNECT_TIMEOUT_S = 10.0
"""A local or cloud endpoint accepts a connection within a second or two; ten covers a loaded machine."""
DEFAULT_READ_TIMEOUT_S = 300.0
"""A 2048-token answer of a large model on a slow GPU takes a few minutes; a hung server ends there."""
DEFAULT_WAIT_LOG_S = 10.0
DEFAULT_MAX_RESPONSE_BYTES = 8_000_000
"""Far above any answer of a few thousand tokens (with log-probabilities), far below what hurts."""

_log = logging.getLogger("motionvl.llm")


class ChatClientError(RuntimeError):
    def __init__(self, message: str, status: int | None = None, retryable: bool = False, attempts: int = 1):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.attempts = attempts
        self.retry_after: str | None = None
        self.bytes_received = 0


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
    bytes_sent: int = 0
    """Request bytes sent over all attempts."""
    bytes_received: int = 0
    """Response bytes received over all attempts."""


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
    """Synchronous client for one model behind an OpenAI-compatible endpoint (see the module docstring).

    ``timeout_s`` is the older name of ``read_timeout_s``. ``log(text)`` gets the waiting lines (default: the
    ``motionvl.llm`` logger at WARNING, which reaches stderr without any logging set up)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float | None = None,
                 max_retries: int = 3, backoff_s: float = 1.0, backoff_max_s: float = 30.0,
                 extra_headers: dict[str, str] | None = None, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 read_timeout_s: float | None = None, wait_log_s: float = DEFAULT_WAIT_LOG_S,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, log: Callable[[str], None] | None = None):
        if not base_url:
            raise ValueError("base_url is required (e.g. http://127.0.0.1:8000/v1)")
        if not model:
            raise ValueError("model is required")
        self.url = chat_completions_url(base_url)
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        self._parts = parts
        self.model = model
        self.api_key = resolve_api_key(api_key)
        read = read_timeout_s if read_timeout_s is not None else (timeout_s if timeout_s is not None
                                                                  else DEFAULT_READ_TIMEOUT_S)
        for name, value in (("connect_timeout_s", connect_timeout_s), ("read_timeout_s", read)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        self.connect_timeout_s = float(connect_timeout_s)
        self.read_timeout_s = float(read)
        self.wait_log_s = float(wait_log_s)
        self.max_response_bytes = int(max_response_bytes)
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.extra_headers = dict(extra_headers or {})
        self.log = log or _log.warning

    @property
    def timeout_s(self) -> float:
        """The read timeout (the older name)."""
        return self.read_timeout_s

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
        received = 0
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self._delay(attempt - 1, last.retry_after if last else None))
            try:
                raw, size = self._post(data)
                received += size
            except ChatClientError as e:
                received += e.bytes_received
                e.attempts = attempt + 1
                last = e
                if e.retryable and attempt < self.max_retries:
                    continue
                if e.retryable:
                    raise ChatClientError(f"{e} (gave up after {attempt + 1} attempts)", e.status, True,
                                          attempt + 1) from e
                raise
            result = self._result(raw, attempt + 1, time.monotonic() - t0)
            result.bytes_sent, result.bytes_received = len(data) * (attempt + 1), received
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, data: bytes) -> tuple[dict, int]:
        """One HTTP attempt: (the decoded JSON answer, bytes received)."""
        done = threading.Event()
        if self.wait_log_s > 0:
            threading.Thread(target=self._log_while_waiting, args=(done, time.monotonic()), daemon=True,
                             name="chat-wait").start()
        try:
            return self._exchange(data)
        finally:
            done.set()

    def _log_while_waiting(self, done: threading.Event, t0: float) -> None:
        while not done.wait(self.wait_log_s):
            self.log(f"still waiting for {self.model} at {self.url}: {time.monotonic() - t0:.0f} s of its "
                     f"{self.read_timeout_s:g} s read timeout")

    def _exchange(self, data: bytes) -> tuple[dict, int]:
        p = self._parts
        cls = http.client.HTTPSConnection if p.scheme == "https" else http.client.HTTPConnection
        path = (p.path or "/") + (f"?{p.query}" if p.query else "")
        proxy = urllib.request.getproxies().get(p.scheme)
        if proxy and not urllib.request.proxy_bypass(p.hostname):  # HTTP(S)_PROXY as urllib would use it
            via = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            if p.scheme == "https":
                conn = cls(via.hostname, via.port, timeout=self.connect_timeout_s)
                conn.set_tunnel(p.hostname, p.port)
            else:
                conn = http.client.HTTPConnection(via.hostname, via.port, timeout=self.connect_timeout_s)
                path = self.url
        else:
            conn = cls(p.hostname, p.port, timeout=self.connect_timeout_s)
        try:
            try:
                conn.connect()
            except (socket.timeout, TimeoutError) as e:
                raise ChatClientError(f"no connection to {self.url} within the connect timeout of "
                                      f"{self.connect_timeout_s:g} s", None, True) from e
            except OSError as e:
                raise ChatClientError(f"cannot reach {self.url}: {e}", None, True) from e
            deadline = time.monotonic() + self.read_timeout_s
            sock = conn.sock  # the connection lets go of it once a closing answer is read
            try:
                sock.settimeout(self.read_timeout_s)
                conn.request("POST", path, body=data, headers=self._headers())
                resp = conn.getresponse()
                payload = self._read(sock, resp, deadline)
            except (socket.timeout, TimeoutError) as e:
                raise ChatClientError(f"timeout after {self.read_timeout_s:g} s from {self.url} (read timeout)",
                                      None, True) from e
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                raise ChatClientError(f"connection error with {self.url}: {type(e).__name__}: {e}", None, True) from e
        finally:
            conn.close()
        if resp.status >= 400:
            detail = payload[:500].decode("utf-8", "replace")
            err = ChatClientError(f"HTTP {resp.status} from {self.url}: {detail or resp.reason}", resp.status,
                                  resp.status in RETRYABLE_STATUS or resp.status >= 500)
            err.retry_after = resp.getheader("Retry-After")
            err.bytes_received = len(payload)
            raise err
        try:
            return json.loads(payload.decode("utf-8")), len(payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ChatClientError(f"non-JSON response from {self.url}: {payload[:200]!r}", 200, False) from e

    def _read(self, sock, resp, deadline: float) -> bytes:
        """The response body within the read deadline and max_response_bytes."""
        chunks, size = [], 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("read deadline")
            if resp.isclosed():  # the whole answer is in: http.client has let go of the socket
                return b"".join(chunks)
            try:
                sock.settimeout(left)
            except OSError:  # closed under a buffered answer: what is left comes from the buffer
                pass
            chunk = resp.read(min(65536, self.max_response_bytes + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_response_bytes:
                err = ChatClientError(f"the answer from {self.url} is larger than {self.max_response_bytes} bytes: "
                                      "refused unread", 200, False)
                err.bytes_received = size
                raise err

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
