"""ROS 2 glue shared by the nodes: QoS profiles, Image<->numpy, time and message conversions.

Only this subpackage and physai_ros.nodes import rclpy or message types."""
