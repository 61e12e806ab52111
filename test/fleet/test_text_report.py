"""monitoring.text_report: a robot's texts paired with the simulator's ground truth, the summary's
language section and the contact sheet's captions (the language demo). Plain data, no ROS."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from physai_ros.config.fleet import load_fleet
from physai_ros.fleet.report import CAPTION_LINE_PX, contact_sheet, run_frames, wrap_caption
from physai_ros.monitoring.text_report import (GroundTruth, RobotTextLog, format_language, language_doc,
                                               normalise, printable, questions, sheet_captions)
from physai_ros.protocol.text import RobotTextData
from physai_ros.sim.narration import GRASP, PLACE, REACH_CUBE, SCENE_QUESTION, SUBTASK_QUESTION
from physai_ros.sim.runtime import TaskStatus

SCENE = "blue cube left of the green pad; pad on the right"


def _text(request_id, seq, text, stamp, done=False, round_id=7, question=SUBTASK_QUESTION, reason="eos", detail=""):
    return RobotTextData(robot_id="robot_0", task_id="pick_place", round_id=round_id, request_id=request_id,
                         question=question, source="task", tokens=tuple(range(seq)), text=text, seq=seq,
                         done=done, reason=reason if done else "", detail=detail, stamp=stamp)


def _log():
    """Ground truth: reaching from 100 s, grasping from 103 s, carrying from 105 s."""
    log = RobotTextLog()
    for stamp, subtask in ((100.0, REACH_CUBE), (101.0, REACH_CUBE), (103.0, GRASP), (105.0, PLACE)):
        log.on_status(GroundTruth(stamp, 1, subtask, SCENE))
    return log


def test_ground_truth_from_a_status_and_none_for_an_old_sim():
    st = TaskStatus(robot_id="robot_0", task="pick_and_place", prompt="p", episode=3, episode_time=1.0,
                    episodes_finished=2, successes=1, timeouts=1, success=False, grasped=False, tool=[0, 0, 0],
                    object_pos=[0, 0, 0], goal=[0, 0, 0], contacts=[], commands_rejected=0, stamp=42.5,
                    subtask=GRASP, scene=SCENE)
    assert GroundTruth.from_status(st) == GroundTruth(42.5, 3, GRASP, SCENE)
    assert GroundTruth.from_status(dataclasses.replace(st, subtask="", scene="")) is None


def test_a_text_is_paired_with_the_status_in_effect_when_its_round_was_captured():
    log = _log()
    log.on_round(7, 102.9)  # the frame the model saw: still reaching
    log.on_text(_text(1, 1, "reach", 103.4), received_at=103.5)
    log.on_text(_text(1, 2, "reach the cube.", 105.2, done=True), received_at=105.3)
    [s] = log.texts()
    # not the nearer 103.0 status (a change the robot could not have seen), the one in effect
    assert s.asked_at == 102.9 and s.truth_asked.subtask == REACH_CUBE
    assert s.truth_finished.subtask == PLACE
    assert s.agrees is True  # "Reach the cube." and "reach the cube" are one answer


def test_a_round_never_seen_falls_back_to_the_first_update():
    log = _log()
    log.on_text(_text(1, 1, "gr", 103.5, round_id=99), received_at=103.6)
    log.on_text(_text(1, 2, "grasp grasp", 104.0, round_id=99, done=True), received_at=104.1)
    [s] = log.texts()
    assert s.asked_at == 103.5 and s.truth_asked.subtask == GRASP and s.agrees is False
    # a status arriving later still pairs texts asked before it (pairing is done when read)
    log2 = RobotTextLog()
    log2.on_text(_text(1, 1, "grasp", 50.0, done=True), received_at=50.1)
    assert log2.texts()[0].truth_asked is None and log2.texts()[0].agrees is None
    log2.on_status(GroundTruth(49.0, 1, GRASP, SCENE))
    assert log2.texts()[0].agrees is True


def test_updates_out_of_order_and_after_done_are_ignored_and_only_the_newest_partial_is_kept():
    log = _log()
    assert log.on_text(_text(1, 2, "reach the", 101.2), 101.3) is not None
    assert log.on_text(_text(1, 1, "reach", 101.1), 101.4) is None  # older than one seen
    log.on_text(_text(1, 3, "reach the cube", 101.5, done=True), 101.6)
    assert log.on_text(_text(1, 2, "reach the", 101.2), 101.7) is None  # a late partial of a done text
    log.on_text(_text(2, 1, "gra", 103.5, round_id=8), 103.6)
    log.on_text(_text(3, 1, "pla", 105.5, round_id=9), 105.6)
    texts = log.texts()
    assert [(s.request_id, s.done) for s in texts] == [(1, True), (3, False)]
    assert texts[-1].agrees is None  # unfinished: nothing to judge yet


def test_summary_language_section():
    log = _log()
    log.on_text(_text(1, 3, "reach the cube", 101.5, done=True), 101.6)
    log.on_text(_text(2, 3, "place on the goal", 103.5, done=True, round_id=8), 103.6)
    log.on_text(_text(3, 2, "blue cube left of the pad", 104.0, done=True, round_id=9, question=SCENE_QUESTION,
                      reason="budget"), 104.1)
    log.on_text(_text(4, 1, "", 104.2, done=True, round_id=0, question="dance?", reason="refused",
                      detail="rate"), 104.2)
    lines = format_language({"robot_0": log, "robot_1": RobotTextLog(), "robot_3": RobotTextLog()},
                            {"robot_0": SUBTASK_QUESTION, "robot_1": SUBTASK_QUESTION, "robot_3": None}, 30.0,
                            last=3)
    assert lines[0].startswith("physai-fleet: language")
    assert lines[1] == ("  robot_0: 3 text(s) finished; subtask answers agreeing with the simulator: 1 of 2; "
                        "1 question(s) refused")
    assert lines[2] == "      round 8 said: 'place on the goal' | simulator: 'grasp' (differs)"
    # another question: both shown, no verdict; a cut answer says why it ended
    assert lines[3] == (f"      round 9 [asked 'describe the scene.'] said: 'blue cube left of the pad' (budget) | "
                        f"simulator: 'grasp; {SCENE}'")
    assert lines[4].startswith("      round 0 [asked 'dance?'] refused: rate")
    assert lines[5] == "  robot_1: said nothing: in 30 s (its task asks 'what is the current subtask?')"
    assert lines[6].startswith("  robot_3: said nothing: its task asks nothing")
    doc = language_doc({"robot_0": log}, {"robot_0": SUBTASK_QUESTION})
    assert doc["robot_0"]["subtask_answers_agreeing"] == 1 and doc["robot_0"]["subtask_answers_judged"] == 2
    assert doc["robot_0"]["texts"][0]["truth_asked"]["subtask"] == REACH_CUBE


def test_noise_is_printed_on_one_short_line():
    assert printable("a\nb\tc" + "x" * 100, 20) == "a b c" + "x" * 12 + "..."
    assert printable("caf\u00e9\x07", ascii_only=True) == "caf??"
    assert normalise("  Place on THE goal. ") == "place on the goal"


def test_questions_follow_the_fleet_file():
    asked = questions(load_fleet(None).robots)  # the embedded default fleet
    assert asked["robot_0"] == SUBTASK_QUESTION
    assert None in asked.values()  # the streaming robot's task asks nothing


def test_captions_show_the_newest_text_said_by_each_frame():
    log = _log()
    log.on_text(_text(1, 3, "reach the cube", 101.5, done=True), received_at=101.6)
    log.on_text(_text(2, 3, "place", 103.5, done=True, round_id=8), received_at=103.6)
    frame = np.zeros((448, 224, 3), np.uint8)  # two views stacked
    rows = [("robot_0", [(0.5, frame), (2.0, frame), (4.0, frame)]), ("robot_3", [(0.5, frame)])]
    caps = sheet_captions({"robot_0": log, "robot_3": RobotTextLog()}, {"robot_0": SUBTASK_QUESTION, "robot_3": None},
                          rows, t0=100.0)
    assert caps[0][0] == ["said: nothing yet", "sim now: reach the cube"]
    assert caps[0][1] == ["said: reach the cube (0s ago)", "sim: reach the cube = agrees"]
    assert caps[0][2] == ["said: place (0s ago)", "sim: grasp = differs"]
    assert caps[1][0] == ["said: - (no language stream)"]
    # nobody speaks: the sheet keeps its old look
    assert sheet_captions({"robot_3": RobotTextLog()}, {"robot_3": None}, rows[1:], t0=100.0) is None
    plain = contact_sheet(rows)
    captioned = contact_sheet(rows, captions=caps)
    assert plain.shape == (2 * 224, 3 * 112, 3)
    band = captioned.shape[0] // 2 - 224
    assert captioned.shape[1] == plain.shape[1] and band >= 3 * CAPTION_LINE_PX  # wrapped in a 112 px cell
    assert captioned[224:224 + band, :112].any()  # something is written under the first frame


@pytest.mark.parametrize("width", [60, 112, 224])
def test_wrap_caption_fits_the_cell(width):
    import cv2

    from physai_ros.fleet.report import CAPTION_FONT, CAPTION_SCALE

    lines = wrap_caption("said: " + "placeonthegoalplaceonthegoal and then some more words " * 3, width, max_lines=3)
    assert 1 <= len(lines) <= 3 and lines[-1].endswith("...")
    assert all(cv2.getTextSize(s, CAPTION_FONT, CAPTION_SCALE, 1)[0][0] <= width for s in lines)
    assert wrap_caption("said: grasp", 224) == ["said: grasp"]


def test_the_sheet_shows_the_run_not_the_warm_up():
    frame = np.zeros((4, 4, 3), np.uint8)
    frames = {"robot_0": [(5.0, frame), (50.0, frame), (55.0, frame)], "robot_1": [(5.0, frame)]}
    rows = run_frames(frames, origin_s=48.0)
    assert [(ns, [t for t, _ in cells]) for ns, cells in rows] == [("robot_0", [2.0, 7.0]), ("robot_1", [])]
    # nothing after the origin (a run shorter than the snapshot period): every frame, still rebased
    assert [t for t, _ in run_frames(frames, origin_s=60.0)[0][1]] == [-55.0, -10.0, -5.0]


def test_an_answer_that_decodes_to_nothing_says_so():
    log = _log()
    log.on_text(_text(1, 12, "", 101.5, done=True, reason="budget"), 101.6)
    line = format_language({"robot_0": log}, {"robot_0": SUBTASK_QUESTION}, 30.0)[-1]
    assert line == ("      round 7 said: '' (12 tokens that decode to nothing) (budget) | "
                    "simulator: 'reach the cube' (differs)")
