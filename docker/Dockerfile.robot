# MotionVL robot-computer image: runs the deployment node (ONNX policy via onnxruntime, CPU).
#
# NOT BUILT OR TESTED HERE: the development machines have no Docker engine. It is written to
# the usual conventions and is a starting point for whoever builds it.
#
#   docker build -f docker/Dockerfile.robot -t motionvl-robot .
#   docker run --rm -it --network host -v /path/to/policy.onnx:/policy.onnx motionvl-robot \
#       ros2 launch motionvl deploy.launch.py policy:=/policy.onnx
#   # on a desk, with the simulator standing in for the hardware:
#   #   ... ros2 launch motionvl deploy.launch.py policy:=/policy.onnx use_sim:=true
#
# Small on purpose: no torch, no transformers. The deployment node needs numpy, pyyaml and
# onnxruntime; mujoco is included for use_sim:=true. Versions are taken from requirements.txt.
FROM ros:kilted-ros-base

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1

RUN apt-get update && apt-get install -y --no-install-recommends \
        python3-venv python3-pip ros-kilted-tf2-msgs \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /ws/src/motionvl
COPY requirements.txt ./
RUN python3 -m venv --system-site-packages /opt/venv \
    && grep -E '^(numpy|pyyaml|onnxruntime|mujoco)==' requirements.txt > /tmp/req.txt \
    && /opt/venv/bin/pip install -r /tmp/req.txt colcon-common-extensions
ENV PATH=/opt/venv/bin:$PATH

COPY . .
WORKDIR /ws
RUN . /opt/ros/kilted/setup.sh && colcon build --packages-select motionvl

RUN printf '#!/bin/bash\nset -e\n. /opt/ros/kilted/setup.bash\n. /ws/install/setup.bash\nexec "$@"\n' > /entrypoint.sh \
    && chmod +x /entrypoint.sh
ENTRYPOINT ["/entrypoint.sh"]
CMD ["ros2", "launch", "motionvl", "deploy.launch.py"]
