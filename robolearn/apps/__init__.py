"""User-facing apps served by robolearn (the teleop/intervention web GUI)."""
