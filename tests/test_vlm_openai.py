"""OpenAICritic against real HTTP servers on loopback: a scripted OpenAI-compatible server for the
error paths, and `transformers serve` running the tiny random VLM for the real-server path."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import base64
import json
import math
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cv2
import numpy as np
import pytest

from critic_fixtures import random_frames, tiny_vlm_path
from motionvl.critic import create_critic
from motionvl.critic.base import Rollout
from motionvl.critic.vlm_openai import OpenAICritic
from motionvl.llm.openai_client import ChatClient, ChatClientError, chat_completions_url

GOOD = {
    "descriptors": [
        {"label": "knees_bent", "region": "knees", "value": None, "unit": None, "confidence": 0.8, "note": "bent"},
        {"label": "torso_pitch", "region": "torso", "value": 18, "unit": "deg", "confidence": 0.6, "note": "lean"},
    ],
    "alignment_score": 0.35,
    "suggestions": [{"term": "knee_extension", "direction": "increase", "reason": "task wants straight knees"}],
    "better_than_best": True,
    "unjudged": ["speed"],
}
GOOD_TEXT = json.dumps(GOOD)


class ScriptedOpenAIServer:
    """A real HTTP server (127.0.0.1, ephemeral port) implementing POST /v1/chat/completions.

    Each request consumes the next scripted action:
      ("reply", text[, logprobs])  -> 200 with a chat.completion whose message content is text
      ("status", code[, body[, headers]]) -> that HTTP status
      ("sleep", seconds, text)      -> wait, then reply
      ("close",)                    -> drop the connection without an answer
    Requests (headers and JSON bodies) are recorded in ``requests``.
    """

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code, payload: bytes, headers=None):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": dict(self.headers),
                                           "json": json.loads(body)})
                    action = outer.script.pop(0) if outer.script else ("status", 599, "script exhausted")
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error": "not found"}')
                kind = action[0]
                if kind == "sleep":
                    time.sleep(action[1])
                    action = ("reply", action[2])
                    kind = "reply"
                if kind == "close":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if kind == "status":
                    payload = (action[2] if len(action) > 2 else "boom").encode()
                    return self._send(action[1], payload, action[3] if len(action) > 3 else None)
                text = action[1]
                choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                if len(action) > 2:
                    choice["logprobs"] = {"content": [{"token": t, "logprob": lp} for t, lp in action[2]]}
                resp = {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                        "choices": [choice], "usage": {"prompt_tokens": 100, "completion_tokens": 7,
                                                       "total_tokens": 107}}
                self._send(200, json.dumps(resp).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def critic_for(server, **kw):
    kw.setdefault("backoff", 0.05)
    kw.setdefault("timeout_s", 5.0)
    return OpenAICritic(server.url, "scripted-vlm", **kw)


def decode_data_url(url):
    head, b64 = url.split(",", 1)
    assert head.startswith("data:image/") and head.endswith(";base64")
    img = cv2.imdecode(np.frombuffer(base64.b64decode(b64), np.uint8), cv2.IMREAD_COLOR)
    return head[len("data:"):-len(";base64")], img[:, :, ::-1]


def test_valid_answer_and_request_shape(monkeypatch):
    monkeypatch.setenv("MOTIONVL_OPENAI_API_KEY", "sk-test-123")
    frames, times = random_frames(4, h=48, w=64)
    with ScriptedOpenAIServer([("reply", GOOD_TEXT)]) as srv:
        fb = critic_for(srv, image_format="png").critique(frames, times, "walk forward with straight knees",
                                                          previous_best="walked with bent knees")
    assert fb.valid, fb.error
    assert fb.critic == "openai:scripted-vlm" and fb.better_than_best is True
    assert dict(fb.features) == {"knees_bent": 0.8, "torso_leaning_forward": 0.6}
    assert fb.meta["attempts"] == 1 and fb.meta["attempt_log"][0]["http_attempts"] == 1
    assert fb.meta["attempt_log"][0]["generated_tokens"] == 7

    (req,) = srv.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-test-123"
    body = req["json"]
    assert body["model"] == "scripted-vlm" and body["temperature"] == 0.0 and body["max_tokens"] == 1024
    assert "response_format" not in body and body["stream"] is False
    system, user = body["messages"]
    assert system["role"] == "system" and '"descriptors"' in system["content"]
    images = [p for p in user["content"] if p["type"] == "image_url"]
    texts = "".join(p["text"] for p in user["content"] if p["type"] == "text")
    assert len(images) == 4
    for k, part in enumerate(images):  # lossless PNG round trip of every frame, in order
        mime, img = decode_data_url(part["image_url"]["url"])
        assert mime == "image/png" and np.array_equal(img, frames[k])
    assert "Frame 2 at t=0.20 s, follows frame 1 (+0.10 s)" in texts
    assert "walked with bent knees" in texts and "- knees:" in texts and "- torso:" in texts


@pytest.mark.parametrize("reply, check", [
    ("Sure, here is the analysis:\n```json\n" + GOOD_TEXT + "\n```\nAnything else?",
     lambda fb: "extracted JSON from surrounding text" in fb.meta["repairs"]),
    (GOOD_TEXT[:GOOD_TEXT.index('"unjudged"') + 17],  # truncated inside the last list
     lambda fb: "closed truncated output" in fb.meta["repairs"] and fb.unjudged == ["spe"]),
    (GOOD_TEXT.replace("0.8", '"80%"').replace("0.6", '"medium"'),
     lambda fb: [d.confidence for d in fb.descriptors] == [0.8, 0.5]),
])
def test_sloppy_answers_are_repaired_without_reask(reply, check):
    frames, times = random_frames(2)
    with ScriptedOpenAIServer([("reply", reply)]) as srv:
        fb = critic_for(srv).critique(frames, times, "walk")
    assert fb.valid, fb.error
    assert check(fb) and len(srv.requests) == 1 and fb.meta["attempts"] == 1


def test_garbage_then_valid_reasks_once_with_the_parse_error():
    frames, times = random_frames(3)
    with ScriptedOpenAIServer([("reply", "The robot walks nicely."), ("reply", GOOD_TEXT)]) as srv:
        fb = critic_for(srv).critique(frames, times, "walk")
    assert fb.valid and fb.meta["attempts"] == 2 and fb.meta["reasked"]
    first, second = (r["json"]["messages"] for r in srv.requests)
    assert second[:2] == first  # same system + user turn (with the same images)
    assert second[2] == {"role": "assistant", "content": "The robot walks nicely."}
    assert second[3]["role"] == "user"
    assert "could not be used: no JSON object found" in second[3]["content"]
    assert "parse_error" in fb.meta["attempt_log"][0]


def test_garbage_twice_gives_invalid_feedback_after_exactly_one_reask():
    frames, times = random_frames(2)
    with ScriptedOpenAIServer([("reply", "\x17 walks wa\ufffdZkn"), ("reply", '{"descriptors": [1, 2'),
                               ("reply", GOOD_TEXT)]) as srv:
        fb = critic_for(srv).critique(frames, times, "walk")
    assert not fb.valid and len(srv.requests) == 2
    assert fb.error.startswith("unusable answer after 2 attempt(s); last parse error:")
    assert fb.raw_text == '{"descriptors": [1, 2' and fb.descriptors == []


@pytest.fixture
def client_sleeps(monkeypatch):
    """The seconds the chat client waits between attempts, in order (it does not really wait): the backoff
    is read from what the client asks for, not from the clock."""
    import motionvl.llm.openai_client as client

    asked = []

    class Clock:
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def sleep(seconds):
            asked.append(seconds)

    monkeypatch.setattr(client, "time", Clock())
    return asked


def test_server_error_then_success_is_retried_with_backoff(client_sleeps):
    frames, times = random_frames(2)
    with ScriptedOpenAIServer([("status", 500, "internal"), ("status", 503, "busy", {"Retry-After": "0.2"}),
                               ("reply", GOOD_TEXT)]) as srv:
        fb = critic_for(srv, backoff=0.05, max_retries=3).critique(frames, times, "walk")
    assert fb.valid and len(srv.requests) == 3
    assert fb.meta["attempts"] == 1 and fb.meta["attempt_log"][0]["http_attempts"] == 3
    assert client_sleeps == pytest.approx([0.05, 0.2])  # 0.05 s backoff, then the server's Retry-After 0.2 s


def test_persistent_server_errors_give_invalid_feedback(client_sleeps):
    frames, times = random_frames(2)
    with ScriptedOpenAIServer([("status", 503, "overloaded")] * 3) as srv:
        fb = critic_for(srv, backoff=0.05, max_retries=2).critique(frames, times, "walk")
    assert not fb.valid and len(srv.requests) == 3  # 1 + 2 retries, no re-ask after a transport failure
    assert "backend error" in fb.error and "HTTP 503" in fb.error and "gave up after 3 attempts" in fb.error
    assert client_sleeps == pytest.approx([0.05, 0.1])  # exponential backoff


def test_client_errors_are_not_retried():
    frames, times = random_frames(2)
    with ScriptedOpenAIServer([("status", 400, '{"error": "bad image"}'), ("reply", GOOD_TEXT)]) as srv:
        fb = critic_for(srv, max_retries=3).critique(frames, times, "walk")
    assert not fb.valid and len(srv.requests) == 1 and "HTTP 400" in fb.error and "bad image" in fb.error


def test_timeout_then_retry_and_timeout_giving_up():
    frames, times = random_frames(2)
    with ScriptedOpenAIServer([("sleep", 1.0, GOOD_TEXT), ("reply", GOOD_TEXT)]) as srv:
        fb = critic_for(srv, timeout_s=0.3, max_retries=1).critique(frames, times, "walk")
    assert fb.valid and fb.meta["attempt_log"][0]["http_attempts"] == 2
    with ScriptedOpenAIServer([("sleep", 1.0, GOOD_TEXT)]) as srv:
        fb = critic_for(srv, timeout_s=0.3, max_retries=0).critique(frames, times, "walk")
    # the valid answer came after the timeout: the critic had given up on it
    assert not fb.valid and "timeout after 0.3 s" in fb.error and fb.raw_text is None


def test_dropped_connection_and_unreachable_server():
    frames, times = random_frames(2)
    with ScriptedOpenAIServer([("close",), ("reply", GOOD_TEXT)]) as srv:
        fb = critic_for(srv, max_retries=1).critique(frames, times, "walk")
    assert fb.valid and len(srv.requests) == 2
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    fb = OpenAICritic(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff=0.01,
                      timeout_s=2).critique(frames, times, "walk")
    assert not fb.valid and "cannot reach" in fb.error and "gave up after 2 attempts" in fb.error


def test_logprobs_are_combined_with_stated_confidence():
    text = '{"descriptors":[{"label":"fell","region":"whole_body","confidence":0.9}],"alignment_score":0.1}'
    toks = [text[i:i + 3] for i in range(0, len(text), 3)]
    at = text.index("fell")
    lps = [math.log(0.25) if (3 * k < at + 4 and 3 * k + 3 > at) else math.log(0.95) for k in range(len(toks))]
    frames, times = random_frames(2)
    with ScriptedOpenAIServer([("reply", text, list(zip(toks, lps)))]) as srv:
        fb = critic_for(srv, request_logprobs=True).critique(frames, times, "walk")
    assert srv.requests[0]["json"]["logprobs"] is True
    assert fb.valid and fb.meta["stated_confidence"] == [0.9]
    assert fb.meta["label_token_prob"][0] == pytest.approx(0.25, rel=1e-3)
    assert fb.descriptors[0].confidence == pytest.approx(math.sqrt(0.9 * 0.25), rel=1e-3)


def test_contact_sheet_jpeg_json_mode_and_env_key(monkeypatch):
    monkeypatch.delenv("MOTIONVL_OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    frames, times = random_frames(6, h=40, w=60)
    with ScriptedOpenAIServer([("reply", GOOD_TEXT)]) as srv:
        c = create_critic("openai:scripted-vlm", base_url=srv.url + "/v1", use_contact_sheet=True,
                          image_format="jpeg", json_mode=True, contact_sheet_cols=3, tile_longest=None)
        fb = c.critique(frames, times, "walk")
    assert fb.valid
    body = srv.requests[0]["json"]
    assert srv.requests[0]["headers"]["Authorization"] == "Bearer sk-env"
    assert body["response_format"] == {"type": "json_object"}
    (img,) = [p for p in body["messages"][1]["content"] if p["type"] == "image_url"]
    mime, sheet = decode_data_url(img["image_url"]["url"])
    assert mime == "image/jpeg" and sheet.shape == (2 * 42 + 2, 3 * 62 + 2, 3)


def test_no_api_key_means_no_auth_header(monkeypatch):
    monkeypatch.delenv("MOTIONVL_OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedOpenAIServer([("reply", "hi")]) as srv:
        res = ChatClient(srv.url, "m").chat([{"role": "user", "content": "hello"}], max_tokens=3)
    assert res.text == "hi" and res.attempts == 1 and "Authorization" not in srv.requests[0]["headers"]
    assert chat_completions_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    with ScriptedOpenAIServer([("status", 200, "not json")]) as srv:
        with pytest.raises(ChatClientError, match="non-JSON"):
            ChatClient(srv.url, "m", max_retries=2).chat([{"role": "user", "content": "x"}])
        assert len(srv.requests) == 1


COMPARISON = json.dumps({"preferred": "second", "confidence": 0.75, "reason": "straighter knees in stance"})


def test_compare_sends_both_rollouts_labelled_and_reads_the_verdict_field():
    first, second = Rollout(*random_frames(3, h=40, w=56, seed=1)), Rollout(*random_frames(2, h=40, w=56, seed=2))
    with ScriptedOpenAIServer([("reply", COMPARISON)]) as srv:
        c = critic_for(srv, image_format="png").compare(first, second, "walk forward with straight knees")
    assert c.valid and c.preferred == "second" and c.confidence == 0.75 and c.reason == "straighter knees in stance"
    assert c.critic == "openai:scripted-vlm" and c.meta["attempts"] == 1 and c.meta["frames_used"] == 5
    system, user = srv.requests[0]["json"]["messages"]
    assert '"preferred"' in system["content"] and '"neither"' in system["content"]
    images = [decode_data_url(p["image_url"]["url"])[1] for p in user["content"] if p["type"] == "image_url"]
    assert [np.array_equal(a, b) for a, b in zip(images, first.frames + second.frames)] == [True] * 5
    texts = "".join(p["text"] for p in user["content"] if p["type"] == "text")
    assert texts.index("First rollout, frame 2 at t=0.20 s") < texts.index("Second rollout, frame 0 at t=0.00 s")


def test_compare_reasks_a_verdict_in_prose_and_gives_up_after_one_reask():
    frames, times = random_frames(2)
    pair = (Rollout(frames, times), Rollout(frames, times))
    # MoVLR's bug: a verdict read from a keyword. Prose is re-asked, never taken as "first".
    with ScriptedOpenAIServer([("reply", "The first rollout is better."), ("reply", COMPARISON)]) as srv:
        c = critic_for(srv).compare(*pair, "walk")
    assert c.valid and c.preferred == "second" and c.meta["reasked"] and len(srv.requests) == 2
    assert srv.requests[1]["json"]["messages"][-2] == {"role": "assistant", "content": "The first rollout is better."}
    with ScriptedOpenAIServer([("reply", '{"preferred": "first one", "confidence": 0.9}'),
                               ("reply", "first"), ("reply", COMPARISON)]) as srv:
        c = critic_for(srv).compare(*pair, "walk")
    assert not c.valid and c.preferred is None and len(srv.requests) == 2 and c.raw_text == "first"
    with ScriptedOpenAIServer([("reply", '{"preferred": "neither", "confidence": 0.6, "reason": "alike"}')]) as srv:
        c = critic_for(srv).compare(*pair, "walk")
    assert c.valid and c.preferred is None and c.confidence == 0.6


# ----------------------------------------------------------------------------- transformers serve

def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def transformers_server(tmp_path_factory):
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        pytest.skip("transformers serve needs fastapi, uvicorn and openai (see requirements-test.txt)")
    model_dir = tiny_vlm_path(tmp_path_factory)
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from transformers.cli.transformers import main; main()", "serve", str(model_dir),
             "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
            stdout=fh, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not come up in 120 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", str(model_dir)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_against_transformers_serve_with_the_tiny_vlm(transformers_server):
    url, model = transformers_server
    critic = OpenAICritic(url, model, max_tokens=12, timeout_s=60, max_retries=1, backoff=0.5)
    frames, times = random_frames(3)
    fb = critic.critique(frames, times, "walk forward")
    # a real server ran the real (random) model on our images: tokens came back, garbage
    # was re-asked once, then the feedback is marked invalid
    assert not fb.valid, fb.raw_text
    assert fb.meta["attempts"] == 2 and critic.requests_made == 2
    assert fb.error.startswith("unusable answer after 2 attempt(s); last parse error")
    for a in fb.meta["attempt_log"]:
        assert a["generated_tokens"] and a["generated_tokens"] > 0 and a["http_attempts"] == 1
        assert a["prompt_tokens"] > 100  # system prompt + image tokens
    assert isinstance(fb.raw_text, str) and fb.raw_text


def test_compare_against_transformers_serve_with_the_tiny_vlm(transformers_server):
    url, model = transformers_server
    critic = OpenAICritic(url, model, max_tokens=12, timeout_s=60, max_retries=1, backoff=0.5, max_frames=2)
    c = critic.compare(Rollout(*random_frames(3, seed=1)), Rollout(*random_frames(3, seed=2)), "walk forward")
    # the real server ran the random model on both rollouts' images: garbage, re-asked once, no verdict
    assert not c.valid and c.preferred is None and c.meta["attempts"] == 2 and critic.requests_made == 2
    assert c.error.startswith("unusable answer after 2 attempt(s); last parse error")
    assert all(a["generated_tokens"] > 0 and a["prompt_tokens"] > 100 for a in c.meta["attempt_log"])
