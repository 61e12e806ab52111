"""Run report: parsing the summary JSON and rendering the dashboard PNG (matplotlib Agg)."""
import json
import subprocess
import sys

import cv2
import numpy as np
import pytest

from physai_ros.monitoring.report import render_dashboard
from physai_ros.monitoring.run_summary import load_summary, parse_summary

from synthetic import synthetic_summary


def test_parse_full_and_minimal_summaries():
    run = parse_summary(synthetic_summary(3))
    assert [r.robot_id for r in run.robots] == ["robot_0", "robot_1", "robot_2"]
    assert run.robots[1].refused_inputs == 1  # {reason: count} is summed
    assert len(run.robots[0].latency_samples_ms) == 400
    assert set(run.series) == {"wait_ratio", "queue_depth", "stream_rates_hz"}
    # today's physai-fleet summary: robot_id, no latency, no series
    legacy = {"duration_s": 30.0, "robots": [{"robot_id": "robot_0", "chunks_executed": 40,
                                               "rates_hz": {"wrench": 480.0}}]}
    run = parse_summary(legacy)
    assert run.robots[0].robot_id == "robot_0" and run.robots[0].latency_ms_p99 is None
    assert run.series == {}


@pytest.mark.parametrize("mutate,fragment", [
    (lambda d: d.pop("robots"), "summary.robots must be a list"),
    (lambda d: d["robots"][1].pop("id"), "robots[1] needs a non-empty string 'id'"),
    (lambda d: d["robots"][0].update(latency_ms_p99="slow"), "robots[0].latency_ms_p99 must be a finite number"),
    (lambda d: d["robots"][0].update(rounds=2.5), "robots[0].rounds must be an integer"),
    (lambda d: d["robots"][0]["latency_samples_ms"].append(float("nan")), "latency_samples_ms[400]"),
    (lambda d: d["series"]["wait_ratio"]["robot_0"]["v"].pop(), "'t' has 120 points, 'v' has 119"),
    (lambda d: d["series"].update(temperature={}), "unknown kinds ['temperature']"),
    (lambda d: d["series"]["queue_depth"].update(engine_9=[1, 2]), "must be an object with lists"),
])
def test_malformed_summaries_name_the_field(mutate, fragment):
    doc = synthetic_summary(2)
    mutate(doc)
    with pytest.raises(ValueError) as exc:
        parse_summary(doc)
    assert fragment in str(exc.value)
    with pytest.raises(ValueError):
        parse_summary([1, 2])


def _read(path):
    img = cv2.imread(str(path))
    assert img is not None, f"{path} is not a readable image"
    return img


@pytest.fixture(scope="module")
def full_png(tmp_path_factory):
    return _read(render_dashboard(parse_summary(synthetic_summary(4)), tmp_path_factory.mktemp("r") / "report.png"))


def test_dashboard_png_from_synthetic_run(full_png):
    img = full_png
    assert img.shape[:2] == (760, 1280)
    # every panel drew something: each quarter of the page has more than background pixels
    h, w = img.shape[:2]
    for y0, x0 in ((0, 0), (0, w // 2), (h // 2, 0), (h // 2, w // 2)):
        quad = img[y0:y0 + h // 2, x0:x0 + w // 2]
        assert (quad < 200).any(axis=2).mean() > 0.02
    # the robots' curves are in colour, not only black text and grey grid
    hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV)
    assert (hsv[..., 1] > 120).mean() > 0.005


def test_dashboard_without_optional_data_says_so(tmp_path, full_png):
    doc = {"robots": [{"id": "robot_0", "latency_ms_p50": 80.0, "latency_ms_p99": 140.0}]}
    img = _read(render_dashboard(parse_summary(doc), tmp_path / "r.png"))
    full = full_png
    assert img.shape == full.shape
    # empty panels hold only a "no ... in this summary" note: far less ink than drawn ones
    ink = lambda im: (im < 200).any(axis=2).mean()  # noqa: E731
    assert ink(img) < ink(full)


def test_cli_renders_and_refuses_bad_files(tmp_path):
    src = tmp_path / "summary.json"
    src.write_text(json.dumps(synthetic_summary(2)))
    out = tmp_path / "out" / "report.png"
    cmd = [sys.executable, "-m", "physai_ros.monitoring.report", str(src), "-o", str(out)]
    res = subprocess.run(cmd + ["--palette", "64", "--dpi", "60"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    img = _read(out)
    assert img.shape == (570, 960, 3)
    assert len(np.unique(img.reshape(-1, 3), axis=0)) <= 64
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = subprocess.run(cmd[:3] + [str(bad)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "not JSON" in res.stderr
    with pytest.raises(ValueError):
        load_summary(bad)


def test_sixteen_robots_keep_the_legend_short():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    from physai_ros.monitoring import report

    fig, ax = matplotlib.pyplot.subplots()
    for i in range(16):
        ax.plot([0, 1], [i, i], label=f"robot_{i}")
    report._legend(ax)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    matplotlib.pyplot.close(fig)
    assert len(texts) == report.MAX_LEGEND and texts[-1] == "+7 more"
    assert sorted(["robot_10", "robot_2"], key=report._natural) == ["robot_2", "robot_10"]


def test_title_and_time_axis_say_what_the_time_counts(tmp_path):
    """physai-fleet's series start with the monitor, before the server-up wait, and duration_s
    counts after it: an 8-robot run said "40 s" in its title while its axis ran to 220 s. With
    warmup_s the title names both spans and the axis counts from server-up (warm-up at t < 0)."""
    from physai_ros.monitoring.report import report_title, time_axis_label

    doc = synthetic_summary(2, duration_s=40.0)
    for per_label in doc["series"].values():
        for s in per_label.values():
            s["t"] = [t - 182.0 for t in s["t"]]  # as physai-fleet writes them: t = 0 at server-up
    doc["warmup_s"] = 182.0
    run = parse_summary(doc)
    assert run.warmup_s == 182.0
    assert report_title(run) == "physai-fleet run report: 2 robot(s), 40 s served after 182 s warm-up (t < 0)"
    assert time_axis_label(run) == "time since server-up (s); t < 0, shaded: warm-up"
    img = _read(render_dashboard(run, tmp_path / "r.png"))
    assert img.shape[:2] == (760, 1280)
    # summaries without warmup_s (older ones, --scripted) keep the old wording
    old = parse_summary(synthetic_summary(2, duration_s=40.0))
    assert old.warmup_s is None
    assert report_title(old) == "physai-fleet run report: 2 robot(s), 40 s"
    assert time_axis_label(old) == "time since start (s)"
    doc["warmup_s"] = -1.0
    with pytest.raises(ValueError, match="warmup_s must be >= 0"):
        parse_summary(doc)
