"""ROS 2 nodes: thin adapters between topics/services and the ROS-free core modules.

One node per module; each module `motionvl.ros.<name>_node` has a `main(args=None)` that runs
it with `motionvl.ros.runtime.run_node` (start-up errors, signals, the clean shutdown) and is
installed as the console script `<name>_node` (entered through `motionvl.ros.console`).
"""
