"""Names the serving path adds to the robot-side topic contract (physai_ros.ros.qos)."""

OBSERVATION_TOPIC = "observation"  # robot_client -> policy_server, in the robot's namespace
REFRESH_TOPIC = "observation_refresh"  # policy_server -> robot_client: resend this round fresh
CLIENT_STATUS_TOPIC = "client_status"  # robot_client counters (JSON), 1 Hz
OPERATOR_RESUME_TOPIC = "operator_resume"  # std_msgs/Empty: leave the STOPPED state
REGISTER_SERVICE = "/policy_server/register_robot"
