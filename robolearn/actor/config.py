"""``actor.*``: how each actor drives its robot: pacing, inference, chunking, the human, flow control."""

from __future__ import annotations

from dataclasses import dataclass, field

from robolearn.actor.chunking import ChunkingConfig
from robolearn.hardware.safety import SafetyConfig

HUMANS = ("none", "scripted")


@dataclass
class ActorConfig:
    realtime: bool = False          # true: pace each actor at its robot's control_hz (as hardware runs)
    async_inference: bool = False   # realtime: run the policy on a worker thread instead of inside the tick
    inference_delay_ticks: int = 0  # sim (realtime=false) only: each inference takes this many ticks
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)  # how to ask for and splice chunks
    human: str = "none"             # none | scripted: a scripted human (sim.intervention) takes over when the
                                    # robot drifts off course (interventions for HABC / Hi-ORS / RLPD)
    max_policy_lag: int = 0         # wait while the learner is more than this many versions ahead of the
                                    # weights this actor acts with (0: never)
    max_steps_ahead: int = 200      # sim only: env steps an actor may run ahead of the learner's utd_ratio
    send_every: int = 10            # steps per transition batch (and always at an episode end)
    max_spool_mb: float = 1024.0    # unacknowledged batches kept on disk past which the robot holds
    resend_after_s: float = 5.0     # a batch still unacknowledged after this long is sent again
    drain_timeout_s: float = 10.0   # at a clean stop, wait this long for the learner's last acks
    threads: int = 1                # torch threads of each actor process
    safety: SafetyConfig = field(default_factory=SafetyConfig)  # limits, watchdog (hardware.safety)

    def __post_init__(self) -> None:
        for key in ("send_every", "threads"):
            if getattr(self, key) < 1:
                raise ValueError(f"actor.{key} must be >= 1, got {getattr(self, key)}")
        for key in ("max_spool_mb", "resend_after_s", "drain_timeout_s"):
            if getattr(self, key) <= 0:
                raise ValueError(f"actor.{key} must be > 0, got {getattr(self, key)}")
        for key in ("max_policy_lag", "inference_delay_ticks", "max_steps_ahead"):
            if getattr(self, key) < 0:
                raise ValueError(f"actor.{key} must be >= 0, got {getattr(self, key)}")
        if self.human not in HUMANS:
            raise ValueError(f"actor.human must be none or scripted, got {self.human!r}")


@dataclass
class GuiConfig:
    """``gui.*``: the teleop-intervention page (``apps/gui``), served by the run itself."""

    enabled: str = "auto"         # true | false | auto (on for real robots, off in sim)
    host: str = "127.0.0.1"       # a non-loopback host is served only with a token in the URL (``token``)
    port: int = 8765              # 0: any free port
    token: str = ""               # required in the URL (?token=...); "": the GUI makes one (kept across its restarts)
    fps: float = 15.0             # frames per robot per second to the page
    camera: str = ""              # which camera a tile shows: one of the observation's, or a sim camera
                                  # (default: the first observation camera, else the sim's "front")
    size: int = 240               # sim frames rendered for the page (square, pixels)
    camera_intrinsics: list[float] = field(default_factory=list)         # a real camera's [fx, fy, cx, cy] (px)
    camera_extrinsics: list[list[float]] = field(default_factory=list)   # ... and its 4x4 pose in the robot's base
                                  # frame (OpenCV axes): the foresight overlay; a sim camera's come from the sim
    jpeg_quality: int = 80
    uncertainty_samples: int = 8  # the policy's uncertainty at each chunk: the spread of this many sampled chunks
                                  # (on the feed's thread after a frame is sent, ahead of it with
                                  # help_holds; once per frame at most; 0: not measured)
    help_threshold: float = 0.0   # the robot asks for help when its policy's uncertainty exceeds this (0: never)
    help_holds: bool = False      # ... and holds until a person takes over or dismisses it

    def __post_init__(self) -> None:
        if str(self.enabled).lower() not in ("true", "false", "auto"):
            raise ValueError(f"gui.enabled must be true, false or auto, got {self.enabled!r}")
        self.enabled = str(self.enabled).lower()
        if not 0 < self.fps <= 60 or not 16 <= self.size <= 1024 or not 1 <= self.jpeg_quality <= 100:
            raise ValueError("gui.fps must be in (0, 60], gui.size in [16, 1024], gui.jpeg_quality in [1, 100]")
        if self.help_threshold < 0:
            raise ValueError(f"gui.help_threshold must be >= 0, got {self.help_threshold}")
        if not 0 <= self.port <= 65535 or self.uncertainty_samples < 0 or self.uncertainty_samples == 1:
            raise ValueError("gui.port must be in [0, 65535] and gui.uncertainty_samples 0 (off) or >= 2")
        if self.help_threshold and not self.uncertainty_samples:
            raise ValueError("gui.help_threshold needs the uncertainty measured: gui.uncertainty_samples >= 2")
        if self.help_holds and not self.help_threshold:
            raise ValueError("gui.help_holds holds the robot when it asks for help: set gui.help_threshold > 0")
        if bool(self.camera_intrinsics) != bool(self.camera_extrinsics):
            raise ValueError("gui.camera_intrinsics and gui.camera_extrinsics go together (a real camera's overlay)")
        if self.camera_intrinsics and (len(self.camera_intrinsics) != 4 or len(self.camera_extrinsics) != 4
                                       or any(len(row) != 4 for row in self.camera_extrinsics)):
            raise ValueError("gui.camera_intrinsics is [fx, fy, cx, cy] and gui.camera_extrinsics a 4x4 pose")

    def on_for(self, robot: str) -> bool:
        """Whether the run serves the page: ``auto`` serves it for real robots (anything but the sim)."""
        return self.enabled == "true" or (self.enabled == "auto" and robot != "sim_so101")
