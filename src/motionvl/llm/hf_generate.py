"""Local generation with transformers, shared by the VLM critic and the LLM reward synthesizer.

:class:`HFGenerator` loads a local model directory (``local_files_only=True``: nothing is ever
downloaded) either as an image-text-to-text model with its processor (``kind="vision"``) or as a
causal LM with its tokenizer (``kind="text"``), renders chat messages with the directory's chat
template, generates, and returns the text together with each generated token's probability and
character span (for confidence estimates).

Messages use the transformers chat format: ``{"role": ..., "content": str | [parts]}`` with parts
``{"type": "text", "text": ...}`` and ``{"type": "image", "image": PIL.Image | np.ndarray}``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from motionvl.device import resolve_device


def check_model_dir(model_dir: str | Path) -> Path:
    """The model directory as a Path; a clear error if it is missing or has no config.json."""
    p = Path(model_dir).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(
            f"model directory {str(p)!r} does not exist. Models are never downloaded here: put a "
            "local copy of the model (config.json, weights, tokenizer/processor files) in a directory "
            "and pass its path.")
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"model directory {str(p)!r} has no config.json; is it a transformers "
                                "model directory (save_pretrained output or a hub snapshot)?")
    return p


@dataclasses.dataclass
class GenerationOutput:
    text: str
    token_ids: list[int]
    token_probs: list[float]
    """Softmax probability of each generated token under the model's raw logits."""
    token_spans: list[tuple[int, int]]
    """Character span of each generated token in ``text``."""
    finish_reason: str
    """"stop" (end-of-sequence token) or "length" (hit max_new_tokens)."""
    prompt_tokens: int
    latency_s: float

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


def _to_pil(image: Any):
    from PIL import Image

    if isinstance(image, np.ndarray):
        return Image.fromarray(np.ascontiguousarray(image.astype(np.uint8)))
    return image


class HFGenerator:
    """A local transformers model ready to answer chat messages.

    ``kind``: "vision" (AutoProcessor + AutoModelForImageTextToText), "text" (AutoTokenizer +
    AutoModelForCausalLM) or "auto" (vision when the config's model type is an image-text-to-text
    one). ``dtype``: None picks float32 on CPU and the checkpoint's dtype ("auto") on GPU.
    """

    def __init__(self, model_dir: str | Path, device: str = "auto", dtype: Any = None, kind: str = "auto",
                 trust_remote_code: bool = False):
        import torch
        from transformers import AutoConfig

        self.model_dir = check_model_dir(model_dir)
        self.device = resolve_device(device)
        config = AutoConfig.from_pretrained(self.model_dir, local_files_only=True, trust_remote_code=trust_remote_code)
        if kind == "auto":
            from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

            kind = "vision" if config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES else "text"
        if kind not in ("vision", "text"):
            raise ValueError(f"kind must be 'vision', 'text' or 'auto', got {kind!r}")
        self.kind = kind
        if dtype is None:
            dtype = torch.float32 if self.device == "cpu" else "auto"
        elif isinstance(dtype, str) and dtype != "auto":
            dtype = getattr(torch, dtype)
        common = dict(local_files_only=True, trust_remote_code=trust_remote_code)
        if kind == "vision":
            from transformers import AutoModelForImageTextToText, AutoProcessor

            self.processor = AutoProcessor.from_pretrained(self.model_dir, **common)
            self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
            self.model = AutoModelForImageTextToText.from_pretrained(self.model_dir, dtype=dtype, **common)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, **common)
            self.processor = self.tokenizer
            self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=dtype, **common)
        self.model.to(self.device)
        self.model.eval()
        self.config = config

    @property
    def name(self) -> str:
        return self.model_dir.name

    def _render(self, messages: list[dict]):
        msgs = []
        for m in messages:
            content = m["content"]
            if isinstance(content, list):
                parts = []
                for p in content:
                    if p.get("type") == "image":
                        if self.kind != "vision":
                            raise ValueError("a text-only model cannot take image parts")
                        parts.append({"type": "image", "image": _to_pil(p.get("image", p.get("url")))})
                    else:
                        parts.append(p)
                content = parts
                if self.kind == "text":  # tokenizer chat templates expect plain strings
                    content = "".join(p.get("text", "") for p in parts)
            msgs.append({**m, "content": content})
        return self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True, return_tensors="pt")

    def generate(self, messages: list[dict], max_new_tokens: int = 512, temperature: float = 0.0,
                 top_p: float | None = None, **generate_kwargs: Any) -> GenerationOutput:
        import torch

        t0 = time.monotonic()
        inputs = self._render(messages)
        inputs = inputs.to(self.device)
        if self.model.dtype != torch.float32:
            inputs = inputs.to(self.model.dtype)  # casts floating tensors (pixel values) only
        # raw logits (not the processed scores) give the model's own token probabilities; they cost
        # generated_tokens x vocab floats of memory while generating
        kwargs: dict[str, Any] = dict(max_new_tokens=int(max_new_tokens), return_dict_in_generate=True,
                                      output_logits=True)
        if temperature and temperature > 0:
            kwargs.update(do_sample=True, temperature=float(temperature))
            if top_p is not None:
                kwargs["top_p"] = float(top_p)
        else:
            kwargs["do_sample"] = False
        if self.model.generation_config.pad_token_id is None and self.tokenizer.pad_token_id is None:
            kwargs["pad_token_id"] = self.tokenizer.eos_token_id
        kwargs.update(generate_kwargs)
        with torch.inference_mode():
            out = self.model.generate(**inputs, **kwargs)
        prompt_len = int(inputs["input_ids"].shape[-1])
        gen = out.sequences[0, prompt_len:].tolist()
        logits = getattr(out, "logits", None) or getattr(out, "scores", None)
        probs: list[float] = []
        for k, tok in enumerate(gen):
            if logits is None or k >= len(logits):
                break
            lp = torch.log_softmax(logits[k][0].float(), dim=-1)[tok].item()
            probs.append(math.exp(lp) if math.isfinite(lp) else 0.0)
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        finish = "stop" if gen and gen[-1] in eos_ids else ("length" if len(gen) >= max_new_tokens else "stop")
        text, spans = self.decode_with_spans(gen)
        return GenerationOutput(text=text, token_ids=gen, token_probs=probs, token_spans=spans,
                                finish_reason=finish, prompt_tokens=prompt_len, latency_s=time.monotonic() - t0)

    def decode_with_spans(self, ids: list[int], window: int = 8) -> tuple[str, list[tuple[int, int]]]:
        """Decode (skipping special tokens) and give each token its character span in the text.

        A token's length is how much decoding it after up to ``window`` preceding tokens adds, so
        characters split over several byte-level tokens and decoders that treat the first token
        specially are accounted for; spans are clamped to be monotonic and to end at the text's end.
        """
        tok = self.tokenizer
        dec = dict(skip_special_tokens=True, clean_up_tokenization_spaces=False)
        text = tok.decode(ids, **dec)
        spans: list[tuple[int, int]] = []
        pos = 0
        for k in range(len(ids)):
            s = max(0, k - window)
            before = len(tok.decode(ids[s:k], **dec)) if k > s else 0
            after = len(tok.decode(ids[s:k + 1], **dec))
            end = min(len(text), max(pos, pos + after - before))
            spans.append((pos, end))
            pos = end
        if spans:
            spans[-1] = (spans[-1][0], len(text))
        return text, spans
