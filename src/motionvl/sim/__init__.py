"""Simulation core: robot model building, batched physics backends, rollouts (no ROS)."""
