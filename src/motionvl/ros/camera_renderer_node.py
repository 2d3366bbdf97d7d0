"""camera_renderer: films the simulated robot with the tracking camera (a thin adapter over
`motionvl.render.camera`).

Subscribes (sensor-data QoS, best effort, depth 5: only the newest state matters; works with
the simulator's reliable publishers):
  joint_states          sensor_msgs/JointState  joint positions by name (robot-config joints)
  odom                  nav_msgs/Odometry       base pose (position + orientation) in the world
Publishes (sensor-data QoS: best effort, depth 5):
  camera/image_raw      sensor_msgs/Image       rgb8, `width` x `height`
  camera/camera_info    sensor_msgs/CameraInfo  pinhole intrinsics from the MuJoCo camera's fovy
                                                (fx = fy = height / 2 / tan(fovy / 2), centre
                                                principal point, no distortion)
Every `frame_interval_s` (ROS time: simulated time under use_sim_time, as the launch files
set) the newest state is rendered, if a new one arrived since the last frame (or always with
`render_when_idle`). Both messages carry the stamp of the joint state that was drawn, so a
consumer can pair images with states.

Rendering runs in a worker thread that owns the OpenGL context (a context belongs to one
thread), so the executor never waits for a frame and a multi-threaded executor is safe. If a
frame is still being drawn when the next is due, the older pending state is dropped.
Headless machines need MUJOCO_GL=egl (set by default when there is no display).
"""

from __future__ import annotations

import os
import sys
import threading

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

import numpy as np  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image, JointState  # noqa: E402

from motionvl.dataclass_docs import dataclass_parameters  # noqa: E402
from motionvl.deploy.mapping import JointMapping  # noqa: E402
from motionvl.render.camera import FrameRenderer, RenderError, RenderSettings, camera_intrinsics  # noqa: E402
from motionvl.robot import ConfigError, load_robot_config
from motionvl.ros.params import declare_parameters
from motionvl.ros.runtime import run_node  # noqa: E402
from motionvl.ros.terrain import TERRAIN_PARAMETERS, node_terrain  # noqa: E402
from motionvl.sim.model import build_model  # noqa: E402

NODE_NAME = "camera_renderer"

RENDER_PARAMETERS = dataclass_parameters(RenderSettings)
"""width, height, camera, shadows, ...: motionvl.render.camera.RenderSettings' fields."""
# name -> (default, description); read-only after start
PARAMETERS = {
    "robot_config": ("", "Robot YAML; empty = the package's config/robot.yaml."),
    **TERRAIN_PARAMETERS,
    "frame_interval_s": (0.1, "Seconds between frames in ROS time (0.1 s as in the MotionVL paper)."),
    **RENDER_PARAMETERS,
    "frame_id": ("camera_optical", "frame_id of the image and camera_info headers."),
    "render_when_idle": (False, "Also render when no new joint state arrived since the last frame."),
}


class CameraRendererNode(Node):
    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        p = declare_parameters(self, PARAMETERS)
        if p["frame_interval_s"] <= 0:
            raise ConfigError("parameter frame_interval_s must be > 0")
        self.robot = load_robot_config(p["robot_config"] or None)
        self.mapping = JointMapping(self.robot)
        self.model = build_model(self.robot, node_terrain(p))
        self.settings = RenderSettings(**{name: p[name] for name in RENDER_PARAMETERS})
        if not (0 < self.settings.width <= self.model.vis.global_.offwidth
                and 0 < self.settings.height <= self.model.vis.global_.offheight):
            raise ConfigError(f"image size {self.settings.width}x{self.settings.height} must be within "
                              f"{self.model.vis.global_.offwidth}x{self.model.vis.global_.offheight}")
        self.intrinsics = camera_intrinsics(self.model, p["camera"], self.settings.width, self.settings.height)
        self.frame_id = p["frame_id"]
        self.render_when_idle = bool(p["render_when_idle"])
        m = self.model
        self._qpos_adr = {n: int(m.jnt_qposadr[m.joint(n).id]) for n in self.robot.joint_names}
        self._qpos = m.qpos0.copy()
        self._qpos[0:3] = [0.0, 0.0, self.robot.init_base_height]
        self._lock = threading.Lock()
        self._stamp = None  # stamp of the newest joint state
        self._version = 0  # bumps on every state update
        self._rendered_version = -1
        self._have_odom = False
        self._warned_no_odom = False
        self.frames_published = 0

        # render worker: owns the GL context; one pending job at most
        self._job = None
        self._job_ready = threading.Condition()
        self._stop = False
        self._ready = threading.Event()
        self._start_error: Exception | None = None
        self._worker = threading.Thread(target=self._work, name="camera_renderer_gl", daemon=True)
        self._worker.start()
        self._ready.wait(timeout=30.0)
        if self._start_error is not None:
            raise self._start_error

        self.image_pub = self.create_publisher(Image, "camera/image_raw", qos_profile_sensor_data)
        self.info_pub = self.create_publisher(CameraInfo, "camera/camera_info", qos_profile_sensor_data)
        self.create_subscription(JointState, "joint_states", self._on_joint_state, qos_profile_sensor_data)
        self.create_subscription(Odometry, "odom", self._on_odom, qos_profile_sensor_data)
        self.create_timer(float(p["frame_interval_s"]), self._on_timer)
        self.get_logger().info(f"rendering {self.settings.width}x{self.settings.height} from camera "
                               f"'{p['camera']}' every {p['frame_interval_s']:g} s")

    # ------------------------------------------------------------------ inputs
    def _on_joint_state(self, msg: JointState) -> None:
        q = self.mapping.joint_positions(msg.name, msg.position)
        if q is None:
            self.get_logger().warning("joint_states without every robot joint ignored",
                                      throttle_duration_sec=5.0)
            return
        with self._lock:
            for name, pos in zip(self.robot.joint_names, q):
                if np.isfinite(pos):
                    self._qpos[self._qpos_adr[name]] = pos
            self._stamp = msg.header.stamp
            self._version += 1

    def _on_odom(self, msg: Odometry) -> None:
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        quat = np.array([q.w, q.x, q.y, q.z])
        norm = np.linalg.norm(quat)
        if not (np.all(np.isfinite(quat)) and norm > 1e-9 and np.isfinite([p.x, p.y, p.z]).all()):
            return
        with self._lock:
            self._qpos[0:3] = [p.x, p.y, p.z]
            self._qpos[3:7] = quat / norm
            self._have_odom = True
            self._version += 1

    def _on_timer(self) -> None:
        with self._lock:
            if self._stamp is None:
                return  # nothing received yet
            if self._version == self._rendered_version and not self.render_when_idle:
                return
            if not self._have_odom and not self._warned_no_odom:
                self._warned_no_odom = True
                self.get_logger().warning("no odom received: drawing the base at its start pose")
            job = (self._qpos.copy(), self._stamp)
            self._rendered_version = self._version
        with self._job_ready:
            self._job = job  # replaces a pending, not yet drawn state
            self._job_ready.notify()

    # ------------------------------------------------------------------ rendering
    def _work(self) -> None:
        try:
            renderer = FrameRenderer(self.model, self.settings.width, self.settings.height, self.settings.camera,
                                     self.settings)
        except (RenderError, ValueError) as exc:
            self._start_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                with self._job_ready:
                    while self._job is None and not self._stop:
                        self._job_ready.wait()
                    if self._stop:
                        return
                    qpos, stamp = self._job
                    self._job = None
                try:
                    frame = renderer.render_qpos(qpos)
                    self._publish(frame, stamp)
                except Exception as exc:  # noqa: BLE001 - keep filming; say why a frame was lost
                    self.get_logger().error(f"frame not rendered: {type(exc).__name__}: {exc}",
                                            throttle_duration_sec=5.0)
        finally:
            renderer.close()

    def _publish(self, frame: np.ndarray, stamp) -> None:
        h, w = frame.shape[:2]
        img = Image()
        img.header.stamp, img.header.frame_id = stamp, self.frame_id
        img.height, img.width, img.encoding, img.is_bigendian, img.step = h, w, "rgb8", 0, w * 3
        img.data = frame.tobytes()
        self.image_pub.publish(img)
        self.info_pub.publish(self.camera_info(stamp))
        self.frames_published += 1

    def camera_info(self, stamp=None) -> CameraInfo:
        k = self.intrinsics
        info = CameraInfo()
        if stamp is not None:
            info.header.stamp = stamp
        info.header.frame_id = self.frame_id
        info.height, info.width = k["height"], k["width"]
        info.distortion_model = "plumb_bob"
        info.d = [0.0] * 5
        info.k = [k["fx"], 0.0, k["cx"], 0.0, k["fy"], k["cy"], 0.0, 0.0, 1.0]
        info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        info.p = [k["fx"], 0.0, k["cx"], 0.0, 0.0, k["fy"], k["cy"], 0.0, 0.0, 0.0, 1.0, 0.0]
        return info

    def destroy_node(self):
        # the GL thread ends (its context released) before the node and the rclpy context go;
        # a frame being drawn is finished first (motionvl.ros.runtime bounds the whole shutdown)
        with self._job_ready:
            self._stop = True
            self._job_ready.notify()
        self._worker.join()
        return super().destroy_node()


def main(args=None) -> int:
    return run_node(CameraRendererNode, NODE_NAME, args, threads=1, startup_errors=(RenderError,))


if __name__ == "__main__":
    sys.exit(main())
