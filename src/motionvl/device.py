"""The torch device to run on: one rule for training and for the model-backed critics and synthesizers."""

from __future__ import annotations


def resolve_device(device: str | None = "auto") -> str:
    """"auto" (or None) -> "cuda" when torch sees a GPU, else "cpu"; anything else ("cpu", "cuda:1") as given."""
    if device in (None, "auto"):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)
