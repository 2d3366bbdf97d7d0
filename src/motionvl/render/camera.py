"""Offscreen rendering of the robot with MuJoCo's own renderer and the tracking camera.

`mujoco.Renderer` draws into an offscreen OpenGL framebuffer; which OpenGL it gets is chosen
by the MUJOCO_GL environment variable when `mujoco` is first imported: `egl` (headless; on a
machine without a GPU Mesa's llvmpipe renders on the CPU, with a GPU the same code renders
on it), `osmesa` (pure software fallback) or `glfw` (needs a display). If MUJOCO_GL is unset,
there is no display and mujoco has not been imported yet, importing this module picks `egl`.

On the CPU, shadows and multisampling are what a frame costs: the model's 4096 px shadow map
with 4x multisampling renders ~11 frames/s at 320x240 on 2 cores, a 1024 px shadow map without
multisampling ~40 (see `motionvl bench render`), with the same picture at this size. The
defaults here are the cheaper ones; `RenderSettings` changes them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from motionvl.sim.model import TRACKING_CAMERA  # noqa: E402
from motionvl.sim.trajectory import Trajectory  # noqa: E402

DEFAULT_FRAME_INTERVAL_S = 0.1
"""The MotionVL paper samples the rollout every 0.1 s for the VLM."""


class RenderError(RuntimeError):
    """Offscreen rendering is not available; the message says which OpenGL was tried and what to do."""


def gl_backend() -> str:
    """The OpenGL platform mujoco uses in this process ("egl", "osmesa", "glfw", ...)."""
    return os.environ.get("MUJOCO_GL", "").strip().lower() or "glfw"


@dataclasses.dataclass(frozen=True)
class RenderSettings:
    width: int = 320
    """Image width in pixels (at most the model's offscreen buffer, 1280)."""
    height: int = 240
    """Image height in pixels (at most the model's offscreen buffer, 720)."""
    camera: str = TRACKING_CAMERA
    """Name of the model camera to render from (default: the pelvis-tracking camera)."""
    shadows: bool = True
    """Cast shadows (they show when a foot is off the ground; the main cost of a CPU-rendered frame)."""
    reflection: bool = True
    """Floor reflection."""
    shadow_size: int = 1024
    """Shadow map size in pixels (the model's default is 4096; 1024 is plenty at 320x240)."""
    multisamples: int = 0
    """Multisample anti-aliasing samples (0 = off; 4 costs ~2.5x on a CPU renderer)."""


def camera_intrinsics(model: mujoco.MjModel, camera: str, width: int, height: int) -> dict:
    """Pinhole intrinsics of a MuJoCo camera at an image size: fx, fy, cx, cy and K (3x3 list).

    MuJoCo's `fovy` is the full vertical field of view in degrees and pixels are square, so
    fy = (height / 2) / tan(fovy / 2) = fx and the principal point is the image centre.
    """
    cam_id = _camera_id(model, camera)
    fovy = float(model.cam_fovy[cam_id])
    fy = 0.5 * height / math.tan(math.radians(fovy) / 2.0)
    fx = fy
    cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
    return {"fx": fx, "fy": fy, "cx": cx, "cy": cy, "fovy_deg": fovy, "width": int(width), "height": int(height),
            "K": [[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]]}


def _camera_id(model: mujoco.MjModel, camera: str) -> int:
    cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
    if cam_id < 0:
        names = [model.camera(i).name for i in range(model.ncam)]
        raise ValueError(f"the model has no camera named {camera!r} (cameras: {names})")
    return cam_id


class FrameRenderer:
    """Renders RGB frames (H x W x 3 uint8) of one model from one camera, offscreen.

    Owns an `MjData` for the poses it draws and a `mujoco.Renderer` (an OpenGL context). An
    OpenGL context belongs to the thread that uses it: create and use one FrameRenderer per
    thread. Use as a context manager or call `close()`.
    """

    def __init__(self, model: mujoco.MjModel, width: int = 320, height: int = 240,
                 camera: str = TRACKING_CAMERA, settings: RenderSettings | None = None):
        s = settings or RenderSettings()
        self.settings = s = dataclasses.replace(s, width=int(width), height=int(height), camera=camera)
        self.model = model
        self.camera_id = _camera_id(model, camera)
        self.data = mujoco.MjData(model)
        if s.width > model.vis.global_.offwidth or s.height > model.vis.global_.offheight:
            raise ValueError(f"image {s.width}x{s.height} exceeds the model's offscreen buffer "
                             f"{model.vis.global_.offwidth}x{model.vis.global_.offheight}")
        # The shadow map and multisampling are read when the GL context is created; set them
        # for this renderer only and give the model its own values back.
        quality = model.vis.quality
        saved = (quality.shadowsize, quality.offsamples)
        quality.shadowsize, quality.offsamples = int(s.shadow_size), int(s.multisamples)
        try:
            self.renderer = mujoco.Renderer(model, height=s.height, width=s.width)
        except Exception as exc:  # the GL platform's own error types vary
            raise RenderError(
                f"cannot create an offscreen OpenGL context with MUJOCO_GL={gl_backend()!r}: "
                f"{type(exc).__name__}: {exc}. Headless machines need MUJOCO_GL=egl (Debian packages "
                "libegl1 and libegl-mesa0, plus libgl1-mesa-dri for CPU rendering) or MUJOCO_GL=osmesa "
                "(libosmesa6), set before mujoco is imported.") from exc
        finally:
            quality.shadowsize, quality.offsamples = saved
        flags = self.renderer.scene.flags
        flags[mujoco.mjtRndFlag.mjRND_SHADOW] = int(s.shadows)
        flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = int(s.reflection)

    @property
    def width(self) -> int:
        return self.settings.width

    @property
    def height(self) -> int:
        return self.settings.height

    def intrinsics(self) -> dict:
        return camera_intrinsics(self.model, self.settings.camera, self.width, self.height)

    def render_data(self, data: mujoco.MjData | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Render a data whose kinematics are current (after mj_forward / mj_kinematics)."""
        self.renderer.update_scene(self.data if data is None else data, camera=self.camera_id)
        return self.renderer.render(out=out)

    def render_qpos(self, qpos: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Put the model in pose `qpos` (nq,), run mj_forward and render it."""
        qpos = np.asarray(qpos, dtype=np.float64)
        if qpos.shape != (self.model.nq,):
            raise ValueError(f"qpos must have shape ({self.model.nq},), got {qpos.shape}")
        self.data.qpos[:] = qpos
        self.data.qvel[:] = 0.0
        mujoco.mj_forward(self.model, self.data)
        return self.render_data(self.data, out=out)

    def close(self) -> None:
        renderer = getattr(self, "renderer", None)
        if renderer is not None:
            renderer.close()
            self.renderer = None

    def __enter__(self) -> "FrameRenderer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def frame_indices(time: np.ndarray, every_s: float = DEFAULT_FRAME_INTERVAL_S) -> np.ndarray:
    """Indices of the samples nearest to t0, t0 + every_s, t0 + 2 every_s, ... (no repeats).

    `time` is the (T,) sample-time array; when every_s is shorter than the sample period every
    sample is used once.
    """
    time = np.asarray(time, dtype=np.float64)
    if time.size == 0:
        return np.zeros(0, dtype=int)
    if every_s <= 0:
        raise ValueError(f"every_s must be > 0, got {every_s}")
    t0, t1 = float(time[0]), float(time[-1])
    targets = t0 + every_s * np.arange(int(math.floor((t1 - t0) / every_s + 1e-9)) + 1)
    idx = np.clip(np.searchsorted(time, targets), 0, time.size - 1)
    prev = np.clip(idx - 1, 0, time.size - 1)
    idx = np.where(np.abs(time[prev] - targets) <= np.abs(time[idx] - targets), prev, idx)
    return np.unique(idx)


def render_trajectory(model: mujoco.MjModel, traj: Trajectory, every_s: float = DEFAULT_FRAME_INTERVAL_S,
                      width: int = 320, height: int = 240, camera: str = TRACKING_CAMERA,
                      settings: RenderSettings | None = None,
                      renderer: FrameRenderer | None = None) -> tuple[list[np.ndarray], list[float]]:
    """Render a recorded rollout every `every_s` seconds with the tracking camera.

    For each sampled step the model is put in the recorded pose (qpos), mj_forward computes
    the kinematics (and so the tracking camera's pose), and the frame is rendered.
    Returns (frames: list of H x W x 3 uint8 RGB arrays, times: seconds since the rollout start).
    Pass `renderer` to reuse an open FrameRenderer (its size/camera then apply).
    """
    if traj.qpos.ndim != 2 or traj.qpos.shape[1] != model.nq:
        raise ValueError(f"trajectory qpos has shape {traj.qpos.shape}, the model needs (T, {model.nq})")
    idx = frame_indices(traj.time, every_s)
    own = renderer is None
    r = renderer or FrameRenderer(model, width, height, camera, settings)
    try:
        frames = [r.render_qpos(traj.qpos[i]) for i in idx]
    finally:
        if own:
            r.close()
    t0 = float(traj.time[0]) if len(traj.time) else 0.0
    return frames, [round(float(traj.time[i]) - t0, 6) for i in idx]
