"""The reward search (the paper's Algorithm 1 with MoVLR's judge): ledger, gates, lineage, report.

Core only: no rclpy. `loop.Search` runs the algorithm over a synthesizer, a critic, a `Playback` and
trainer slots (`dispatch`); `motionvl train` (cli) and the orchestrator node give it its backends.
"""
