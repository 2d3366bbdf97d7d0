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

import numpy as np

from ..llm.hf_generate import GenerationOutput, HFGenerator
from .base import Reply, critique_with_reask
from .prompts import FRAME_PERIOD_S, CritiquePrompt, build_prompt
from .schema import MotionFeedback


class TransformersVLMCritic:
    """``critique(frames, times, task, previous_best=None) -> MotionFeedback`` with a local VLM.

    Args:
        model_dir: local model directory (config.json, weights, processor files).
        device: "auto" (cuda when torch sees a GPU, else cpu), "cpu", "cuda:1", ...
        max_new_tokens: generation budget per answer.
        use_contact_sheet: send one grid image instead of one image per frame.
        temperature: 0 = greedy.
        frame_period_s / max_frames: frame sampling (paper: every 0.1 s), capped in count.
        image_longest: downscale frames so their longest side is at most this (None = as given).
        contact_sheet_cols / tile_longest: contact-sheet layout.
        dtype: None = float32 on CPU, the checkpoint's dtype on GPU.
        token_confidence_weight: weight of the token probability against the stated confidence
            (0 = stated only, 1 = token probability only).
        reask: re-ask once with the parse error when the answer is unusable.
        system_role: put the instructions in a system turn; None = try, and fold them into the
            user turn if the chat template rejects a system role.
        name: critic name in feedbacks (default "transformers:<directory name>").
    """

    def __init__(self, model_dir: str | Path, device: str = "auto", max_new_tokens: int = 512,
                 use_contact_sheet: bool = False, temperature: float = 0.0,
                 frame_period_s: float = FRAME_PERIOD_S, max_frames: int | None = 16,
                 image_longest: int | None = None, contact_sheet_cols: int = 4, tile_longest: int | None = 256,
                 dtype: Any = None, token_confidence_weight: float = 0.5, reask: bool = True,
                 system_role: bool | None = None, name: str | None = None, trust_remote_code: bool = False):
        self.generator = HFGenerator(model_dir, device=device, dtype=dtype, kind="vision",
                                     trust_remote_code=trust_remote_code)
        self.name = name or f"transformers:{self.generator.name}"
        self.max_new_tokens = int(max_new_tokens)
        self.use_contact_sheet = bool(use_contact_sheet)
        self.temperature = float(temperature)
        self.frame_period_s = float(frame_period_s)
        self.max_frames = max_frames
        self.image_longest = image_longest
        self.contact_sheet_cols = int(contact_sheet_cols)
        self.tile_longest = tile_longest
        self.token_confidence_weight = float(token_confidence_weight)
        self.reask = bool(reask)
        self.system_role = system_role
        self.generate_calls = 0
        """Model.generate calls made by this critic (all critiques)."""

    @property
    def device(self) -> str:
        return self.generator.device

    def build_prompt(self, frames, times, task: str, previous_best: str | None = None) -> CritiquePrompt:
        kw: dict[str, Any] = dict(period_s=self.frame_period_s, max_frames=self.max_frames)
        if self.use_contact_sheet:
            kw.update(cols=self.contact_sheet_cols, tile_longest=self.tile_longest)
        else:
            kw.update(image_longest=self.image_longest)
        return build_prompt(frames, times, task, previous_best, use_contact_sheet=self.use_contact_sheet, **kw)

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
        return Reply(text=out.text, token_spans=out.token_spans, token_probs=out.token_probs,
                     meta={"generated_tokens": out.n_tokens, "prompt_tokens": out.prompt_tokens,
                           "finish_reason": out.finish_reason, "latency_s": round(out.latency_s, 4)})

    def critique(self, frames: list[np.ndarray], times: list[float], task: str,
                 previous_best: str | None = None, **kwargs: Any) -> MotionFeedback:
        """Describe the rollout; never raises on model output (``valid=False`` instead).

        Bad inputs (no frames, frames/times length mismatch, non-RGB arrays) raise ValueError.
        """
        prompt = self.build_prompt(frames, times, task, previous_best)
        fb = critique_with_reask(lambda fu: self._ask(prompt, fu), self.name, task, reask=self.reask,
                                 token_confidence_weight=self.token_confidence_weight)
        fb.meta.update(frames_used=len(prompt.times), frame_times=list(prompt.times),
                       contact_sheet=self.use_contact_sheet, device=self.device)
        return fb
