"""Test fixtures for the reward synthesizer's model backends.

``RecordedAnswerServer``: a real HTTP server on 127.0.0.1 (ephemeral port) speaking the OpenAI
chat-completions protocol that serves recorded answers, one per request, in order: it is a fixture
standing in for a model server, not a model. ``build_tiny_causal_lm``: a randomly initialised
two-layer Llama with a byte-level BPE tokenizer trained here and a chat template, saved with
``save_pretrained`` (nothing is downloaded); its answers are garbage.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def answer(text: str, finish_reason: str = "stop", usage: dict | None = None) -> tuple:
    """A recorded answer: the model said `text`."""
    return ("answer", text, finish_reason, {"prompt_tokens": 1200, "completion_tokens": 80} if usage is None else usage)


def status(code: int, body: str = "server error") -> tuple:
    """A recorded HTTP failure."""
    return ("status", code, body)


class RecordedAnswerServer:
    """Serves the recorded answers in order (an exhausted recording answers HTTP 599); keeps each request's JSON."""

    def __init__(self, recording: list[tuple]):
        self.recording = list(recording)
        self.requests: list[dict] = []
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with lock:
                    server.requests.append(body)
                    item = server.recording.pop(0) if server.recording else status(599, "recording exhausted")
                if item[0] == "status":
                    code, payload = item[1], item[2].encode()
                else:
                    code = 200
                    payload = json.dumps({"id": "rec", "object": "chat.completion", "model": body.get("model"),
                                          "choices": [{"index": 0, "finish_reason": item[2],
                                                       "message": {"role": "assistant", "content": item[1]}}],
                                          "usage": item[3]}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "RecordedAnswerServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]


def build_tiny_causal_lm(path: str | Path, corpus: list[str], seed: int = 0) -> Path:
    """Write a tiny random Llama causal LM (model + tokenizer trained on `corpus` + chat template) to `path`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=2048, special_tokens=SPECIAL_TOKENS,
                                                        show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                        pad_token="<pad>")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16384,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, min_new_tokens=4)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
