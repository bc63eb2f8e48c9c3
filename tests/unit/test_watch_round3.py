"""watch under the third hostile run (issue 40): calls from a pool (w(x, **{})), callables that return
a coroutine or generator, Ctrl-C in a clock source, and a fork while another thread is inside watch."""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import subprocess
import sys
import textwrap
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import warmprof
from warmprof.errors import InputError


def _wait_for(pred, deadline_s: float = 120.0) -> None:
    end = time.monotonic() + deadline_s
    while not pred():
        assert time.monotonic() < end, "the state never came"
        time.sleep(0.01)


def test_an_empty_kwargs_dict_is_the_same_key_as_none():
    # executors, thread targets and asyncio.to_thread pass **{}: the same shape is the same key
    w = warmprof.watch(lambda a: a)
    x = np.zeros((3, 4))
    w(x)
    w(x, **{})
    with ThreadPoolExecutor(1) as pool:
        pool.submit(w, x).result()
    asyncio.run(asyncio.to_thread(w, x))
    s = w.stats()
    w.close()
    assert len(s["keys"]) == 1, s["keys"]
    assert s["keys"][0]["calls"] == 4
    assert [e["first"] for e in w.events()].count(True) == 1


async def _async_forward(x):
    return x


def _gen_forward(x):
    yield x


class _AsyncCall:
    async def __call__(self, x):
        return x


@pytest.mark.parametrize("fn", [functools.partial(lambda x: _async_forward(x)), lambda x: _async_forward(x), _AsyncCall(),
                                lambda x: _gen_forward(x)], ids=["partial", "lambda", "async_call", "generator"])
def test_a_call_that_returns_a_coroutine_or_generator_is_refused(fn):
    # watch() refuses an async function it can tell apart beforehand; these it sees only in the call's result
    w = warmprof.watch(fn)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(InputError, match="watch would time only its creation"):
            w(1)
        with pytest.raises(InputError):
            w(1)  # every time, not once
        gc.collect()
    w.close()
    # the coroutine it made was closed, not left to warn "never awaited" later
    assert not [m for m in seen if "never awaited" in str(m.message)], [str(m.message) for m in seen]
    assert w.stats()["errors"] == 2


def test_ctrl_c_in_a_clock_source_goes_up_and_leaves_the_watcher_working():
    state = {"raise": False, "reads": 0}

    def clock():
        state["reads"] += 1
        if state["raise"]:
            raise KeyboardInterrupt
        return (1000.0, 2000.0)

    called = []
    w = warmprof.watch(lambda a: called.append(a) or a, clock_source=clock, idle_s=0.02)
    w(1)
    time.sleep(0.05)  # an idle gap: the next call reads the clock
    state["raise"] = True
    with pytest.raises(KeyboardInterrupt):
        w(2)
    assert called == [1]  # the model was not called: Ctrl-C came before it, as from a plain call
    state["raise"] = False
    time.sleep(0.05)
    w(3)  # no call in flight was left counted: this one is after an idle gap again, and kept
    w.close()
    assert called == [1, 3]
    assert state["reads"] == 2
    assert [e["after_idle"] for e in w.events()] == [False, True]


_FORK_CHILD = textwrap.dedent("""
    import os, sys, threading, time
    import warmprof

    # a thread inside a watched call (in flight) and another making new keys without end (each one an event:
    # the slow path, under the watcher's lock); the main thread forks many times
    w = warmprof.watch(lambda k, block=None: block.wait() if block is not None else k, key=lambda k, block=None: k,
                       idle_s=0.05, max_keys=10**6)  # room for every key the churn makes: each one an event
    inside, release, stop = threading.Event(), threading.Event(), threading.Event()

    def held():
        inside.set()
        w(-1, block=release)

    def churn():
        k = 0
        while not stop.is_set():
            k += 1
            w(k)

    threading.Thread(target=held, daemon=True).start()
    inside.wait()
    threading.Thread(target=churn, daemon=True).start()
    time.sleep(0.01)
    hung = no_idle = 0  # counted apart: each fault shows whatever the other does
    for i in range(int(sys.argv[1])):
        pid = os.fork()
        if pid == 0:
            # the child: a new key goes through (no lock held for ever) and, after an idle gap, a call is kept
            # as the first after the gap (the parent's call in flight did not come along)
            w(10**9 + i)
            time.sleep(0.12)
            w(10**9 + i)
            ev = w.events()[-1]
            os._exit(0 if ev["after_idle"] else 3)
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.waitstatus_to_exitcode(status) == 3:
                    no_idle += 1
                elif os.waitstatus_to_exitcode(status) != 0:
                    print("child", i, "exit", os.waitstatus_to_exitcode(status), flush=True)
                    sys.exit(1)
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                hung += 1
                break
            time.sleep(0.005)
    stop.set()
    release.set()
    print("hung", hung, flush=True)
    print("no_idle", no_idle, flush=True)
    sys.exit(2 if hung or no_idle else 0)
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_fork_while_other_threads_are_inside_watch_leaves_a_working_child(tmp_path):
    script = tmp_path / "fork_child.py"
    script.write_text(_FORK_CHILD)
    p = subprocess.run([sys.executable, str(script), "20"], capture_output=True, text=True, timeout=1500)
    # no child blocks on its first new key (the watcher's lock reset after the fork), and each child keeps its
    # call after an idle gap (the parent's call in flight did not come along): two faults, each said alone
    assert "hung 0" in p.stdout, p.stdout + p.stderr
    assert "no_idle 0" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 0, p.stdout + p.stderr


def test_an_outliers_counters_read_before_it_are_said_and_its_wait_is_at_most_the_windows():
    # a call found to be an outlier only after it ran has its thread's counters from the last read (at most
    # 200 us back): the event says how far, and the stretch before the call is taken as on the CPU
    from warmprof import _native
    from warmprof.serving.watch import events

    n = _native.WatchCall.n_fields
    start, dur, before = 10_000_000, 2_000_000, 150_000
    values = {"key_hash": 1, "key": None, "args": (), "kwargs": None, "first": False, "outlier": True,
              "start_ns": start, "dur_ns": dur, "gap_ns": 0, "clock": None,
              # over the window (150 us before the call, then the call): 1.2 ms of CPU time
              "cpu_ns": 1_200_000, "minflt": 0, "majflt": 0, "nivcsw": 3, "compiles": 0, "compile_ns": 0,
              "calls_before": 20, "median_ns": 100_000.0, "cupti": None, "inblock": 0, "run_delay_ns": None,
              "cpu_exact": False, "usual_off_cpu_ns": 0.0, "nvcsw": 0, "counters_from_ns": start - before}
    order = ["key_hash", "key", "args", "kwargs", "first", "outlier", "start_ns", "dur_ns", "gap_ns", "clock", "cpu_ns",
             "minflt", "majflt", "nivcsw", "compiles", "compile_ns", "calls_before", "median_ns", "cupti", "inblock",
             "run_delay_ns", "cpu_exact", "usual_off_cpu_ns", "nvcsw", "counters_from_ns"]
    assert len(order) == n
    call = _native.WatchCall([values[k] for k in order])
    assert events.counters_before_ns(call) == before
    f = events.facts(call, idle_ns=10**9)
    # the window's time off the CPU, (150 us + 2 ms) - 1.2 ms = 0.95 ms, is all the call's: its CPU time 1.05 ms
    assert f.cpu_ns == 1_200_000 - before
    e = events.build(call, index=0, key="k", start_ns=0, idle_ns=10**9, dynamo=None,
                     costs=events.CallCosts(), reserved=(None, None))
    assert e["counters_before_us"] == pytest.approx(150.0)
    counted = [c for c in e["causes"] if c["source"] in ("off_cpu", "thread_blocked", "page_faults")]
    assert counted, e["causes"]
    assert all("us before the call began" in c["detail"] for c in counted)
    assert sum(c["ms"] for c in counted) <= 0.95 + 1e-9
