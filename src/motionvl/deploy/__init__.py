"""The deployment controller (no ROS): modes, faults, the command builder, scheduling.

`Controller` is what the deployment node runs each command cycle and what
`motionvl.deploy.playback` runs in-process against the simulator (a playback without ROS).
"""

from motionvl.deploy.commands import PD_FIELDS, Command, CommandBuilder, CommandLimits, StandRamp
from motionvl.deploy.config import PATHS, DeployConfig
from motionvl.deploy.controller import Controller
from motionvl.deploy.mapping import JointMapping
from motionvl.deploy.modes import FAULT_KINDS, Fault, Mode, ModeMachine

__all__ = ["PATHS", "PD_FIELDS", "FAULT_KINDS", "Command", "CommandBuilder", "CommandLimits", "Controller",
           "DeployConfig", "Fault", "JointMapping", "Mode", "ModeMachine", "StandRamp"]
