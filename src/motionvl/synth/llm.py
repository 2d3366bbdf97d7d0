"""Model-backed synthesizers: `openai` (an OpenAI-compatible endpoint) and `transformers` (a local causal LM).

Both share one loop (`ModelSynthesizer`): the context prompt (`context.build_prompt`), K candidates
sampled one after another (each told which edits the earlier ones made, so they differ), and per
candidate up to `max_repairs` repairs: an answer that cannot be parsed, is cut off, fails
RewardSpec or the sandbox, changes r*'s scale, or repeats r* or another candidate goes back to the
model with the exact, bounded reason. An answer longer than `max_answer_chars` is refused before it
is parsed (and stored cut to MAX_STORED_ANSWER_CHARS). Every call's tokens (as the server reports
them when plausible, else estimated), bytes, latency and cost are recorded and charged to the run's
cap. A model that cannot be called (endpoint unreachable after the client's retries with
backoff, a local model that fails to generate) rejects that candidate and the rest of the round
with the reason; it never raises out of `propose`.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import time

from motionvl.llm.usage import estimate_tokens, reported_tokens
from motionvl.rewards.spec import RewardSpec, load_reward_spec, reward_key
from motionvl.synth.api import (RESPONSE_FORMATS, SYNTHESIZER_OPTIONS, Candidate, RewardSynthesizer, SynthesisError,
                                SynthesisRequest, add_usage, bounded, empty_usage, fixed_field_problem, rejected,
                                term_diff)
from motionvl.synth.context import DEFAULT_MAX_PROMPT_CHARS, Prompt, answer_format, build_prompt
from motionvl.synth.parsing import AnswerError, extract_spec
from motionvl.synth.validation import check_spec

ANSWER_CHARS_PER_TOKEN = 16
"""max_answer_chars defaults to this x max_new_tokens: a token is 3-5 characters of JSON or code, so an honest answer
never comes near it."""
MAX_STORED_ANSWER_CHARS = 4000
"""An answer refused for its size is stored cut to this many characters."""


class ModelCallError(RuntimeError):
    """The model could not be asked (transport or server failure), as opposed to a bad answer."""


@dataclasses.dataclass
class Completion:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cost: float = 0.0
    tokens_estimated: bool = False
    """The server reported no usable usage (missing, negative, absurd): counts are estimated at 4 characters per token."""
    bytes_sent: int = 0
    bytes_received: int = 0

    def usage(self) -> dict:
        return {"prompt_tokens": int(self.prompt_tokens), "completion_tokens": int(self.completion_tokens),
                "latency_s": round(float(self.latency_s), 6), "cost": float(self.cost), "calls": 1,
                "bytes_sent": int(self.bytes_sent), "bytes_received": int(self.bytes_received)}


def repair_text(rejection: str) -> str:
    return (f"Your answer was rejected:\n{rejection}\n"
            "Fix exactly these problems and answer again with the complete, corrected JSON object only.")


def _edit_line(edits: list[dict]) -> str:
    parts = []
    for e in edits:
        if e["change"] == "weight":
            parts.append(f"{e['term']} weight {e['old']}->{e['new']}")
        elif e["change"] == "added":
            parts.append(f"added {e['term']}")
        elif e["change"] == "removed":
            parts.append(f"removed {e['term']}")
        elif e["change"] == "params":
            parts.append(f"{e['term']} params {json.dumps(e['new'])}")
        else:
            parts.append(f"{e['change']} of {e['term']}")
    return ", ".join(parts) or "no change"


class ModelSynthesizer(RewardSynthesizer):
    """The propose/repair loop over a model; subclasses implement `_complete`."""

    offline = False

    def __init__(self, *, max_repairs: int = SYNTHESIZER_OPTIONS.max_repairs,
                 max_new_tokens: int = SYNTHESIZER_OPTIONS.max_new_tokens,
                 max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS, start: RewardSpec | str | None = None, robot=None,
                 max_calls: int | None = None, max_tokens: int | None = None, max_bytes: int | None = None,
                 max_answer_chars: int | None = None):
        super().__init__(max_calls=max_calls, max_tokens=max_tokens, max_bytes=max_bytes)
        if isinstance(max_repairs, bool) or not isinstance(max_repairs, int) or not 0 <= max_repairs <= 10:
            raise SynthesisError(f"max_repairs must be an integer within 0..10, got {max_repairs!r}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 16:
            raise SynthesisError(f"max_new_tokens must be an integer >= 16, got {max_new_tokens!r}")
        self.max_repairs = max_repairs
        self.max_new_tokens = max_new_tokens
        self.max_answer_chars = int(max_answer_chars or ANSWER_CHARS_PER_TOKEN * max_new_tokens)
        self.max_prompt_chars = int(max_prompt_chars)
        self.start = start if isinstance(start, RewardSpec) else load_reward_spec(start)
        self.robot = robot

    @abc.abstractmethod
    def _complete(self, messages: list[dict], *, temperature: float, seed: int) -> Completion:
        """One chat completion; ModelCallError when the model cannot be asked."""

    def _propose(self, request: SynthesisRequest) -> list[Candidate]:
        prompt = build_prompt(request, robot=self.robot, max_prompt_chars=self.max_prompt_chars, start=self.start)
        parent = request.parent or self.start
        out: list[Candidate] = []
        failure: str | None = None
        for k in range(request.num_candidates):
            if failure is not None:
                out.append(rejected(f"not attempted: {failure}", prompt=prompt.text))
                continue
            candidate, failure = self._candidate(request, prompt, parent, k, out)
            out.append(candidate)
        return out

    def _candidate(self, request: SynthesisRequest, prompt: Prompt, parent: RewardSpec, k: int,
                   earlier: list[Candidate]) -> tuple[Candidate, str | None]:
        messages = prompt.messages()
        made = [(j, c) for j, c in enumerate(earlier) if c.ok]
        if made:
            messages[-1] = {"role": "user", "content": messages[-1]["content"] + "\n\nCandidates already proposed in "
                            "this round changed: " + "; ".join(f"#{j}: {_edit_line(c.edits)}" for j, c in made)
                            + ". Propose a different edit."}
        first_prompt = prompt.text if not made else f"[system]\n{messages[0]['content']}\n\n[user]\n{messages[1]['content']}"
        usage, exchanges = empty_usage(), []
        response, rejection = "", "no attempt"
        seed = (request.seed * 1_000_003 + request.iteration * 1_009 + k) % (2**31)
        for attempt in range(1 + self.max_repairs):
            cap = self.budget.exhausted()
            if cap:
                return rejected(cap + (f" (last rejection: {rejection})" if exchanges else ""), prompt=first_prompt,
                                response=response, attempts=attempt, usage=usage, exchanges=exchanges), None
            try:
                completion = self._complete(messages, temperature=request.temperature, seed=seed + attempt)
            except ModelCallError as exc:
                reason = f"model call failed: {bounded(exc, 600)}"
                return rejected(reason, prompt=first_prompt, response=response, attempts=attempt, usage=usage,
                                exchanges=exchanges), reason
            call = completion.usage()
            self.budget.charge(call)
            add_usage(usage, call)
            response = completion.text
            if len(response) > self.max_answer_chars:
                spec, rationale = None, ""
                rejection = (f"the answer is {len(response)} characters long, more than {self.max_answer_chars} "
                             f"({ANSWER_CHARS_PER_TOKEN} x max_new_tokens {self.max_new_tokens}): it was not read; "
                             "answer with the JSON object only")
                response = bounded(response, MAX_STORED_ANSWER_CHARS)
            else:
                spec, rationale, rejection = self._read(completion, parent, earlier, request, k)
            exchanges.append({"response": response, "finish_reason": completion.finish_reason, "rejection": rejection,
                              "usage": call, "tokens_estimated": completion.tokens_estimated})
            if spec is not None:
                return Candidate(spec=spec, ok=True, rejection=None, prompt=first_prompt, response=response,
                                 attempts=attempt + 1, usage=usage, edits=term_diff(parent, spec), rationale=rationale,
                                 exchanges=exchanges), None
            messages = messages + [{"role": "assistant", "content": response},
                                   {"role": "user", "content": repair_text(rejection)}]
        return rejected(f"{rejection} (still refused after {1 + self.max_repairs} attempts)", prompt=first_prompt,
                        response=response, attempts=1 + self.max_repairs, usage=usage, exchanges=exchanges), None

    def _read(self, completion: Completion, parent: RewardSpec, earlier: list[Candidate], request: SynthesisRequest,
              k: int) -> tuple[RewardSpec | None, str, str | None]:
        """(spec, rationale, None) for a usable answer, else (None, rationale, rejection)."""
        try:
            raw, rationale = extract_spec(completion.text, truncated=completion.finish_reason == "length")
        except AnswerError as exc:
            return None, "", str(exc)
        raw.setdefault("name", f"{parent.name or 'reward'}_i{request.iteration}_k{k}"[:80])
        raw.setdefault("description", parent.description)
        raw.setdefault("scale", parent.scale)
        if parent.only_positive:
            raw.setdefault("only_positive", True)
        fixed = fixed_field_problem(parent, raw)
        if fixed:
            return None, rationale, fixed
        spec, rejection = check_spec(raw, where=f"candidate {k}", robot=self.robot, environment=request.environment)
        if spec is None:
            return None, rationale, rejection
        mine = reward_key(spec)
        if mine == reward_key(parent):
            return None, rationale, "the spec is identical to r*'s terms: change at least one weight, parameter or term"
        for j, c in enumerate(earlier):
            if c.ok and mine == reward_key(c.spec):
                return None, rationale, f"the spec repeats candidate #{j} of this round: propose a different edit"
        for t in request.tried:
            if mine == reward_key(t):
                return None, rationale, (f"the spec repeats {t.get('id', 'an earlier candidate')}, tried before "
                                         f"({t.get('outcome', '?')}): propose a different edit")
        return spec, rationale, None


def timeouts(timeout_s: float | None = None, connect_timeout_s: float | None = None,
             read_timeout_s: float | None = None) -> dict:
    """ChatClient's timeout options from what was given (timeout_s: the older name of read_timeout_s)."""
    out = {}
    if connect_timeout_s is not None:
        out["connect_timeout_s"] = float(connect_timeout_s)
    read = read_timeout_s if read_timeout_s is not None else timeout_s
    if read is not None:
        out["read_timeout_s"] = float(read)
    return out


class OpenAISynthesizer(ModelSynthesizer):
    """Proposals from a model behind an OpenAI-compatible /v1/chat/completions endpoint.

    response_format: "auto" asks for JSON-schema output and, when the server refuses the request (HTTP
    400/422), asks again without it and parses the text for the rest of the run; a refusal naming "seed"
    drops the sampling seed (send_seed) the same way. "json_schema", "json_object" or "none" fix the
    format (a refusal is then the call's failure).
    Prices (per million tokens) turn the reported usage into a cost.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float | None = None,
                 connect_timeout_s: float | None = None, read_timeout_s: float | None = None,
                 max_retries: int = SYNTHESIZER_OPTIONS.max_retries, backoff_s: float = 1.0,
                 backoff_max_s: float = 30.0, response_format: str = SYNTHESIZER_OPTIONS.response_format,
                 send_seed: bool = True, price_prompt_per_mtok: float = 0.0,
                 price_completion_per_mtok: float = 0.0, extra_body: dict | None = None, **common):
        super().__init__(**common)
        from motionvl.llm.openai_client import ChatClient

        if response_format not in RESPONSE_FORMATS:
            raise SynthesisError(f"response_format must be one of {list(RESPONSE_FORMATS)}, got {response_format!r}")
        try:
            self.client = ChatClient(base_url, model, api_key=api_key, max_retries=max_retries, backoff_s=backoff_s,
                                     backoff_max_s=backoff_max_s, **timeouts(timeout_s, connect_timeout_s,
                                                                             read_timeout_s))
        except ValueError as exc:
            raise SynthesisError(f"openai synthesizer: {exc}") from None
        self.model = model
        self.name = f"openai:{model}"
        self.response_format = response_format
        self._format_refused = False
        self.send_seed = bool(send_seed)
        self.prices = (float(price_prompt_per_mtok), float(price_completion_per_mtok))
        self.extra_body = dict(extra_body or {})

    def _format(self) -> dict | None:
        if self.response_format == "none" or self._format_refused:
            return None
        if self.response_format == "json_object":
            return {"type": "json_object"}
        return answer_format()

    def _complete(self, messages: list[dict], *, temperature: float, seed: int) -> Completion:
        from motionvl.llm.openai_client import ChatClientError

        while True:
            fmt = self._format()
            extra = dict(self.extra_body)
            if self.send_seed:
                extra.setdefault("seed", seed)
            try:
                result = self.client.chat(messages, max_tokens=self.max_new_tokens, temperature=temperature,
                                          response_format=fmt, **extra)
                break
            except ChatClientError as exc:
                text = str(exc).lower()
                if exc.status in (400, 422) and self.response_format == "auto":
                    # an optional request field the server does not take: drop it for the rest of the run
                    if fmt is not None and ("seed" not in text or "response_format" in text):
                        self._format_refused = True
                        continue
                    if self.send_seed and "seed" in text and "seed" not in self.extra_body:
                        self.send_seed = False
                        continue
                raise ModelCallError(str(exc)) from None
        usage = result.usage if isinstance(result.usage, dict) else {}
        prompt_tokens, guessed_prompt = reported_tokens(
            usage.get("prompt_tokens"), estimate_tokens(sum(len(str(m.get("content", ""))) for m in messages)))
        completion_tokens, guessed_completion = reported_tokens(usage.get("completion_tokens"),
                                                                estimate_tokens(len(result.text)))
        cost = (prompt_tokens * self.prices[0] + completion_tokens * self.prices[1]) / 1e6
        return Completion(result.text, result.finish_reason, prompt_tokens, completion_tokens, result.latency_s,
                          cost, guessed_prompt or guessed_completion, result.bytes_sent, result.bytes_received)

    def describe(self) -> dict:
        return {**super().describe(), "endpoint": self.client.url, "model": self.model,
                "response_format": "none (refused by the server)" if self._format_refused else self.response_format,
                "seed": self.send_seed}


class TransformersSynthesizer(ModelSynthesizer):
    """Proposals from a local causal LM directory (never downloaded), generated with transformers."""

    def __init__(self, model_dir: str, *, device: str = "auto", dtype: str | None = None,
                 trust_remote_code: bool = False, **common):
        super().__init__(**common)
        from motionvl.llm.hf_generate import HFGenerator

        try:
            self.generator = HFGenerator(model_dir, device=device, dtype=dtype, kind="text",
                                         trust_remote_code=trust_remote_code)
        except FileNotFoundError as exc:
            raise SynthesisError(f"transformers synthesizer: {exc}") from None
        except (OSError, ValueError, ImportError, KeyError) as exc:
            raise SynthesisError(f"transformers synthesizer: cannot load a causal LM from {model_dir!r}: "
                                 f"{type(exc).__name__}: {bounded(exc, 400)}") from None
        self.name = f"transformers:{self.generator.name}"

    def _complete(self, messages: list[dict], *, temperature: float, seed: int) -> Completion:
        import torch

        torch.manual_seed(seed)
        t0 = time.monotonic()
        try:
            out = self.generator.generate(messages, max_new_tokens=self.max_new_tokens, temperature=temperature)
        except Exception as exc:  # noqa: BLE001 - a model that cannot generate fails this round, not the caller
            raise ModelCallError(f"local generation failed: {type(exc).__name__}: {bounded(exc, 400)}") from None
        return Completion(out.text, out.finish_reason, out.prompt_tokens, out.n_tokens, time.monotonic() - t0)

    def describe(self) -> dict:
        return {**super().describe(), "model_dir": str(self.generator.model_dir), "device": self.generator.device}
