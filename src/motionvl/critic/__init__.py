"""Motion critics: what the body did in a rollout, in one structured schema.

Backends (created by name with :func:`create_critic`):

* ``kinematic``: offline gait analysis of the rollout (no model; the embedded default);
* ``transformers``: a local image-text-to-text model directory
  (:class:`~motionvl.critic.vlm_transformers.TransformersVLMCritic`);
* ``openai``: an OpenAI-compatible HTTP endpoint (:class:`~motionvl.critic.vlm_openai.OpenAICritic`).

Every backend answers ``critique(frames, times, task, ...) -> MotionFeedback`` about one rollout
and ``compare(first, second, task) -> Comparison`` about two :class:`Rollout` objects.
The model-backed backends import torch/transformers only when created.
"""

from .base import (Critic, Reply, Rollout, available_critics, compare_with_reask, create_critic, critique_with_reask,
                   register_critic)
from .parsing import ParseResult, parse_comparison, parse_feedback
from .schema import (DIRECTIONS, EXCLUSIVE_GROUPS, FEATURE_LABELS, QUANTITIES, REGIONS, Comparison, Descriptor,
                     MotionFeedback, SchemaError, Suggestion, discretise, merge_measurements, normalise_label)

__all__ = [
    "Critic", "Reply", "Rollout", "available_critics", "compare_with_reask", "create_critic", "critique_with_reask",
    "register_critic", "ParseResult", "parse_comparison", "parse_feedback",
    "DIRECTIONS", "EXCLUSIVE_GROUPS", "FEATURE_LABELS", "QUANTITIES", "REGIONS", "Comparison", "Descriptor",
    "MotionFeedback", "SchemaError", "Suggestion", "discretise", "merge_measurements", "normalise_label",
    "TransformersVLMCritic", "OpenAICritic",
]


def __getattr__(name: str):
    if name == "TransformersVLMCritic":
        from .vlm_transformers import TransformersVLMCritic

        return TransformersVLMCritic
    if name == "OpenAICritic":
        from .vlm_openai import OpenAICritic

        return OpenAICritic
    raise AttributeError(name)
