"""MotionVL: language-guided humanoid motion learning (core importable without ROS)."""

__version__ = "0.1.0"
