"""Engine instances in other processes or on other hosts, reached over ROS 2 (DDS).

    codec       EngineInput / EngineOutput / worker status <-> our ROS messages (pure data)
    profiling   the latency-vs-batch profile a worker measures at start-up
    core        WorkerCore: a worker's logic without ROS (serve a request, never raise)

Topic names of a worker instance: physai_ros.protocol.topics (request_topic, ...).

The node is physai_ros.nodes.engine_worker (console script `engine_worker`); the server-side
proxy with the local engine's .config / .infer is physai_ros.ros.remote_engine.RemoteEngine
(ROS transport, so it lives with the ROS glue).
"""
