"""Plain data and names shared across packages: one type per message, every topic name.

The serving path, the robot client, the trajectory controller, evaluation and trace capture all
speak these types, so a message is decoded once (physai_ros/ros/codecs) and never bridged from
one package's type to another's. No rclpy and no torch here: everything importing this package
stays testable without ROS.
"""
