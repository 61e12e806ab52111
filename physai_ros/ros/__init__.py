"""ROS 2 glue shared by the nodes: QoS profiles, Image<->numpy, time conversions, node spinning,
and the message codecs (ros/codecs, one module per message family).

Glue only: the logic these wrap lives in control/, serving/, monitoring/, and the plain types and
topic names in protocol/. Only this subpackage, physai_ros.nodes and the launcher (physai_ros.fleet)
import rclpy; message types are imported here and in the nodes, and by one codec outside:
physai_ros.workers.codec (EngineBatchRequest/Result, WorkerStatus), pure data conversion that
the engine worker's ROS-free logic (workers.engine_worker) uses on both ends."""
