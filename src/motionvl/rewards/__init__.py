"""Reward terms, reward specs, and the sandbox for generated reward code (no ROS)."""
