"""Rendered frames to files: an mp4 video (OpenCV, mp4v) and a timestamped contact sheet (PNG).

Frames are H x W x 3 uint8 RGB (as `mujoco.Renderer` returns them); OpenCV wants BGR, so the
writers convert. The contact sheet is the one-image view of a rollout for models that accept a
single image: a grid of tiles in time order, each with its time stamp drawn on it.
"""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np


def _check_frames(frames) -> list[np.ndarray]:
    frames = [np.asarray(f) for f in frames]
    if not frames:
        raise ValueError("no frames")
    shape = frames[0].shape
    for i, f in enumerate(frames):
        if f.ndim != 3 or f.shape[2] != 3 or f.dtype != np.uint8:
            raise ValueError(f"frame {i}: expected an H x W x 3 uint8 RGB image, got {f.shape} {f.dtype}")
        if f.shape != shape:
            raise ValueError(f"frame {i}: shape {f.shape} differs from frame 0's {shape}")
    return frames


def write_mp4(frames, path: str | Path, fps: float = 10.0) -> Path:
    """Write RGB frames to an mp4 file (MPEG-4 part 2, fourcc mp4v) and return its path.

    `fps` should be 1 / the sampling interval so the video plays in real time (10 for 0.1 s).
    The file is read back to check it holds every frame; a mismatch raises RuntimeError.
    """
    frames = _check_frames(frames)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (w, h))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot open an mp4v writer for {path}")
    try:
        for f in frames:
            writer.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    info = video_info(path)
    if info["frames"] != len(frames):
        raise RuntimeError(f"{path}: wrote {len(frames)} frames but read back {info['frames']}")
    return path


def video_info(path: str | Path) -> dict:
    """Open a video with cv2.VideoCapture and count the frames it decodes: frames, width, height, fps."""
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise RuntimeError(f"OpenCV cannot open {path}")
    try:
        fps = float(cap.get(cv2.CAP_PROP_FPS))
        width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        n = 0
        while True:
            ok, _ = cap.read()
            if not ok:
                break
            n += 1
    finally:
        cap.release()
    return {"frames": n, "width": width, "height": height, "fps": fps}


def read_video(path: str | Path) -> list[np.ndarray]:
    """Decode every frame of a video into RGB arrays."""
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise RuntimeError(f"OpenCV cannot open {path}")
    frames = []
    try:
        while True:
            ok, bgr = cap.read()
            if not ok:
                break
            frames.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    finally:
        cap.release()
    return frames


def select_evenly(n: int, k: int | None) -> np.ndarray:
    """At most k of range(n) at a constant stride (every ceil(n / k)-th, starting at 0), so the
    kept frames stay evenly spaced in time; all of them if k is None or k >= n."""
    if k is None or k >= n:
        return np.arange(n)
    if k < 1:
        raise ValueError("k must be >= 1")
    return np.arange(0, n, math.ceil(n / k))


def contact_sheet(frames, times, cols: int = 5, max_tiles: int | None = None, tile_width: int | None = None,
                  gap: int = 2, label: bool = True) -> np.ndarray:
    """A grid image (RGB uint8) of the frames in time order, each tile stamped "t=1.2s".

    `cols` tiles per row; rows = ceil(tiles / cols); unused cells stay black. With
    `max_tiles` the frames are thinned at a constant stride (`select_evenly`); with `tile_width` each
    tile is resized to that width (aspect kept). `gap` black pixels separate the tiles.
    The image is rows x tile_h + (rows - 1) x gap high and cols x tile_w + (cols - 1) x gap wide.
    """
    frames = _check_frames(frames)
    times = [float(t) for t in times]
    if len(times) != len(frames):
        raise ValueError(f"{len(frames)} frames but {len(times)} times")
    if cols < 1:
        raise ValueError("cols must be >= 1")
    keep = select_evenly(len(frames), max_tiles)
    tiles = [frames[i] for i in keep]
    stamps = [times[i] for i in keep]
    h, w = tiles[0].shape[:2]
    if tile_width is not None and tile_width != w:
        new_h = max(1, int(round(h * tile_width / w)))
        tiles = [cv2.resize(t, (int(tile_width), new_h), interpolation=cv2.INTER_AREA) for t in tiles]
        h, w = new_h, int(tile_width)
    cols = min(cols, len(tiles))
    rows = math.ceil(len(tiles) / cols)
    sheet = np.zeros((rows * h + (rows - 1) * gap, cols * w + (cols - 1) * gap, 3), dtype=np.uint8)
    for k, (tile, t) in enumerate(zip(tiles, stamps)):
        r, c = divmod(k, cols)
        y, x = r * (h + gap), c * (w + gap)
        tile = np.ascontiguousarray(tile)
        if label:
            tile = _stamp(tile.copy(), f"t={t:.1f}s")
        sheet[y:y + h, x:x + w] = tile
    return sheet


def _stamp(img: np.ndarray, text: str) -> np.ndarray:
    """Draw `text` in the top-left corner: white on a dark box, scaled to the tile size."""
    h = img.shape[0]
    scale = max(0.35, h / 480.0)
    thickness = 1 if scale < 0.8 else 2
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
    pad = max(2, int(3 * scale))
    cv2.rectangle(img, (0, 0), (tw + 2 * pad, th + base + 2 * pad), (0, 0, 0), thickness=-1)
    cv2.putText(img, text, (pad, th + pad), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), thickness,
                cv2.LINE_AA)
    return img


def save_png(image: np.ndarray, path: str | Path) -> Path:
    """Save an RGB uint8 image as PNG."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), cv2.cvtColor(np.asarray(image), cv2.COLOR_RGB2BGR)):
        raise RuntimeError(f"cannot write {path}")
    return path


def write_rollout_files(out: Path, frames, times, traj, every: float, cols: int = 7, max_tiles: int | None = 21) -> dict:
    """rollout.mp4 (one frame per `every` seconds), contact_sheet.png and trajectory.npz in `out`; their paths
    and sizes."""
    out.mkdir(parents=True, exist_ok=True)
    video = write_mp4(frames, out / "rollout.mp4", fps=1.0 / every)
    sheet = contact_sheet(frames, times, cols=cols, max_tiles=max_tiles or None)
    save_png(sheet, out / "contact_sheet.png")
    traj.save(out / "trajectory.npz")
    info = video_info(video)
    return {"video": str(video), "video_frames": info["frames"], "contact_sheet": str(out / "contact_sheet.png"),
            "contact_sheet_size": [int(sheet.shape[1]), int(sheet.shape[0])], "trajectory": str(out / "trajectory.npz")}
