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
