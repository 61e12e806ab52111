"""serving.compute_threads: the thread-count rules of a serving process, and the libgomp facts
they rest on (checked in a fresh interpreter: a process's OpenMP teams outlive the tests that
made them)."""
import json
import subprocess
import sys
import threading

import pytest
import torch

from physai_ros.serving.compute_threads import build_for, in_fresh_thread, use_threads


def test_in_fresh_thread_returns_the_result_computed_with_the_threads_asked_for():
    caller = threading.get_ident()
    ident, threads = in_fresh_thread(lambda: (threading.get_ident(), torch.get_num_threads()), 1)
    assert ident != caller and threads == 1


def test_build_for_builds_here_without_a_count_and_on_a_fresh_thread_with_one():
    caller = threading.get_ident()
    assert build_for(None, threading.get_ident) == caller
    before = torch.get_num_threads()
    try:
        ident, threads = build_for(1, lambda: (threading.get_ident(), torch.get_num_threads()))
        assert ident != caller and threads == 1
        assert torch.get_num_threads() == 1  # the caller was pinned first
    finally:
        torch.set_num_threads(before)


class _Stop(BaseException):
    pass


@pytest.mark.parametrize("error", [ValueError("bad checkpoint"), _Stop()])
def test_in_fresh_thread_raises_what_the_function_raised_in_the_caller(error):
    def fail():
        raise error

    with pytest.raises(type(error)) as got:
        in_fresh_thread(fail, 1)
    assert got.value is error


def test_use_threads_leaves_the_count_alone_without_a_number():
    before = torch.get_num_threads()
    use_threads(None)
    use_threads(0)
    assert torch.get_num_threads() == before


_PREMISE = r"""
import json, os, threading, time, torch
from physai_ros.serving.compute_threads import in_fresh_thread, single_threaded_caller, use_threads

def tasks():
    return len(os.listdir("/proc/self/task"))

a = torch.randn(512, 512)
default = torch.get_num_threads()
single_threaded_caller()
base = tasks()
for _ in range(20):
    a @ a  # the pinned main thread: inline, no team
after_main = tasks()
during = in_fresh_thread(lambda: [a @ a for _ in range(20)] and tasks(), 2)
end = time.monotonic() + 30  # the ended team's worker leaves just after the thread is joined
while tasks() > base and time.monotonic() < end:
    time.sleep(0.01)
after_fresh = tasks()
seen = []
t = threading.Thread(target=lambda: (seen.append(torch.get_num_threads()), use_threads(1),
                                     seen.append(torch.get_num_threads())))
t.start(); t.join()
print(json.dumps({"default": default, "base": base, "after_main": after_main, "during": during,
                  "after_fresh": after_fresh, "new_thread": seen, "main": torch.get_num_threads()}))
"""


def test_a_pinned_main_thread_forms_no_team_and_a_fresh_threads_team_ends_with_it():
    out = subprocess.run([sys.executable, "-c", _PREMISE], capture_output=True, text=True, timeout=120,
                         env={"OMP_NUM_THREADS": "2", "PATH": ""})
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["default"] == 2 and r["main"] == 1
    # Pinning holds for the caller: a later thread starts at the count set last anywhere (here
    # the fresh thread's 2) until it sets its own (why the component service's threads call
    # use_threads(1)).
    assert r["new_thread"] == [2, 1]
    assert r["after_main"] == r["base"], "the pinned main thread started OpenMP workers"
    assert r["during"] >= r["base"] + 2, "the fresh thread (and its team's worker) were not running"
    assert r["after_fresh"] == r["base"], "the fresh thread's OpenMP worker outlived it"


_STICKY = r"""
import json, threading, torch
from physai_ros.serving.compute_threads import serving_threads, use_threads

def run(set_count):
    ready, later = threading.Event(), threading.Event()
    out = {}
    def serving():
        set_count(2)  # before any op of its own, as a serving thread starts
        ready.set(); later.wait()
        torch.ones(4096).sum()
        out["serving"] = torch.get_num_threads()
    def component():
        ready.wait()
        use_threads(1)
        later.set()
    threads = [threading.Thread(target=serving), threading.Thread(target=component)]
    [t.start() for t in threads]; [t.join() for t in threads]
    bystander = threading.Thread(target=lambda: out.setdefault("bystander", torch.get_num_threads()))
    bystander.start(); bystander.join()
    return out

print(json.dumps({"default": serving_threads(None), "torch_set": run(torch.set_num_threads), "use_threads": run(use_threads)}))
"""


def test_a_thread_keeps_the_count_use_threads_set_whatever_others_set_later():
    """torch takes a thread's count from its one process-wide value at the thread's first op: a
    serving thread that only called set_num_threads(2) computed at 1 after a component thread set
    1 (the demo-pipeline regression, use_threads' docstring). use_threads initialises its thread
    first, so the count stays; a thread that never sets one still gets the last value set."""
    out = subprocess.run([sys.executable, "-c", _STICKY], capture_output=True, text=True, timeout=120,
                         env={"OMP_NUM_THREADS": "2", "PATH": ""})
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["default"] == 2
    assert r["torch_set"] == {"serving": 1, "bystander": 1}  # the torch fact use_threads works around
    assert r["use_threads"] == {"serving": 2, "bystander": 1}
