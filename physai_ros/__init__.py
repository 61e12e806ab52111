"""physai_ros: real-time serving of pi0-class VLA models to fleets of ROS 2 robots."""

__version__ = "0.1.0"
