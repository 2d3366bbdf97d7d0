"""Model access shared by the VLM critic and the LLM reward synthesizer.

* :mod:`motionvl.llm.openai_client`: a standard-library client for OpenAI-compatible
  ``/v1/chat/completions`` endpoints (timeouts, retries with exponential backoff, image parts).
* :mod:`motionvl.llm.hf_generate`: local transformers generation (vision or text models) with
  token probabilities; torch/transformers are imported only when it is used.
"""

from .openai_client import (ChatClient, ChatClientError, ChatResult, chat_completions_url, image_data_url,
                            image_part, resolve_api_key, text_part)

__all__ = ["ChatClient", "ChatClientError", "ChatResult", "chat_completions_url", "image_data_url", "image_part",
           "resolve_api_key", "text_part", "HFGenerator", "GenerationOutput", "resolve_device", "check_model_dir"]


def __getattr__(name: str):
    if name in ("HFGenerator", "GenerationOutput", "resolve_device", "check_model_dir"):
        from . import hf_generate

        return getattr(hf_generate, name)
    raise AttributeError(name)
