"""Terrain kinds, their difficulty levels and their geometry: one square tile around the start.

Every kind but 'flat' is a tile centred on the origin, where the robot starts on a level platform at
z = 0, surrounded by the level ground the tile ends on. Stairs and slopes are pyramids seen from the
start (every heading climbs or descends the same), as legged_gym's pyramid terrains are:

============  ================================================================================
kind          tile (Chebyshev distance d from the start; the platform is d < PLATFORM_HALF_M)
============  ================================================================================
flat          the plane z = 0 (no tile)
rough         random-height blocks BLOCK_M wide, tops in [0, bump height], over the whole tile
              (a level patch at the start), the plane z = 0 around it
stairs_up     STEPS steps of TREAD_M up from the platform, then level ground at the top
stairs_down   the same steps down
slope_up      a slope rising SLOPE_RUN_M from the platform, then level ground at the top
slope_down    the same slope down
============  ================================================================================

`LEVELS` is the level table: level k sets the step height, slope angle and bump height of its
kinds. Everything is boxes (and, for slope_down, one convex mesh per level): box and mesh contacts
keep a flat sole's four corners, where a MuJoCo height field gives one contact per cell prism
(a robot stands still on boxes and topples under PD on a 5-20 cm height field), and a field fine
enough to keep stair edges (cells <= 2 cm) stepped ~10x slower than a plane here.

One world holds one kind. Its geometry per level is a set of `Piece`s: the z of each piece per
level (NaN where the piece is not part of a level). A world built for one level has that level's
pieces; a world built for every level (`level=None`, batched training with a curriculum) has all
of them, and `LevelSelector` gives each simulation its own level by moving pieces vertically and
switching the others' collisions off (MuJoCo per-simulation model fields). `Terrain.height` is the
ground height under (x, y) at a level, the same surface as the pieces (tests compare it with rays).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from motionvl.robot import ConfigError
from motionvl.sim.math import quat_from_euler

if TYPE_CHECKING:  # mujoco is imported where a world is built: nodes read this module's tables without it
    import mujoco

KINDS = ("flat", "rough", "slope_up", "slope_down", "stairs_up", "stairs_down")
"""Terrain kinds a world can be built of ('mixed', batched training only, is motionvl.sim.model's)."""
NUM_LEVELS = 10
DEFAULT_LEVEL = 4
"""The level a world without a curriculum uses when none is given (10 cm steps, 10 deg, 4 cm bumps)."""


@dataclasses.dataclass(frozen=True)
class Level:
    step_height_m: float
    """Rise of every step (stairs)."""
    slope_deg: float
    """Slope angle (slopes)."""
    bump_height_m: float
    """Highest block top above the ground (rough)."""


LEVELS = tuple(Level(round(0.02 * (k + 1), 4), 2.0 * (k + 1), round(0.008 * (k + 1), 4)) for k in range(NUM_LEVELS))
"""The level table: steps 2-20 cm, slopes 2-20 deg, bumps 0.8-8 cm over levels 0-9."""

PLATFORM_HALF_M = 1.0
"""Half-width of the level start platform."""
STEPS = 10
"""Steps per flight of stairs."""
TREAD_M = 0.3
"""Depth of a step."""
SLOPE_RUN_M = STEPS * TREAD_M
"""Horizontal length of a slope."""
TILE_HALF_M = PLATFORM_HALF_M + STEPS * TREAD_M
"""Half-width of the tile: the stairs and slopes end here, rough ground covers it."""
OUTER_HALF_M = 30.0
"""Half-width of the raised ground around stairs_up and slope_up (farther than an episode walks)."""
BLOCK_M = 0.25
"""Width of a rough-ground block."""
SPAWN_PATCH_HALF_M = 0.5
"""Half-width of the level patch at the start of rough ground."""
TERRAIN_GROUP = 2
"""MuJoCo geom group of the terrain (and only the terrain): rays that look for the ground see it alone."""

_BOX_HALF_HEIGHT = 0.25  # stair boxes: 2 x 0.25 m > the highest step, so no gap opens under a box
_BLOCK_HALF_HEIGHT = 0.1
_SLAB_M = 0.2  # thickness of a tilted slope box


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ConfigError(f"unknown terrain {kind!r} (use one of {', '.join(KINDS)})")
    return kind


def check_level(level) -> int:
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level < NUM_LEVELS:
        raise ConfigError(f"terrain level must be an integer in [0, {NUM_LEVELS - 1}], got {level!r}")
    return int(level)


def fixed_level(kind: str, level: int | None) -> int | None:
    """The level a world without a curriculum is built at: `level`, DEFAULT_LEVEL for None, None for a
    ground without levels (flat, mixed)."""
    if kind in ("flat", "mixed"):
        return None
    return DEFAULT_LEVEL if level is None else check_level(level)


@dataclasses.dataclass
class Piece:
    """One geom of a terrain world."""

    name: str
    type: str
    """'box', 'plane' or 'mesh'."""
    size: tuple
    """Box half-sizes (a plane's MuJoCo size)."""
    xy: tuple
    z: np.ndarray
    """(NUM_LEVELS,) the geom's z at each level; NaN at levels without this piece."""
    quat: tuple = (1.0, 0.0, 0.0, 0.0)
    vertices: np.ndarray | None = None
    """A mesh's (V, 3) vertices in the world frame (its geom sits at the origin)."""

    @property
    def active(self) -> np.ndarray:
        return np.isfinite(self.z)


def _per_level(values) -> np.ndarray:
    return np.asarray(values, dtype=float).reshape(NUM_LEVELS)


def _only_at(level: int, z: float) -> np.ndarray:
    out = np.full(NUM_LEVELS, np.nan)
    out[level] = z
    return out


class Terrain:
    """One kind of terrain: its ground height at every level and the pieces that build it."""

    def __init__(self, kind: str, seed: int = 0):
        self.kind = check_kind(kind)
        self.seed = int(seed)
        n = int(round(2 * TILE_HALF_M / BLOCK_M))
        # rough ground: each block's top as a share of the level's bump height, 0 on the start patch
        self.bumps = np.random.default_rng(self.seed).uniform(0.0, 1.0, (n, n)) if kind == "rough" else None
        if self.bumps is not None:
            centre = (np.arange(n) + 0.5) * BLOCK_M - TILE_HALF_M
            patch = np.abs(centre) < SPAWN_PATCH_HALF_M
            self.bumps[np.ix_(patch, patch)] = 0.0
        self._step = np.array([lv.step_height_m for lv in LEVELS])
        self._grade = np.tan(np.radians([lv.slope_deg for lv in LEVELS]))
        self._bump = np.array([lv.bump_height_m for lv in LEVELS])

    # ------------------------------------------------------------------ the surface
    def height(self, x, y, level) -> np.ndarray:
        """Ground height (m) under (x, y) at `level` (an int or an array broadcasting with x and y)."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        level = np.asarray(level, dtype=int)
        d = np.maximum(np.abs(x), np.abs(y))
        kind = self.kind
        if kind == "flat":
            return np.zeros(np.broadcast_shapes(x.shape, y.shape, level.shape))
        if kind.startswith("stairs"):
            steps = np.where(d < PLATFORM_HALF_M, 0, np.clip(np.floor((d - PLATFORM_HALF_M) / TREAD_M) + 1, 0, STEPS))
            return (1.0 if kind == "stairs_up" else -1.0) * steps * self._step[level]
        if kind.startswith("slope"):
            run = np.clip(d - PLATFORM_HALF_M, 0.0, SLOPE_RUN_M)
            return (1.0 if kind == "slope_up" else -1.0) * run * self._grade[level]
        n = self.bumps.shape[0]
        inside = d < TILE_HALF_M
        i = np.clip(np.floor((x + TILE_HALF_M) / BLOCK_M).astype(int), 0, n - 1)
        j = np.clip(np.floor((y + TILE_HALF_M) / BLOCK_M).astype(int), 0, n - 1)
        return np.where(inside, self.bumps[i, j] * self._bump[level], 0.0)

    # ------------------------------------------------------------------ the geometry
    def pieces(self) -> list[Piece]:
        return {"flat": self._flat, "rough": self._rough, "stairs_up": self._stairs_up, "stairs_down": self._stairs_down,
                "slope_up": self._slope_up, "slope_down": self._slope_down}[self.kind]()

    def _plane(self, z) -> Piece:
        return Piece("floor", "plane", (0.0, 0.0, 0.05), (0.0, 0.0), _per_level(z))

    def _flat(self) -> list[Piece]:
        return [self._plane(np.zeros(NUM_LEVELS))]

    def _rough(self) -> list[Piece]:
        pieces = [self._plane(np.zeros(NUM_LEVELS))]
        n = self.bumps.shape[0]
        for i, j in zip(*np.nonzero(self.bumps)):  # blocks at 0 are the plane's
            centre = ((i + 0.5) * BLOCK_M - TILE_HALF_M, (j + 0.5) * BLOCK_M - TILE_HALF_M)
            pieces.append(Piece(f"block_{i * n + j}", "box", (BLOCK_M / 2, BLOCK_M / 2, _BLOCK_HALF_HEIGHT), centre,
                                self.bumps[i, j] * self._bump - _BLOCK_HALF_HEIGHT))
        return pieces

    def _stairs_up(self) -> list[Piece]:
        t, far = _BOX_HALF_HEIGHT, OUTER_HALF_M
        pieces = [Piece("platform", "box", (TILE_HALF_M, TILE_HALF_M, t), (0.0, 0.0), np.full(NUM_LEVELS, -t))]
        for step in range(1, STEPS + 1):
            r = PLATFORM_HALF_M + (step - 1) * TREAD_M  # the step and those above it cover d >= r
            z = step * self._step - t
            mid, half = (r + far) / 2, (far - r) / 2
            pieces += [Piece(f"step_{step}_px", "box", (half, far, t), (mid, 0.0), z),
                       Piece(f"step_{step}_nx", "box", (half, far, t), (-mid, 0.0), z),
                       Piece(f"step_{step}_py", "box", (r, half, t), (0.0, mid), z),
                       Piece(f"step_{step}_ny", "box", (r, half, t), (0.0, -mid), z)]
        return pieces

    def _stairs_down(self) -> list[Piece]:
        t = _BOX_HALF_HEIGHT
        pieces = [Piece(f"step_{k}", "box", (PLATFORM_HALF_M + k * TREAD_M,) * 2 + (t,), (0.0, 0.0),
                        -k * self._step - t) for k in range(STEPS)]
        return pieces + [self._plane(-STEPS * self._step)]

    def _slope_up(self) -> list[Piece]:
        t, far, run = _BOX_HALF_HEIGHT, OUTER_HALF_M, SLOPE_RUN_M
        pieces = [Piece("platform", "box", (PLATFORM_HALF_M, PLATFORM_HALF_M, t), (0.0, 0.0), np.full(NUM_LEVELS, -t))]
        top = run * self._grade - t
        mid, half = (TILE_HALF_M + far) / 2, (far - TILE_HALF_M) / 2
        pieces += [Piece("top_px", "box", (half, far, t), (mid, 0.0), top),
                   Piece("top_nx", "box", (half, far, t), (-mid, 0.0), top),
                   Piece("top_py", "box", (TILE_HALF_M, half, t), (0.0, mid), top),
                   Piece("top_ny", "box", (TILE_HALF_M, half, t), (0.0, -mid), top)]
        for level in range(NUM_LEVELS):
            theta = np.radians(LEVELS[level].slope_deg)
            rise = run * np.tan(theta)
            # a slab whose top face runs from the platform's edge (z 0) to the tile's (z rise), pitched up outward
            along = PLATFORM_HALF_M + run / 2 + _SLAB_M / 2 * np.sin(theta)
            z = rise / 2 - _SLAB_M / 2 * np.cos(theta)
            for k, name in enumerate(("px", "py", "nx", "ny")):
                yaw = k * np.pi / 2
                quat = quat_from_euler(np.array(0.0), np.array(-theta), np.array(yaw))
                pieces.append(Piece(f"slope_{level}_{name}", "box", (run / 2 / np.cos(theta), TILE_HALF_M, _SLAB_M / 2),
                                    (along * np.cos(yaw), along * np.sin(yaw)), _only_at(level, z),
                                    tuple(float(v) for v in quat)))
        return pieces

    def _slope_down(self) -> list[Piece]:
        pieces = []
        for level in range(NUM_LEVELS):
            drop = SLOPE_RUN_M * self._grade[level]
            a, b = PLATFORM_HALF_M, TILE_HALF_M
            corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=float)
            vertices = np.concatenate([np.column_stack([corners * a, np.zeros(4)]),
                                       np.column_stack([corners * b, np.full(4, -drop)])])
            pieces.append(Piece(f"hill_{level}", "mesh", (0.0, 0.0, 0.0), (0.0, 0.0), _only_at(level, 0.0),
                                vertices=vertices))
        return pieces + [self._plane(-SLOPE_RUN_M * self._grade)]


# ---------------------------------------------------------------------- building a world
def add_terrain(spec: mujoco.MjSpec, terrain: Terrain, level: int | None, *, material: str, friction: list,
                contype: int, conaffinity: int) -> list[Piece]:
    """Add `terrain`'s geoms at `level` to the world body of `spec`, or every level's with None (for a
    `LevelSelector`; every piece is then as tall as all its levels together, so that MuJoCo's bounding
    volumes, fixed when the model compiles, hold each simulation's own level). Returns the pieces added,
    in geom order."""
    import mujoco

    world = spec.worldbody
    pieces = [p for p in terrain.pieces() if level is None or p.active[check_level(level)]]
    for piece in pieces:
        common = dict(name=piece.name, material=material, friction=friction, contype=contype,
                      conaffinity=conaffinity, group=TERRAIN_GROUP, condim=3)
        zs = piece.z[piece.active] if level is None else piece.z[[level]]
        if piece.type == "mesh":
            spec.add_mesh(name=piece.name, uservert=piece.vertices.ravel().tolist())
            world.add_geom(type=mujoco.mjtGeom.mjGEOM_MESH, meshname=piece.name, pos=[0.0, 0.0, float(zs[0])],
                           **common)
            continue
        size = list(piece.size)
        if piece.type == "box":
            size[2] += (zs.max() - zs.min()) / 2
        kind = mujoco.mjtGeom.mjGEOM_BOX if piece.type == "box" else mujoco.mjtGeom.mjGEOM_PLANE
        world.add_geom(type=kind, size=size, pos=[piece.xy[0], piece.xy[1], float(zs.max() + zs.min()) / 2],
                       quat=list(piece.quat), **common)
    return pieces


class LevelSelector:
    """Per-simulation terrain levels in a batch built with `add_terrain(..., level=None)`: `select(ids, levels)`
    moves the pieces of those simulations to their level's heights and switches off the collisions of
    the pieces their level does not have."""

    def __init__(self, backend, pieces: list[Piece], contype: int, conaffinity: int):
        model = backend.model
        self.ids = np.array([model.geom(p.name).id for p in pieces], dtype=int)
        self.z = np.stack([p.z for p in pieces], axis=1)  # (levels, pieces)
        self.active = np.isfinite(self.z)
        self.moves = np.array([p.type != "mesh" and np.nanmax(p.z) > np.nanmin(p.z) for p in pieces])
        self.contype, self.conaffinity = int(contype), int(conaffinity)
        self._pos = backend.per_env_model_field("geom_pos")
        self._contype = backend.per_env_model_field("geom_contype")
        self._conaffinity = backend.per_env_model_field("geom_conaffinity")
        size = backend.per_env_model_field("geom_size")
        moved = self.ids[self.moves]
        size[:, moved] = np.array([p.size for p, m in zip(pieces, self.moves) if m])  # the real size, not the bound's

    def select(self, ids: np.ndarray, levels: np.ndarray) -> None:
        ids, levels = np.asarray(ids, dtype=int), np.asarray(levels, dtype=int)
        if ids.size == 0:
            return
        moved = self.ids[self.moves]
        self._pos[ids[:, None], moved[None, :], 2] = self.z[levels][:, self.moves]
        active = self.active[levels]
        self._contype[ids[:, None], self.ids[None, :]] = np.where(active, self.contype, 0)
        self._conaffinity[ids[:, None], self.ids[None, :]] = np.where(active, self.conaffinity, 0)


def ground_height(model: mujoco.MjModel, data: mujoco.MjData, x: float, y: float) -> float:
    """Height of the terrain geoms (TERRAIN_GROUP) under (x, y) in a world after mj_kinematics: a ray cast
    down from high above; 0 where it meets none."""
    import mujoco

    groups = np.zeros(6, dtype=np.uint8)
    groups[TERRAIN_GROUP] = 1
    start, top = np.array([x, y, 100.0]), 100.0
    geom = np.zeros(1, dtype=np.int32)
    dist = mujoco.mj_ray(model, data, start, np.array([0.0, 0.0, -1.0]), groups, 1, -1, geom)
    return top - dist if dist >= 0 else 0.0
