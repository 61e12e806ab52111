"""ROS 2 glue shared by the nodes: QoS profiles, Image<->numpy, time conversions, node spinning,
and the message codecs (ros/codecs, one module per message family).

Glue only: the logic these wrap lives in control/, serving/, monitoring/, and the plain types and
topic names in protocol/. Only this subpackage and physai_ros.nodes import rclpy or message types."""
