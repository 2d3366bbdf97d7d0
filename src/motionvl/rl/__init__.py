"""PPO training (rsl_rl), ONNX export with the robot contract, and reward-free evaluation."""
