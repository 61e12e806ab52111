"""Errors in what a user gave physai_ros (a fleet file, a checkpoint path, an install), as
opposed to bugs. Their messages are complete (key path, file, reason): a node that meets one while
starting logs it as one line and exits 1 without a traceback (physai_ros.ros.spin.run_node), and
physai-fleet prints it as one line with exit 2. Imports nothing, so every layer can use it."""


class UserInputError(Exception):
    """Base of the user-facing errors; subclasses keep their usual base (ValueError, ...) too."""
