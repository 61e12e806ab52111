"""Scoring a grasp watch against the sim's drops (physai_lab.evaluation.drop_detection)."""
from types import SimpleNamespace

from physai_lab.evaluation.drop_detection import match, score


def test_each_drop_is_claimed_once_within_the_window_and_the_rest_are_false_alarms():
    drops = [(1.0, "slip"), (5.0, "released"), (9.0, "slip")]
    # 1.03 claims the first drop; 1.2 comes after it was claimed: a false alarm; 9.5 within 1 s
    # of the third; 3.0 near nothing; the release at 5.0 is never seen.
    hits, false_alarms = match(drops, [9.5, 1.2, 1.03, 3.0])
    assert hits == [("slip", 0.03), ("slip", 0.5)] and false_alarms == [1.2, 3.0]
    assert match(drops, [0.99]) == ([], [0.99])  # before the drop is not a detection of it
    assert match([], []) == ([], [])
    # A release the watch missed, then a slip 0.81 s later and a "lost" 38 ms after the slip:
    # the "lost" is the slip's (the grasp's latest change), and the release stays unseen.
    assert match([(44.648, "released"), (45.456, "slip")], [45.494]) == ([("slip", 0.038)], [])


def test_score_totals_recall_per_cause_precision_and_delay():
    shifts = [SimpleNamespace(drops=((1.0, "slip"), (5.0, "released")), grasp_lost_at=(1.02,), shift_s=60.0),
              SimpleNamespace(drops=((2.0, "slip"),), grasp_lost_at=(2.04, 30.0), shift_s=60.0,
                              sim_resets=((29.98, "timeout"), (40.0, "success")))]
    s = score(shifts)
    assert s["drops"] == {"slip": 2, "released": 1} and s["recall"] == {"slip": 1.0, "released": 0.0}
    assert (s["detections"], s["false_alarms"], s["precision"]) == (3, 1, 0.667)
    assert s["false_alarms_per_hour"] == 30.0 and s["delay_s"] == {"median": 0.03, "max": 0.04, "n": 2}
    assert s["false_alarms_after_sim_reset"] == {"timeout": 1}  # 30.0 came 0.02 s after the time limit
    assert score([SimpleNamespace(drops=(), grasp_lost_at=(), shift_s=10.0)])["precision"] is None
