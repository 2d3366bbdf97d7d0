"""TransformersVLMCritic on a tiny randomly initialised VLM built in the test (no download, no mocks)."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import json
import math
import shutil

import numpy as np
import pytest

from critic_fixtures import build_tiny_vlm, random_frames, teach_answer, tiny_vlm_path
from motionvl.critic import create_critic
from motionvl.critic.base import Rollout
from motionvl.critic.parsing import combine_confidence
from motionvl.critic.vlm_transformers import TransformersVLMCritic
from motionvl.llm.hf_generate import HFGenerator, check_model_dir, resolve_device


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory):
    return tiny_vlm_path(tmp_path_factory)


class CountingCritic(TransformersVLMCritic):
    """Counts real model calls and keeps what each returned (a subclass hook, not a mock)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.outputs = []
        self.message_log = []

    def _generate(self, messages):
        out = super()._generate(messages)
        self.outputs.append(out)
        self.message_log.append(messages)
        return out


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*never downloaded"):
        TransformersVLMCritic(tmp_path / "no-such-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        TransformersVLMCritic(tmp_path / "empty")


def test_device_auto_is_one_torch_can_use_and_the_model_lands_there(tiny_vlm):
    import torch

    device = torch.device(resolve_device("auto"))
    assert torch.ones(2, device=device).sum().item() == 2.0  # fails if "auto" named a device that is not there
    critic = TransformersVLMCritic(tiny_vlm, max_new_tokens=2)
    assert {p.device.type for p in critic.generator.model.parameters()} == {device.type}
    assert resolve_device("cpu") == "cpu" and resolve_device("cuda:1") == "cuda:1"  # explicit names pass through


def test_random_model_runs_full_path_and_is_invalid_after_one_reask(tiny_vlm):
    critic = CountingCritic(tiny_vlm, max_new_tokens=16)
    assert critic.name == f"transformers:{tiny_vlm.name}" and critic.device in ("cpu", "cuda")
    frames, times = random_frames(5)
    fb = critic.critique(frames, times, "walk forward with straight knees")

    # garbage from random weights: one re-ask, then an invalid feedback with the parse error
    assert fb.valid is False
    assert fb.error.startswith("unusable answer after 2 attempt(s)") and "parse error" in fb.error
    assert len(critic.outputs) == 2 and critic.generate_calls == 2 and fb.meta["attempts"] == 2
    assert fb.meta["reasked"] is True and fb.features == [] and fb.descriptors == []

    # the pipeline really produced tokens, probabilities and spans, and the text is what was decoded
    for out, log in zip(critic.outputs, fb.meta["attempt_log"]):
        assert out.n_tokens > 0 and log["generated_tokens"] == out.n_tokens
        assert len(out.token_probs) == out.n_tokens and all(0.0 <= p <= 1.0 for p in out.token_probs)
        assert len(out.token_spans) == out.n_tokens and out.token_spans[-1][1] == len(out.text)
        assert out.finish_reason in ("stop", "length") and "parse_error" in log
    assert fb.raw_text == critic.outputs[-1].text
    assert critic.outputs[0].text == critic.generator.tokenizer.decode(critic.outputs[0].token_ids,
                                                                      skip_special_tokens=True)

    # the re-ask is the first conversation plus the model's answer and the parse error
    first, second = critic.message_log
    assert second[:len(first)] == first
    assert second[-2]["role"] == "assistant" and second[-2]["content"][0]["text"] == critic.outputs[0].text
    assert second[-1]["role"] == "user" and "could not be used" in second[-1]["content"][0]["text"]
    assert fb.meta["attempt_log"][1]["prompt_tokens"] > fb.meta["attempt_log"][0]["prompt_tokens"]

    # one image part per sampled frame, captioned with its time
    user = first[1]["content"]
    assert sum(1 for c in user if c["type"] == "image") == 5
    assert any("Frame 4 at t=0.40 s, follows frame 3" in c.get("text", "") for c in user)
    assert fb.meta["frames_used"] == 5 and fb.meta["frame_times"] == times


def test_contact_sheet_mode_and_registry(tiny_vlm):
    critic = create_critic(f"transformers:{tiny_vlm}", max_new_tokens=8, use_contact_sheet=True)
    frames, times = random_frames(6, h=48, w=80)
    fb = critic.critique(frames, times, "stand still", previous_best="it stood on bent knees")
    assert not fb.valid and fb.meta["attempts"] == 2 and fb.meta["contact_sheet"] is True
    assert all(a["generated_tokens"] > 0 for a in fb.meta["attempt_log"])
    prompt = critic.build_prompt(frames, times, "stand still", "it stood on bent knees")
    assert len(prompt.images) == 1 and "it stood on bent knees" in prompt.text


def test_compare_on_the_random_model_is_invalid_after_one_reask(tiny_vlm):
    critic = CountingCritic(tiny_vlm, max_new_tokens=12, max_frames=3)
    first, second = Rollout(*random_frames(4, seed=1)), Rollout(*random_frames(5, seed=2))
    c = critic.compare(first, second, "walk forward with straight knees")
    # garbage from random weights is no verdict: re-asked once, then invalid, preferring nothing
    assert not c.valid and c.preferred is None and c.confidence == 0.0
    assert c.error.startswith("unusable answer after 2 attempt(s); last parse error")
    assert critic.generate_calls == 2 and c.meta["attempts"] == 2 and c.raw_text == critic.outputs[-1].text
    assert all(out.n_tokens > 0 for out in critic.outputs)
    system, user = critic.message_log[0][:2]
    assert '"preferred"' in system["content"][0]["text"]
    texts = [part["text"] for part in user["content"] if part["type"] == "text"]
    images = [part["image"] for part in user["content"] if part["type"] == "image"]
    assert len(images) == 6 and c.meta["frames_used"] == 6  # three of each rollout, the first's first
    assert np.array_equal(images[0], first.frames[0]) and np.array_equal(images[3], second.frames[0])
    assert any(t.startswith("Second rollout, frame 2 at t=0.40 s") for t in texts)
    assert "Which rollout fulfils the task better?" in texts[-1]
    no_frames = critic.compare(first, Rollout([], []), "walk")
    assert not no_frames.valid and "no camera frames in the second rollout" in no_frames.error
    assert critic.generate_calls == 2  # nothing was asked


def test_no_reask_option(tiny_vlm):
    critic = CountingCritic(tiny_vlm, max_new_tokens=4, reask=False)
    frames, times = random_frames(2)
    fb = critic.critique(frames, times, "walk")
    assert not fb.valid and len(critic.outputs) == 1 and fb.meta["attempts"] == 1


def test_taught_model_answer_is_parsed_with_token_confidence(tiny_vlm, tmp_path):
    """A real (tiny) model that has been taught one answer: the success path end to end, with a
    realistic sloppy answer (prose prefix, percentage confidence, truncated after the score)."""
    model_dir = tmp_path / "taught"
    shutil.copytree(tiny_vlm, model_dir)
    frames, times = random_frames(3, seed=7)
    task = "walk forward with straight knees"
    answer = ('Here: {"descriptors":[{"label":"knee_flexion","region":"knees","value":40,"unit":"deg",'
              '"confidence":"80%"}],"alignment_score":0.3,')
    teacher = TransformersVLMCritic(model_dir, max_new_tokens=64)
    del teacher.generator  # only its message builder was needed
    teach_answer(model_dir, teacher.messages(teacher.build_prompt(frames, times, task)), answer)

    critic = CountingCritic(model_dir, max_new_tokens=64)
    fb = critic.critique(frames, times, task)
    out = critic.outputs[0]
    assert out.text == answer and out.finish_reason == "stop"
    tok = critic.generator.tokenizer
    # ASCII answer: every token's span is exactly that token's text
    assert [out.text[a:b] for a, b in out.token_spans[:-1]] == [tok.decode([t]) for t in out.token_ids[:-1]]
    assert fb.valid, fb.error
    assert fb.meta["attempts"] == 1 and not fb.meta["reasked"] and fb.raw_text == answer
    (d,) = fb.descriptors
    assert (d.label, d.region, d.value, d.unit) == ("knee_flexion", "knees", 40.0, "deg")
    assert fb.alignment_score == pytest.approx(0.3)
    assert fb.meta["stated_confidence"] == [0.8]
    p = fb.meta["label_token_prob"][0]
    assert 0.0 < p <= 1.0
    assert d.confidence == pytest.approx(combine_confidence(0.8, p, 0.5), abs=1e-5)
    assert fb.features == [("knees_bent", d.confidence)]
    assert "closed truncated output" in fb.meta["repairs"]
    json.loads(fb.to_json())


def test_text_generator_for_the_llm_side(tmp_path):
    """HFGenerator(kind="text") on a tiny causal LM (what the reward synthesizer will reuse)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["def reward(state): return -abs(state.knee_flexion) * 0.5"] * 5,
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                show_progress=False))
    t = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                pad_token="<pad>")
    t.chat_template = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                       "{% if add_generation_prompt %}[assistant] {% endif %}")
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(vocab_size=len(t), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, bos_token_id=t.bos_token_id,
                                     eos_token_id=t.eos_token_id, pad_token_id=t.pad_token_id))
    m.save_pretrained(tmp_path / "lm")
    t.save_pretrained(tmp_path / "lm")
    g = HFGenerator(tmp_path / "lm", device="cpu")
    assert g.kind == "text"
    out = g.generate([{"role": "system", "content": "write a reward"},
                      {"role": "user", "content": [{"type": "text", "text": "knees straight"}]}],
                     max_new_tokens=6, min_new_tokens=6)
    assert out.n_tokens == 6 and out.finish_reason == "length" and len(out.token_probs) == 6
    assert out.text == g.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    assert [b - a for a, b in out.token_spans] and out.token_spans[-1][1] == len(out.text)
    # probabilities are the softmax of the model's own logits for the chosen (greedy) tokens
    assert all(0.0 < p <= 1.0 for p in out.token_probs)
    assert math.isfinite(sum(math.log(p) for p in out.token_probs))
    with pytest.raises(ValueError, match="text-only"):
        g.generate([{"role": "user", "content": [{"type": "image", "image": np.zeros((4, 4, 3), np.uint8)}]}])
    assert check_model_dir(tmp_path / "lm") == tmp_path / "lm"


def test_build_tiny_vlm_is_reusable(tmp_path):
    """The fixture builder is importable by other tests and writes a loadable directory."""
    from transformers import AutoConfig

    d = build_tiny_vlm(tmp_path / "again", seed=1)
    cfg = AutoConfig.from_pretrained(d, local_files_only=True)
    assert cfg.model_type == "llava"
    assert (d / "chat_template.jinja").is_file() and (d / "tokenizer.json").is_file()
