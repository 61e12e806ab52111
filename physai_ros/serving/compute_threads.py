"""Which threads of a serving process run torch's CPU ops in parallel, and why only those.

torch's CPU ops run on GNU OpenMP (the libgomp bundled with the torch wheel). Every OS thread
that runs a parallel op becomes the master of its own thread team, and the team's idle workers
live as long as that thread does. libgomp counts all of them; once more are alive than the
process has CPUs, it stops spin-waiting between parallel regions (its "throttled" spin count of
100 to 1000 iterations, which GOMP_SPINCOUNT and OMP_WAIT_POLICY do not raise) and parks the
workers on a futex, so each of the ~800 ops of a pi0 call pays a wake-up.

Measured (2026-11-25, 2 cores, sim_pi0 fast path, 1 view, load 0.5): an engine call took 18 ms
on the thread that had built the model and 50 ms on a second thread after the main thread had
built it (45,000 voluntary context switches in 60 calls, against 16), and 17.6 ms on that second
thread when the main thread had never run a parallel op. The policy server and the engine worker
build on the main thread and serve on worker threads, so in their default layout every served
call pays this.

The layout that avoids it, for a process that computes on worker threads:
- the main thread (rclpy's executor and its callbacks) runs torch single-threaded from the start,
  before any torch op, so it never forms a team: `single_threaded_caller()`;
- construction, warm-up and profiling run in a thread that ends when they are done, taking its
  team with it: `in_fresh_thread()` (both steps: `build_for()`);
- each engine instance's serving thread sets its own thread count first: `use_threads()`; threads
  that compute beside it (component questions) set one thread, so their ops run inline, no team.
  In the default layout the serving threads set the count torch gave the main thread
  (`serving_threads()`), since a thread that sets none takes whatever some thread set last
  (use_threads says why that matters), and the component threads keep torch's count.

When this applies: fleet.yaml's `server.torch_threads` N >= 1 (the engine worker's
`torch_threads` parameter) turns it on, N threads per engine; 0, the default, leaves torch as it
sets itself up. The default stays because of what a spinning team does when other processes
share the cores: each barrier waits out a descheduled worker's time slice. Beside 4 busy loops on
this 2-core machine sim_pi0's call took 191-228 ms p50 (p99 up to 2.7 s) with N=2, 52 ms with
N=1, and 71-113 ms as torch sets itself up (`bench/compute_threads.py --busy 4`); in `make demo`
(13 processes on 2 cores) the default completed 13 tasks in 30 s with a ~300 ms round trip, N=1
1-7 tasks (0.5-1.8 s), N=2 one (7-21 s): the throttled teams wait passively and two threads
get the server a larger share of the machine. Use N on a server with cores of its own.
"""
from __future__ import annotations

import threading
from typing import Callable, TypeVar

T = TypeVar("T")


def single_threaded_caller() -> None:
    """Pin the calling thread to one intra-op thread (use_threads(1)). Only the caller: see
    use_threads for what other threads get."""
    use_threads(1)


def serving_threads(n: int | None) -> int:
    """The count a serving thread sets for itself (use_threads) in a layout built by build_for(n):
    n, or with None the count torch gives the caller now (its default, on the main thread that
    built the model), rather than whatever another thread sets later."""
    import torch

    return n or torch.get_num_threads()


def use_threads(n: int | None) -> None:
    """The calling thread's intra-op thread count, for good (None: leave it). Call first in a
    compute thread.

    torch keeps one process-wide count, which every set_num_threads overwrites, and a thread takes
    it over at its first parallel op (at::internal::lazy_init_num_threads), not when it calls
    set_num_threads. So a thread that set its count and had not computed yet lost it to any later
    set_num_threads elsewhere, and a thread that never sets one computes with whatever some
    thread set last: a component thread's single thread made the policy server's engine thread
    single-threaded in the default layout, and `make demo-pipeline` went from 8 tasks in 60 s
    (round trip ~215 ms) to 0 (~650 ms) (2026-11-25). Initialising this thread first makes its
    count its own; test_compute_threads.py checks both facts."""
    if n is not None and n > 0:
        import torch

        torch.get_num_threads()  # this thread's lazy initialisation, now, from the current default
        torch.set_num_threads(int(n))


def in_fresh_thread(fn: Callable[[], T], threads: int | None = None, name: str = "build") -> T:
    """fn() on a new thread with `threads` intra-op threads; its OpenMP team ends with it. Returns
    fn's result or raises what it raised (BaseException included), in the caller's thread."""
    box: dict = {}

    def run() -> None:
        try:
            use_threads(threads)
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def build_for(threads: int | None, fn: Callable[[], T]) -> T:
    """fn() (a model's construction, warm-up, profile) for engines that will compute at `threads`
    each: with a count, the caller is pinned first and fn runs in_fresh_thread; with None, here,
    as torch sets itself up (server.torch_threads 0)."""
    if not threads:
        return fn()
    single_threaded_caller()
    return in_fresh_thread(fn, threads)
