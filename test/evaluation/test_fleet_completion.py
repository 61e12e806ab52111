"""physai-fleet's task-completion line (make demo's summary) from the robots' task_status."""
from physai_ros.fleet.report import task_completion_line
from physai_ros.monitoring.robot_summary import RobotSummary


def test_completion_line_counts_successes_over_ended_episodes():
    a = RobotSummary(robot_id="robot_0", task="pick_and_place", episodes_finished=3, tasks_completed=3, timeouts=1)
    b = RobotSummary(robot_id="robot_1", task="reach", episodes_finished=0, tasks_completed=0, timeouts=0)
    line = task_completion_line([a, b])
    # robot_0: 3 successes + 1 timeout ended; the last success is not yet counted as finished
    # (the robot resets 0.5 s later), which is why the line does not use episodes_finished.
    assert "tasks completed 3 (75% of ended episodes)" in line
    assert "robot_0 3/4" in line and "robot_1 0/0" in line
    assert "no episode ended yet" in task_completion_line([b])
