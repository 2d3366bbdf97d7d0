"""ROS 2 nodes: thin adapters between topics/services and the ROS-free core modules.

One node per module; each module `motionvl.ros.<name>_node` has a `main(args=None)` that is
installed as the console script `<name>_node`.
"""
