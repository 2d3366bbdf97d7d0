"""What the model-backed critics share: frame sampling, prompt building and the re-ask protocol.

A backend (:class:`~motionvl.critic.vlm_transformers.TransformersVLMCritic`,
:class:`~motionvl.critic.vlm_openai.OpenAICritic`) only turns a :class:`CritiquePrompt` plus
follow-up turns into its own chat messages and returns the model's :class:`Reply` (`_ask`) with
what the call used in ``meta["usage"]`` (motionvl.llm.usage: calls, tokens, images, bytes); it
adds what it wants recorded to every answer's meta (`_describe`). Every call is metered here and
charged to the critic's `budget` (the run's caps); a call the budget no longer allows is not made:
the answer is invalid with a "cap reached" error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from motionvl.llm.usage import UsageBudget

from .base import Reply, Rollout, compare_with_reask, critique_with_reask
from .prompts import (FRAME_PERIOD_S, IMAGE_LONGEST, WINDOW_S, WINDOW_START_S, CritiquePrompt, FrameOptions,
                      build_comparison_prompt, build_prompt, previous_best_text)

ANSWER_CHARS = 16_384
"""An answer longer than this is not parsed (a complete critique is 1-3k characters)."""
from .schema import Comparison, MotionFeedback


class VLMCritic:
    """``critique`` and ``compare`` for a vision-language model behind `_ask` (a subclass supplies it).

    Args:
        name: critic name in the answers.
        temperature: sampling temperature, 0 = greedy.
        use_contact_sheet: send one timestamped grid image per rollout instead of one image per frame.
        frame_period_s / max_frames / window_s / window_start_s: frame sampling (paper: every 0.1 s) over a
            window of two gait cycles, capped in count per rollout (prompts.FrameOptions).
        image_longest: downscale frames so their longest side is at most this (None = as given).
        max_calls / max_tokens / max_images / max_bytes: the run's caps on this critic's model use (None: none).
        max_answer_chars: a longer answer is not parsed (re-asked once, shorter).
        contact_sheet_cols / tile_longest: contact-sheet layout.
        token_confidence_weight: weight of the token probability against the stated confidence
            (0 = stated only, 1 = token probability only), where the backend returns probabilities.
        reask: re-ask once with the parse error when the answer is unusable.
    """

    def __init__(self, name: str, *, temperature: float = 0.0, use_contact_sheet: bool = False,
                 frame_period_s: float = FRAME_PERIOD_S, max_frames: int | None = 16,
                 image_longest: int | None = IMAGE_LONGEST, window_s: float | None = WINDOW_S,
                 window_start_s: float = WINDOW_START_S, contact_sheet_cols: int = 4, tile_longest: int | None = 256,
                 token_confidence_weight: float = 0.5, reask: bool = True, max_calls: int | None = None,
                 max_tokens: int | None = None, max_images: int | None = None, max_bytes: int | None = None,
                 max_answer_chars: int = ANSWER_CHARS):
        self.name = name
        self.temperature = float(temperature)
        self.frames = FrameOptions(period_s=float(frame_period_s), max_frames=max_frames,
                                   contact_sheet=bool(use_contact_sheet), image_longest=image_longest,
                                   sheet_cols=int(contact_sheet_cols), tile_longest=tile_longest, window_s=window_s,
                                   window_start_s=float(window_start_s))
        self.token_confidence_weight = float(token_confidence_weight)
        self.reask = bool(reask)
        self.budget = UsageBudget("critic", max_calls=max_calls, max_tokens=max_tokens, max_images=max_images,
                                  max_bytes=max_bytes)
        self.max_answer_chars = int(max_answer_chars)

    @property
    def use_contact_sheet(self) -> bool:
        return self.frames.contact_sheet

    # -- backend hooks ---------------------------------------------------------------
    def _ask(self, prompt: CritiquePrompt, followups: list[tuple[str, str]]) -> Reply:
        """One model call on `prompt` plus the follow-up turns (role, text)."""
        raise NotImplementedError

    def _describe(self) -> dict:
        """What every answer's meta records about the backend (device, endpoint, ...)."""
        return {}

    def _metered(self, prompt: CritiquePrompt, followups: list[tuple[str, str]]) -> Reply:
        """One model call within the budget: CapReached before a call the caps no longer allow; what the call used
        (reply.meta["usage"], or the failure's `usage`) is charged."""
        self.budget.check()
        try:
            reply = self._ask(prompt, followups)
        except Exception as exc:
            self.budget.charge(getattr(exc, "usage", None) or {"calls": 1, "images": len(prompt.images)})
            raise
        reply.meta.setdefault("usage", {"calls": 1, "images": len(prompt.images)})
        self.budget.charge(reply.meta["usage"])
        return reply

    # -- the protocol ----------------------------------------------------------------
    def build_prompt(self, frames, times, task: str, previous_best: Any = None) -> CritiquePrompt:
        """previous_best: the best motion so far, as text or a MotionFeedback (its dict or JSON)."""
        return build_prompt(frames, times, task, previous_best_text(previous_best), options=self.frames)

    def build_comparison_prompt(self, first: Rollout, second: Rollout, task: str) -> CritiquePrompt:
        return build_comparison_prompt(first.frames, first.times, second.frames, second.times, task,
                                       options=self.frames)

    def critique(self, frames: list[np.ndarray], times: list[float], task: str,
                 previous_best: Any = None, **kwargs: Any) -> MotionFeedback:
        """Describe the rollout; never raises on model or server failures (``valid=False`` instead).

        Bad inputs (no frames, frames/times length mismatch, non-RGB arrays) raise ValueError.
        """
        prompt = self.build_prompt(frames, times, task, previous_best)
        fb = critique_with_reask(lambda followups: self._metered(prompt, followups), self.name, task, reask=self.reask,
                                 token_confidence_weight=self.token_confidence_weight,
                                 max_answer_chars=self.max_answer_chars)
        fb.meta.update(frames_used=len(prompt.times), frame_times=list(prompt.times),
                       contact_sheet=self.use_contact_sheet, **self._describe())
        return fb

    def compare(self, first: Rollout, second: Rollout, task: str) -> Comparison:
        """Which rollout fulfils the task better, from one prompt showing both (labelled first and second).

        The verdict is read only from the answer's ``preferred`` field; an answer without a valid one
        is re-asked once, then the comparison is invalid. A rollout without frames gives an invalid
        comparison (there is nothing to show the model).
        """
        missing = [who for who, r in (("first", first), ("second", second)) if not r.frames]
        if missing:
            return Comparison.invalid(self.name, task, f"no camera frames in the {' and '.join(missing)} rollout")
        prompt = self.build_comparison_prompt(first, second, task)
        comparison = compare_with_reask(lambda followups: self._metered(prompt, followups), self.name, task,
                                        reask=self.reask, max_answer_chars=self.max_answer_chars)
        comparison.meta.update(frames_used=len(prompt.times), contact_sheet=self.use_contact_sheet, **self._describe())
        return comparison
