"""VLM critic on a local image-text-to-text model directory (transformers).

Loads the directory with AutoProcessor + AutoModelForImageTextToText (``local_files_only=True``;
models are never downloaded), renders the region-aware prompt with the directory's chat template
(frames as images, or one contact sheet), generates greedily by default, parses the JSON answer
(re-asking once with the parse error), and combines each descriptor's stated confidence with the
probability the model gave the tokens of its label (see
:func:`motionvl.critic.parsing.apply_token_confidence`).

Models known to fit this interface (if present locally): Qwen2-VL/Qwen2.5-VL, SmolVLM/Idefics3,
LLaVA(-OneVision), PaliGemma 2 mix, Gemma 3. Small ones are slow but workable on CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..llm.hf_generate import GenerationOutput, HFGenerator
from .base import Reply
from .prompts import CritiquePrompt
from .vlm import VLMCritic


class TransformersVLMCritic(VLMCritic):
    """``critique`` / ``compare`` (see :class:`~motionvl.critic.vlm.VLMCritic`) with a local VLM.

    Args:
        model_dir: local model directory (config.json, weights, processor files).
        device: "auto" (cuda when torch sees a GPU, else cpu), "cpu", "cuda:1", ...
        max_new_tokens: generation budget per answer.
        dtype: None = float32 on CPU, the checkpoint's dtype on GPU.
        system_role: put the instructions in a system turn; None = try, and fold them into the
            user turn if the chat template rejects a system role.
        name: critic name in answers (default "transformers:<directory name>").
        trust_remote_code: let transformers run the model directory's own code.
        Other keyword arguments: :class:`~motionvl.critic.vlm.VLMCritic` (frames, contact sheet,
        temperature, token confidence, re-ask).
    """

    def __init__(self, model_dir: str | Path, device: str = "auto", max_new_tokens: int = 512, dtype: Any = None,
                 system_role: bool | None = None, name: str | None = None, trust_remote_code: bool = False,
                 **options: Any):
        self.generator = HFGenerator(model_dir, device=device, dtype=dtype, kind="vision",
                                     trust_remote_code=trust_remote_code)
        super().__init__(name or f"transformers:{self.generator.name}", **options)
        self.max_new_tokens = int(max_new_tokens)
        self.system_role = system_role
        self.generate_calls = 0
        """Model.generate calls made by this critic (all critiques and comparisons)."""

    @property
    def device(self) -> str:
        return self.generator.device

    def messages(self, prompt: CritiquePrompt, followups: list[tuple[str, str]] = (),
                 system_role: bool = True) -> list[dict]:
        """Chat messages in the transformers format for ``prompt`` plus follow-up turns."""
        parts: list[dict] = []
        for p in prompt.parts:
            if p.kind == "image":
                parts.append({"type": "image", "image": p.image})
            else:
                parts.append({"type": "text", "text": p.text})
        if system_role:
            msgs = [{"role": "system", "content": [{"type": "text", "text": prompt.system}]},
                    {"role": "user", "content": parts}]
        else:
            msgs = [{"role": "user", "content": [{"type": "text", "text": prompt.system + "\n\n"}, *parts]}]
        for role, text in followups:
            msgs.append({"role": role, "content": [{"type": "text", "text": text}]})
        return msgs

    def _generate(self, messages: list[dict]) -> GenerationOutput:
        """One model call (a subclass hook: tests count calls here)."""
        self.generate_calls += 1
        return self.generator.generate(messages, max_new_tokens=self.max_new_tokens, temperature=self.temperature)

    def _ask(self, prompt: CritiquePrompt, followups: list[tuple[str, str]]) -> Reply:
        if self.system_role is None:
            try:
                out = self._generate(self.messages(prompt, followups, system_role=True))
                self.system_role = True
            except Exception as e:  # noqa: BLE001 - the template may reject a system turn
                if "system" not in str(e).lower():
                    raise
                self.system_role = False
                out = self._generate(self.messages(prompt, followups, system_role=False))
        else:
            out = self._generate(self.messages(prompt, followups, system_role=self.system_role))
        usage = {"calls": 1, "prompt_tokens": int(out.prompt_tokens or 0), "completion_tokens": int(out.n_tokens or 0),
                 "images": len(prompt.images)}
        return Reply(text=out.text, token_spans=out.token_spans, token_probs=out.token_probs,
                     meta={"generated_tokens": out.n_tokens, "prompt_tokens": out.prompt_tokens, "usage": usage,
                           "finish_reason": out.finish_reason, "latency_s": round(out.latency_s, 4)})

    def _describe(self) -> dict:
        return {"device": self.device}
