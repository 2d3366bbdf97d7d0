"""What the model-backed critics share: frame sampling, prompt building and the re-ask protocol.

A backend (:class:`~motionvl.critic.vlm_transformers.TransformersVLMCritic`,
:class:`~motionvl.critic.vlm_openai.OpenAICritic`) only turns a :class:`CritiquePrompt` plus
follow-up turns into its own chat messages and returns the model's :class:`Reply` (`_ask`); it
adds what it wants recorded to every answer's meta (`_describe`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Reply, Rollout, compare_with_reask, critique_with_reask
from .prompts import (FRAME_PERIOD_S, CritiquePrompt, FrameOptions, build_comparison_prompt, build_prompt,
                      previous_best_text)
from .schema import Comparison, MotionFeedback


class VLMCritic:
    """``critique`` and ``compare`` for a vision-language model behind `_ask` (a subclass supplies it).

    Args:
        name: critic name in the answers.
        temperature: sampling temperature, 0 = greedy.
        use_contact_sheet: send one timestamped grid image per rollout instead of one image per frame.
        frame_period_s / max_frames: frame sampling (paper: every 0.1 s), capped in count per rollout.
        image_longest: downscale frames so their longest side is at most this (None = as given).
        contact_sheet_cols / tile_longest: contact-sheet layout.
        token_confidence_weight: weight of the token probability against the stated confidence
            (0 = stated only, 1 = token probability only), where the backend returns probabilities.
        reask: re-ask once with the parse error when the answer is unusable.
    """

    def __init__(self, name: str, *, temperature: float = 0.0, use_contact_sheet: bool = False,
                 frame_period_s: float = FRAME_PERIOD_S, max_frames: int | None = 16, image_longest: int | None = None,
                 contact_sheet_cols: int = 4, tile_longest: int | None = 256, token_confidence_weight: float = 0.5,
                 reask: bool = True):
        self.name = name
        self.temperature = float(temperature)
        self.frames = FrameOptions(period_s=float(frame_period_s), max_frames=max_frames,
                                   contact_sheet=bool(use_contact_sheet), image_longest=image_longest,
                                   sheet_cols=int(contact_sheet_cols), tile_longest=tile_longest)
        self.token_confidence_weight = float(token_confidence_weight)
        self.reask = bool(reask)

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
        fb = critique_with_reask(lambda followups: self._ask(prompt, followups), self.name, task, reask=self.reask,
                                 token_confidence_weight=self.token_confidence_weight)
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
        comparison = compare_with_reask(lambda followups: self._ask(prompt, followups), self.name, task,
                                        reask=self.reask)
        comparison.meta.update(frames_used=len(prompt.times), contact_sheet=self.use_contact_sheet, **self._describe())
        return comparison
