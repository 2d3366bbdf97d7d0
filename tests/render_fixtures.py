"""Whether this machine can render offscreen (tests that film a rollout render only where it can)."""

from __future__ import annotations


def egl_works() -> bool:
    try:
        from motionvl.render.camera import gl_backend  # noqa: F401
        import mujoco

        mujoco.GLContext(32, 32).free()
        return True
    except Exception:  # noqa: BLE001
        return False
