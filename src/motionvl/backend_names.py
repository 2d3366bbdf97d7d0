"""The model backends' names, in one place: command-line choices, node parameter checks, run labels."""

SYNTHESIZERS = ("rules", "openai", "transformers", "replay")
"""rules: offline and model-free (not an LLM); openai: an OpenAI-compatible endpoint; transformers: a local
model directory; replay: the answers a recorded run got."""
CRITICS = ("kinematic", "transformers", "openai")
"""kinematic: offline gait analysis (not a VLM); transformers: a local VLM; openai: an endpoint."""
MODEL_SYNTHESIZERS = ("openai", "transformers")
"""The synthesizers that are language models (a run with one is labelled LLM)."""
MODEL_CRITICS = ("openai", "transformers")
"""The critics that are vision-language models (a run with one is labelled VLM)."""
