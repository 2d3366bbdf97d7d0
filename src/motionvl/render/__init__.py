"""Offscreen rendering of rollouts: camera frames, videos, contact sheets (no ROS)."""
