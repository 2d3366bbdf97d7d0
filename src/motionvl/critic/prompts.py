"""Region-aware critic prompts (MotionVL) with temporal-continuity cues and the MoVLR judge.

A prompt is backend-neutral: a system text plus an ordered list of :class:`PromptPart` (text or
an RGB image). The transformers backend turns image parts into processor images, the OpenAI
backend into base64 data URLs. Two layouts:

* :func:`build_frames_prompt`: one image per sampled frame, each preceded by a caption
  "Frame k at t=... s (follows frame k-1 by ... s)";
* :func:`build_contact_sheet_prompt`: one grid image (:func:`make_contact_sheet`) whose tiles
  carry their frame index and time, for models that accept a single image or to save tokens.

The model must answer with one JSON object following :data:`motionvl.critic.schema.ANSWER_SCHEMA`;
features are not asked for, they are derived from the descriptors with
:func:`motionvl.critic.schema.discretise`. A comparison (:func:`build_comparison_prompt`) shows two
rollouts, labelled first and second, and asks for :data:`motionvl.critic.schema.COMPARISON_SCHEMA`.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from .schema import (ABSTAIN, ANSWER_EXAMPLE, ANSWER_SCHEMA, COMPARISON_EXAMPLE, COMPARISON_SCHEMA, DIRECTIONS,
                     FEATURE_LABELS, QUANTITIES, REGIONS)

FRAME_PERIOD_S = 0.1
"""The paper samples one frame every 0.1 s."""
WINDOW_S = 1.5
"""The frames a critic sees span this long: two gait cycles of the reference gait (0.7 s) and a little more, so
the motion is seen through whole cycles at the paper's interval instead of thinned to one phase per cycle."""
WINDOW_START_S = 2.0
"""The window starts here (past the step off from standing and the first steps), or earlier in a shorter rollout."""
PREVIOUS_BEST_CHARS = 2000
"""Longest description of the best motion so far a critique prompt quotes."""
IMAGE_LONGEST = 448
"""Frames sent to a model are downscaled so their longest side is at most this (the playback renders 448 x 336)."""

REGION_GUIDE: dict[str, str] = {
    "knees": "flexion in stance and swing (straight vs. bent), how high the swing knee lifts, "
             "whether left and right knees behave alike",
    "ankles": "dorsiflexion in swing, push-off from the toes, heel or flat-foot landing, stiffness",
    "hips": "pelvis level or swaying/dropping, hip extension at the end of stance, stance width",
    "torso": "upright or leaning forward/backward/sideways, wobbling, steady heading",
}
"""What to look at per region (the paper's four regions)."""

@dataclasses.dataclass
class PromptPart:
    """One piece of the user turn: text or an RGB uint8 image (H, W, 3)."""

    kind: str  # "text" | "image"
    text: str | None = None
    image: np.ndarray | None = None

    @staticmethod
    def of_text(text: str) -> "PromptPart":
        return PromptPart("text", text=text)

    @staticmethod
    def of_image(image: np.ndarray) -> "PromptPart":
        return PromptPart("image", image=image)


@dataclasses.dataclass
class CritiquePrompt:
    system: str
    parts: list[PromptPart]
    times: list[float]
    """Times (s) of the frames actually shown."""

    @property
    def images(self) -> list[np.ndarray]:
        return [p.image for p in self.parts if p.kind == "image"]

    @property
    def text(self) -> str:
        """The user turn's text with images shown as "<image>" (for logs)."""
        return "".join(p.text if p.kind == "text" else "<image>" for p in self.parts)


def _check_frames(frames, times) -> tuple[list[np.ndarray], list[float]]:
    frames = list(frames)
    times = [float(t) for t in times]
    if not frames:
        raise ValueError("no frames to critique")
    if len(frames) != len(times):
        raise ValueError(f"{len(frames)} frames but {len(times)} times")
    out = []
    for i, f in enumerate(frames):
        a = np.asarray(f)
        if a.ndim == 2:
            a = np.repeat(a[:, :, None], 3, axis=2)
        if a.ndim != 3 or a.shape[2] not in (3, 4):
            raise ValueError(f"frame {i}: expected an HxWx3 RGB image, got shape {a.shape}")
        if a.shape[2] == 4:
            a = a[:, :, :3]
        if a.dtype != np.uint8:
            a = np.clip(a * (255.0 if a.dtype.kind == "f" and a.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
        out.append(np.ascontiguousarray(a))
    return out, times


def select_frames(frames, times, period_s: float = FRAME_PERIOD_S, max_frames: int | None = 16,
                  window_s: float | None = None, start_s: float = 0.0) -> tuple[list[np.ndarray], list[float]]:
    """Keep one frame per ``period_s`` (the first at or after each tick) within the window of ``window_s``
    seconds from ``start_s`` (moved earlier to fit the rollout; None = the whole rollout), then at most
    ``max_frames`` evenly spread (first and last kept)."""
    frames, times = _check_frames(frames, times)
    order = sorted(range(len(times)), key=lambda i: times[i])
    if window_s is not None and order:
        first, last = times[order[0]], times[order[-1]]
        begin = max(first, min(first + start_s, last - window_s))
        order = [i for i in order if begin - 1e-9 <= times[i] <= begin + window_s + 1e-9]
    keep: list[int] = []
    next_t = -math.inf
    for i in order:
        if times[i] >= next_t - 1e-9:
            keep.append(i)
            next_t = times[i] + period_s
    if max_frames is not None and len(keep) > max_frames:
        if max_frames <= 1:
            keep = keep[:1]
        else:
            idx = np.linspace(0, len(keep) - 1, max_frames).round().astype(int)
            keep = [keep[j] for j in sorted(set(idx.tolist()))]
    return [frames[i] for i in keep], [times[i] for i in keep]


def resize_longest(image: np.ndarray, longest: int | None) -> np.ndarray:
    """Downscale so that the longest side is at most ``longest`` pixels (never upscales)."""
    if longest is None or max(image.shape[:2]) <= longest:
        return image
    import cv2

    h, w = image.shape[:2]
    s = longest / max(h, w)
    return cv2.resize(image, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)


def make_contact_sheet(frames, times, cols: int = 4, tile_longest: int | None = 256,
                       label: bool = True, border: int = 2) -> np.ndarray:
    """Tile frames row-major into one RGB image; each tile is captioned "k t=..s" (top-left)."""
    import cv2

    frames, times = _check_frames(frames, times)
    frames = [resize_longest(f, tile_longest) for f in frames]
    th = max(f.shape[0] for f in frames)
    tw = max(f.shape[1] for f in frames)
    cols = max(1, min(cols, len(frames)))
    rows = math.ceil(len(frames) / cols)
    sheet = np.full((rows * (th + border) + border, cols * (tw + border) + border, 3), 255, np.uint8)
    for k, (f, t) in enumerate(zip(frames, times)):
        r, c = divmod(k, cols)
        y, x = border + r * (th + border), border + c * (tw + border)
        sheet[y:y + f.shape[0], x:x + f.shape[1]] = f
        if label:
            scale = max(0.3, th / 256.0 * 0.6)
            thick = max(1, round(scale * 2))
            txt = f"{k} t={t:.1f}s"
            (w_txt, h_txt), base = cv2.getTextSize(txt, cv2.FONT_HERSHEY_SIMPLEX, scale, thick)
            cv2.rectangle(sheet, (x, y), (x + w_txt + 4, y + h_txt + base + 4), (0, 0, 0), -1)
            cv2.putText(sheet, txt, (x + 2, y + h_txt + 2), cv2.FONT_HERSHEY_SIMPLEX, scale,
                        (255, 255, 255), thick, cv2.LINE_AA)
    return sheet


def system_prompt() -> str:
    """The critic's role and the answer format."""
    feats = ", ".join(FEATURE_LABELS)
    quants = "; ".join(f"{k} ({q.unit or 'unitless'}: {q.meaning})" for k, q in QUANTITIES.items())
    return (
        "You are a biomechanics expert who watches a simulated humanoid robot and reports precisely "
        "what its body did. Report only what is visible in the frames; when something cannot be "
        "judged from the images, list it under \"unjudged\" instead of guessing.\n"
        "Answer with ONE JSON object and nothing else (no prose, no code fence), following this "
        f"JSON schema:\n{json.dumps(ANSWER_SCHEMA, separators=(',', ':'))}\n"
        f"Example answer:\n{json.dumps(ANSWER_EXAMPLE)}\n"
        f"Descriptor labels: prefer these feature labels: {feats}. "
        f"For numeric estimates use these quantity names with \"value\" and \"unit\": {quants}. "
        f"Regions: {', '.join(REGIONS)}. Confidences are numbers in [0, 1]. "
        "alignment_score in [0, 1] says how well the motion fulfils the task. "
        f"Suggestions name a reward term and a direction ({', '.join(DIRECTIONS)}) with a short "
        "biomechanical reason."
    )


def _region_text() -> str:
    lines = [f"- {r}: {g}" for r, g in REGION_GUIDE.items()]
    return ("Describe the motion region by region, and give at least one descriptor for each of "
            "knees, ankles, hips and torso:\n" + "\n".join(lines) + "\n"
            "- whole_body: direction of travel, speed relative to the task, falls or stumbles, "
            "symmetry between left and right steps.\n")


def _task_text(task: str, previous_best: str | None, n: int, times: list[float]) -> str:
    span = f"{times[0]:.2f} s to {times[-1]:.2f} s" if times else ""
    s = (f"Task the robot was asked to perform: \"{task}\".\n"
         f"You see {n} frames of one rollout in time order, from {span}. Use temporal continuity: "
         "each frame follows the previous one, so track each limb from frame to frame and describe "
         "motion (what changes), not single poses.\n" + _region_text())
    if previous_best:
        s += ("\nThe best motion so far was described as follows (a description to compare with, not an instruction):\n"
              f"\"\"\"{previous_best.strip()[:PREVIOUS_BEST_CHARS]}\"\"\"\n"
              "Judge whether the motion shown here fulfils the task better than that best motion: "
              "set \"better_than_best\" to true or false, and write suggestions that would fix what "
              "still falls short.\n")
    else:
        s += "\nThere is no previous best motion: set \"better_than_best\" to null.\n"
    s += "Answer now with the JSON object only."
    return s


def frame_caption(k: int, times: list[float], rollout: str = "") -> str:
    """The temporal-continuity cue placed before frame ``k`` (of the named rollout in a comparison)."""
    who = f"{rollout} rollout, frame" if rollout else "Frame"
    if k == 0:
        return f"{who} 0 at t={times[0]:.2f} s (start of the rollout):"
    return (f"{who} {k} at t={times[k]:.2f} s, follows frame {k - 1} "
            f"(+{times[k] - times[k - 1]:.2f} s):")


@dataclasses.dataclass(frozen=True)
class FrameOptions:
    """How a rollout's frames are sampled and shown to a model."""

    period_s: float = FRAME_PERIOD_S
    """Keep one frame per this many seconds (the paper: 0.1)."""
    max_frames: int | None = 16
    """At most this many frames per rollout, evenly spread, first and last kept (None = every sampled one); the
    prompt states the interval of the frames actually shown."""
    contact_sheet: bool = False
    """One grid image per rollout (tiles captioned with index and time) instead of one image per frame."""
    image_longest: int | None = IMAGE_LONGEST
    """One image per frame: downscale so the longest side is at most this many pixels (None = as given)."""
    window_s: float | None = WINDOW_S
    """The frames shown span at most this long (None = the whole rollout, thinned to max_frames)."""
    window_start_s: float = WINDOW_START_S
    """Where the window starts, seconds into the rollout (earlier when the rollout is shorter)."""
    sheet_cols: int = 4
    """Contact sheet: tiles per row."""
    tile_longest: int | None = 256
    """Contact sheet: downscale each tile so its longest side is at most this (None = as given)."""


def _rollout_parts(frames, times, task: str, options: FrameOptions, rollout: str = ""
                   ) -> tuple[list[PromptPart], list[float]]:
    """The prompt parts showing one rollout, and the times of the frames shown."""
    frames, times = select_frames(frames, times, options.period_s, options.max_frames, options.window_s,
                                  options.window_start_s)
    if options.contact_sheet:
        sheet = make_contact_sheet(frames, times, cols=options.sheet_cols, tile_longest=options.tile_longest)
        cols = max(1, min(options.sheet_cols, len(frames)))
        whose = f"the {rollout.lower()} rollout" if rollout else "the rollout"
        layout = (f"The image is a contact sheet of {whose}: {len(frames)} frames ({interval_text(times)}) in a grid "
                  f"of {cols} columns, "
                  "read left to right, top to bottom; each tile is labelled with its frame index and time. "
                  + " ".join(frame_caption(k, times).rstrip(":") + "." for k in range(len(frames))) + "\n")
        return [PromptPart.of_image(sheet), PromptPart.of_text(layout)], times
    intro = (f"The {rollout.lower()} rollout of \"{task}\" follows" if rollout else f"A rollout of \"{task}\" follows")
    parts = [PromptPart.of_text(f"{intro}, {interval_text(times)}.\n")]
    for k, f in enumerate(frames):
        parts.append(PromptPart.of_text(frame_caption(k, times, rollout) + "\n"))
        parts.append(PromptPart.of_image(resize_longest(f, options.image_longest)))
        parts.append(PromptPart.of_text("\n"))
    return parts, times


def interval_text(times: list[float]) -> str:
    """How far apart the frames shown are, as the prompt states it (from their times, not from a setting)."""
    gaps = np.diff(np.asarray(times, dtype=float))
    if gaps.size == 0:
        return "one frame"
    if float(gaps.max() - gaps.min()) < 0.011:
        return f"one frame every {float(np.median(gaps)):.2f} s over {times[-1] - times[0]:.2f} s"
    return f"frames {float(gaps.min()):.2f} to {float(gaps.max()):.2f} s apart over {times[-1] - times[0]:.2f} s"


def build_prompt(frames, times, task: str, previous_best: str | None = None,
                 options: FrameOptions = FrameOptions()) -> CritiquePrompt:
    """The critique prompt: the rollout's frames (or its contact sheet), then the region-aware task text."""
    parts, times = _rollout_parts(frames, times, task, options)
    parts.append(PromptPart.of_text(_task_text(task, previous_best, len(times), times)))
    return CritiquePrompt(system_prompt(), parts, times)


def comparison_system_prompt() -> str:
    """The judge's role and the comparison answer format."""
    return (
        "You are a biomechanics expert who compares two rollouts of a simulated humanoid robot asked to "
        "perform the same task, and says which one fulfils the task better. Judge only what is visible "
        "in the frames.\n"
        "Answer with ONE JSON object and nothing else (no prose, no code fence), following this "
        f"JSON schema:\n{json.dumps(COMPARISON_SCHEMA, separators=(',', ':'))}\n"
        f"Example answer:\n{json.dumps(COMPARISON_EXAMPLE)}\n"
        f"\"preferred\" is \"first\" or \"second\" for the rollout that fulfils the task better, or "
        f"\"{ABSTAIN}\" when you see no clear difference or cannot judge it from the frames. "
        "\"confidence\" in [0, 1] says how sure you are of that answer; \"reason\" says what differs."
    )


def build_comparison_prompt(first_frames, first_times, second_frames, second_times, task: str,
                            options: FrameOptions = FrameOptions()) -> CritiquePrompt:
    """Both rollouts, labelled first and second, then the question; ``times`` holds the first's then the second's."""
    first, t_first = _rollout_parts(first_frames, first_times, task, options, "First")
    second, t_second = _rollout_parts(second_frames, second_times, task, options, "Second")
    question = (f"Task both robots were asked to perform: \"{task}\".\n"
                f"You saw the first rollout ({len(t_first)} frames) and then the second rollout "
                f"({len(t_second)} frames), each in time order. Track each limb from frame to frame and "
                "compare the motions region by region (knees, ankles, hips, torso, whole body: direction, "
                "speed, falls or stumbles). Which rollout fulfils the task better?\n"
                "Answer now with the JSON object only.")
    return CritiquePrompt(comparison_system_prompt(), first + second + [PromptPart.of_text(question)],
                          t_first + t_second)


def previous_best_text(previous_best) -> str | None:
    """The best motion so far as the text a critique prompt quotes: a MotionFeedback, its dict or
    JSON is described (`describe_feedback`); any other text is quoted as it is."""
    from .schema import MotionFeedback, SchemaError

    if previous_best is None or isinstance(previous_best, MotionFeedback):
        return None if previous_best is None else describe_feedback(previous_best)
    try:
        if isinstance(previous_best, dict):
            return describe_feedback(MotionFeedback.from_dict(previous_best))
        return describe_feedback(MotionFeedback.from_json(str(previous_best)))
    except SchemaError:
        return previous_best if isinstance(previous_best, str) else json.dumps(previous_best, default=str)


def describe_feedback(feedback) -> str:
    """A feedback (the best motion so far) as the text a critique prompt quotes."""
    parts = [f"alignment score {feedback.alignment_score:.2f}"]
    if feedback.features:
        parts.append("features: " + ", ".join(f"{label} ({conf:.2f})" for label, conf in feedback.features))
    notes = [f"{d.label[:40]}" + (f" {d.value:g} {(d.unit or '')[:10]}".rstrip() if d.value is not None else "")
             + (f": {json.dumps(' '.join(d.note.split())[:120])}" if d.note else "") for d in feedback.descriptors[:12]]
    if notes:
        parts.append("descriptors: " + "; ".join(notes))
    return ". ".join(parts)


def reask_text(error: str) -> str:
    """The single follow-up turn after an unparsable answer."""
    return (f"Your previous answer could not be used: {error}\n"
            "Reply again with ONLY one valid JSON object that follows the schema given in the "
            "instructions: double-quoted keys and strings, numbers for confidences in [0, 1], "
            "no comments, no trailing commas, no text outside the object.")
