"""Batched locomotion environments over the physics backends (no ROS)."""
