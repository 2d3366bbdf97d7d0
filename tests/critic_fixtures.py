"""Test helpers for the critic backends: a tiny randomly initialised VLM built offline.

``build_tiny_vlm(path)`` writes a complete LLaVA-architecture model directory (CLIP vision tower +
Llama text model, a few thousand parameters' worth of layers, random weights), a byte-level BPE
tokenizer trained here on the critic's own prompt vocabulary (with the special image token),
a CLIP image processor (PIL backend) and a chat template, with ``save_pretrained``. Nothing is
downloaded. Loading it with AutoProcessor / AutoModelForImageTextToText exercises the same code
path as a real checkpoint; its output is, of course, garbage.

``teach_answer(path, messages, answer)`` then refits that model's output layer so that greedy
decoding after exactly those chat messages reproduces ``answer``: a real model that really says a
given JSON, for end-to-end success paths.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<image>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

IMAGE_SIZE = 32
PATCH_SIZE = 8


def _corpus() -> list[str]:
    from motionvl.critic import prompts

    frames = [np.zeros((8, 8, 3), np.uint8)] * 3
    times = [0.0, 0.1, 0.2]
    p = prompts.build_prompt(frames, times, "walk forward with straight knees at 0.6 m/s",
                             previous_best="the robot walked with bent knees")
    sheet = prompts.build_prompt(frames, times, "walk forward", options=prompts.FrameOptions(contact_sheet=True))
    pair = prompts.build_comparison_prompt(frames, times, frames, times, "walk forward with straight knees")
    return [p.system, p.text, sheet.text, pair.system, pair.text, prompts.reask_text("no JSON object found in the answer"),
            "0123456789 .,:;!?'\"()[]{}<>-+=*/_%#@&|~^$ abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"]


def build_tiny_vlm(path, seed: int = 0) -> Path:
    """Write a tiny random LLaVA-style VLM (model + processor + tokenizer + chat template) to ``path``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (CLIPVisionConfig, GenerationConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor, PreTrainedTokenizerFast)
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                        pad_token="<pad>", extra_special_tokens={"image_token": "<image>"})
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": IMAGE_SIZE},
                                            crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=PATCH_SIZE,
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               chat_template=CHAT_TEMPLATE, image_token="<image>")
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                              image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, projection_dim=32)
    text = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    config = LlavaConfig(vision_config=vision, text_config=text,
                         image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
                         vision_feature_select_strategy="default", vision_feature_layer=-1)
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    # min_new_tokens keeps the random model from ending on its very first token
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                                               eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id,
                                               min_new_tokens=4)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def teach_answer(model_dir, messages: list[dict], answer: str, margin: float = 20.0) -> float:
    """Make the model in ``model_dir`` answer ``answer`` (then end-of-sequence) to exactly ``messages``
    under greedy decoding, and save it back. Returns the smallest singular value of the fitted
    hidden states (how well separated they are).

    Only the output layer (``lm_head``) is refitted: one no-grad forward pass gives the final hidden
    state at every position of prompt + answer (teacher forcing), and the minimum-norm least-squares
    solution maps each of them to ``margin`` on its next answer token and 0 elsewhere. Greedy
    decoding recomputes exactly those hidden states, so the real model really generates the
    answer. One forward pass whatever the prompt length; answers up to ~hidden-size tokens.
    """
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32).eval()
    msgs = [{**m, "content": [{**c, "image": Image.fromarray(c["image"])}
                              if c.get("type") == "image" and isinstance(c.get("image"), np.ndarray) else c
                              for c in m["content"]] if isinstance(m["content"], list) else m["content"]}
            for m in messages]
    inputs = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    eos = processor.tokenizer.eos_token_id
    target = processor.tokenizer(answer, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    target = torch.cat([target, torch.tensor([eos])])
    n_prompt = inputs["input_ids"].shape[1]
    ids = torch.cat([inputs["input_ids"], target[None, :-1]], dim=1)
    with torch.no_grad():
        out = model.model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=inputs["pixel_values"])
        hidden = out.last_hidden_state[0, n_prompt - 1:].clone()  # states that predict each target token
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                       pixel_values=inputs["pixel_values"]).logits[0, n_prompt - 1:]
        assert torch.allclose(model.lm_head(hidden), logits, atol=1e-4), "lm_head does not read last_hidden_state"
    # minimum-norm exact fit: logits at the answer positions = margin * one-hot(target)
    h = hidden.double()
    y = torch.zeros(len(target), model.lm_head.weight.shape[0], dtype=torch.float64)
    y[torch.arange(len(target)), target] = margin
    w = torch.linalg.lstsq(h, y, driver="gelsd").solution.T  # (vocab, hidden)
    with torch.no_grad():
        model.lm_head.weight.copy_(w.float())
        check = model.lm_head(hidden)
    top2 = check.topk(2, dim=-1)
    if not ((top2.indices[:, 0] == target).all() and (top2.values[:, 0] - top2.values[:, 1]).min() > margin / 2):
        raise RuntimeError("the answer cannot be taught to this model (hidden states not separable)")
    model.save_pretrained(model_dir)
    return float(torch.linalg.svdvals(h).min())


def random_frames(n: int = 5, h: int = 64, w: int = 64, seed: int = 0) -> tuple[list[np.ndarray], list[float]]:
    """n RGB uint8 frames (a moving bright square on noise) at 0.1 s spacing."""
    rng = np.random.default_rng(seed)
    frames = []
    for k in range(n):
        f = rng.integers(0, 60, (h, w, 3), dtype=np.uint8)
        x = (k * 7) % max(1, w - 12)
        f[h // 3: h // 3 + 12, x: x + 12] = (230, 200, 40)
        frames.append(f)
    return frames, [round(0.1 * k, 3) for k in range(n)]


_CACHE: dict[str, Path] = {}


def tiny_vlm_path(tmp_path_factory) -> Path:
    """The random tiny VLM, built once per test session under pytest's temporary directory.
    Treat it as read-only (copy it before :func:`teach_answer`)."""
    if "random" not in _CACHE:
        _CACHE["random"] = build_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm"))
    return _CACHE["random"]
