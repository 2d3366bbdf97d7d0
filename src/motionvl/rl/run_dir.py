"""The files of a training run directory, written so that a kill at any moment leaves a run that resumes.

    RUN_DIR/config.yaml            the TrainConfig used (env + ppo + run settings)
    RUN_DIR/reward_spec.yaml       the reward spec trained on (its to_dict())
    RUN_DIR/tb/                    TensorBoard event files
    RUN_DIR/checkpoints/latest.pt  rsl_rl's checkpoint (networks, optimiser) with the run's counters, the policy
                                   average and the estimator's optimiser in "infos"; model_<it>.pt: its copies
    RUN_DIR/checkpoints/episodes_<it>.pt   the episodes in flight at latest.pt (a resumed run continues them)
    RUN_DIR/history.jsonl          one JSON record per PPO iteration (motionvl.rl.trainer says what it holds)
    RUN_DIR/term_stats.json        per-term episode reward mean/min/max/last over training
                                   (the "reward reflection" fed back to the LLM)
    RUN_DIR/reward_failure.json    only when a generated reward term failed in training (deadline, crash,
                                   non-finite or out-of-range value): why; train_policy then raises
                                   RewardValidationError with the same bounded message
    RUN_DIR/policy.onnx            the exported actor with the deployment contract (with
                                   policy_average_iterations: the average of the recent iterates)
    RUN_DIR/policy_last_iterate.onnx   only with averaging on: the last iterate, for comparison
    RUN_DIR/selection/, selection.json  with held-out selection (selection.minutes > 0, or an
                                   iteration budget and selection.iterations > 0): the candidates
                                   validated on held-out episodes and their scores; policy.onnx is
                                   then the best of them and policy_final.onnx the policy the run ended on

Every file is replaced whole (written beside it, then renamed over it). A checkpoint is two files: the
episodes of iteration N are written first, then latest.pt, which names them; older episode files go only
after that, so whenever a run is killed, latest.pt and the episodes it names belong together. The history
may hold iterations after the checkpoint, or half a line of one: a resume drops them.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import torch
import yaml

CHECKPOINTS = "checkpoints"
LATEST = "latest.pt"
EPISODES_KEY = "episodes_file"
"""Key in latest.pt's infos: the file (in checkpoints/) holding the episodes in flight at that checkpoint."""


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace `path` by `data` in one step: a reader (or a resume after a kill) sees the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(data, str):
        tmp.write_text(data)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, indent=1))


def write_yaml(path: Path, data) -> None:
    write_atomic(path, yaml.safe_dump(data, sort_keys=False))


def load_history(path: Path, upto: int) -> list[dict]:
    """History records of iterations <= upto; the file is rewritten without later iterations (trained after the
    checkpoint a run resumes from, so trained again) and without a line a kill cut short."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines(keepends=True):
        if not line.endswith("\n"):  # the last line, cut by a kill mid-write
            break
        if line.strip():
            records.append(json.loads(line))
    records = [r for r in records if r["iteration"] <= upto]
    write_atomic(path, "".join(json.dumps(r) + "\n" for r in records))
    return records


def checkpoint_infos(run_dir: Path) -> dict:
    """The run's counters saved with its latest checkpoint (latest.pt's "infos")."""
    saved = torch.load(Path(run_dir) / CHECKPOINTS / LATEST, weights_only=False, map_location="cpu")
    return saved.get("infos") or {}


def save_checkpoint(run_dir: Path, iteration: int, runner, infos: dict, vec) -> None:
    """checkpoints/episodes_<iteration>.pt, then latest.pt naming it (and model_<iteration>.pt, its copy), then
    the removal of older episode files."""
    ckpt_dir = Path(run_dir) / CHECKPOINTS
    episodes = f"episodes_{iteration}.pt"
    saved = {"iteration": iteration, "episodes": vec.episode_state(), "torch_rng": torch.get_rng_state()}
    if torch.cuda.is_available():
        saved["cuda_rng"] = torch.cuda.get_rng_state_all()
    tmp = ckpt_dir / (episodes + ".tmp")
    torch.save(saved, tmp)
    os.replace(tmp, ckpt_dir / episodes)
    tmp = ckpt_dir / (LATEST + ".tmp")
    runner.save(str(tmp), infos={**infos, EPISODES_KEY: episodes})
    os.replace(tmp, ckpt_dir / LATEST)
    write_atomic(ckpt_dir / f"model_{iteration}.pt", (ckpt_dir / LATEST).read_bytes())
    for old in ckpt_dir.glob("episodes_*.pt"):
        if old.name != episodes:
            old.unlink(missing_ok=True)


def resume_episodes(run_dir: Path, infos: dict, vec) -> bool:
    """Continue the episodes saved with latest.pt (and the random streams): the resumed run then repeats the
    one it resumes, iteration for iteration. Without a usable file (a run resumed with another env size, a
    damaged or deleted file) every environment starts a new episode, with a warning."""
    iteration = int(infos.get("iteration", 0))
    reason = _load_episodes(Path(run_dir) / CHECKPOINTS / str(infos.get(EPISODES_KEY)), iteration, vec)
    if reason is None:
        return True
    warnings.warn(f"resuming at iteration {iteration} with every environment in a new episode: {reason}", stacklevel=3)
    return False


def _load_episodes(path: Path, iteration: int, vec) -> str | None:
    """None once the saved episodes and random streams are back in place; else why they are not used."""
    if not path.is_file():
        return f"{path.name} is missing"
    try:
        saved = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - a damaged file must not block resuming the model itself
        return f"{path.name} cannot be read ({type(exc).__name__}: {exc})"
    if saved.get("iteration") != iteration:
        return f"{path.name} is from iteration {saved.get('iteration')}, the checkpoint from {iteration}"
    try:
        vec.load_episode_state(saved["episodes"])
    except ValueError as exc:
        return f"its episodes do not fit this env ({exc})"
    torch.set_rng_state(saved["torch_rng"])
    if "cuda_rng" in saved and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
    return None
