"""The terrain parameters of the nodes that build a world (simulator, camera_renderer, vlm_critic, and the
orchestrator for its ROS playback): one table, so that every node reads the task's ground alike."""

from __future__ import annotations

from motionvl.robot import ConfigError
from motionvl.sim.terrain import DEFAULT_LEVEL, KINDS

TERRAIN_PARAMETERS = {
    "terrain": ("flat", f"The world's ground: {' | '.join(KINDS)} (motionvl.sim.terrain; match the simulator's)."),
    "terrain_level": (-1, "Difficulty level of the terrain, 0-9 (steps 2-20 cm, slopes 2-20 deg, bumps 0.8-8 cm); "
                          f"-1: level {DEFAULT_LEVEL}. Flat ground has none."),
    "terrain_seed": (0, "Seed of the random ground (rough blocks; match the simulator's)."),
}
"""name -> (default, description), as motionvl.ros.params declares them."""


def node_terrain(p: dict):
    """The one-robot world's TerrainConfig of a node's TERRAIN_PARAMETERS values (ConfigError when invalid)."""
    from motionvl.sim.model import TerrainConfig, single_floor

    level = int(p["terrain_level"])
    terrain = single_floor(TerrainConfig(kind=str(p["terrain"]), level=None if level == -1 else level,
                                         seed=int(p["terrain_seed"])))
    if terrain.kind not in KINDS:
        raise ConfigError(f"parameter terrain must be one of {', '.join(KINDS)}, got {terrain.kind!r}")
    terrain.world_level()  # checks the level
    return terrain


def launch_ground(task: str, run_dir: str) -> tuple[str, int]:
    """The ground of a launched training graph's playback nodes: the terrain and level of the task sentence, or
    (an empty sentence: a resumed run) of the task recorded in run_dir's ledger; ("flat", -1) when there is none or
    it cannot be read (the orchestrator then says why). -1: the terrain's default level, as TERRAIN_PARAMETERS."""
    from pathlib import Path

    from motionvl.search.ledger import LEDGER_FILE, Ledger
    from motionvl.task import Task, make_task

    try:
        if task:
            parsed = make_task(task)
        elif (Path(run_dir) / LEDGER_FILE).exists():
            parsed = Task.from_dict((Ledger(run_dir).get("run", "settings") or {}).get("task_object"))
        else:
            return "flat", -1
    except Exception:  # noqa: BLE001 - the orchestrator refuses the task with the reason
        return "flat", -1
    return parsed.terrain, -1 if parsed.terrain_level is None else int(parsed.terrain_level)
