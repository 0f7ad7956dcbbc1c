"""Where batch jobs run: local worker processes, or a Dask distributed cluster.

Local: `--jobs N` worker processes, each started once (spawned: a fresh interpreter, not a
fork of a parent that already runs polars' threads) and fed one job at a time through its
own pipe, so that a trace that runs past `--timeout` or kills its worker costs only that
worker: it is killed (or found dead), replaced, and the trace gets a result row saying why.
A worker reports ready once its imports are done; a trace's time limit starts when the
trace is handed over, so start-up never counts against the first trace.

Dask: the same `run_job` as a task per trace on the cluster's workers. A task that kills
its worker process is retried by the scheduler (`distributed.scheduler.allowed-failures`)
and then reported as crashed; the time limit is kept inside the task (the analysis runs in
a thread the task stops waiting for; Dask cannot kill a running task).
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from multiprocessing.connection import wait

from .batch import Job, failed_result, run_job

READY = "ready"


def warm() -> None:
    """The imports every trace needs, done before a worker takes its first trace."""
    from scsitrace import core  # noqa: F401
    from scsitrace.reports import summary  # noqa: F401


def _worker_main(conn, work, prepare) -> None:
    """A local worker: heap set-up, imports, then jobs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C reaches the whole process group: the
    signal.signal(signal.SIGTERM, signal.SIG_DFL)    # parent stops its workers (no tracebacks here)
    from scsitrace import heap
    heap.keep_freed_memory()                     # before numpy (see heap.py)
    import contextlib
    import io
    if prepare is not None:
        prepare()
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # again: a library's import may take SIGINT over
    conn.send(READY)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        signal.signal(signal.SIGINT, signal.SIG_IGN)     # (polars installs a handler on first use)
        sink = io.StringIO()                     # a worker has no terminal of its own
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            result = work(job)
        conn.send(result)


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored and blocked while a worker process starts, in the main thread only
    (signal handlers can be set nowhere else). The worker inherits both: the mask stays with
    it and every thread it starts, so polars' native SIGINT handler (installed by its import,
    before the worker can ignore SIGINT again) is never run. A Ctrl-C in the parent meanwhile
    is held and delivered when the mask is restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()     # its first start unblocks SIGINT: done before the mask
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


class _Worker:
    def __init__(self, ctx, work, prepare):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, work, prepare), daemon=True)
        with _sigint_ignored():           # the child starts with Ctrl-C ignored: no window before
            self.proc.start()             # _worker_main ignores it, where a traceback could print
        child.close()
        self.ready = False
        self.job: Job | None = None
        self.deadline: float | None = None

    def give(self, job: Job, timeout: float | None) -> None:
        self.job = job
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.conn.send(job)

    def stop(self, kill: bool = False) -> None:
        """Idle workers are told to stop; a busy one is killed. An idle worker holds nothing
        worth a clean exit (tearing down polars and its threads takes seconds): it is terminated
        if it has not gone within a moment."""
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(0.2)
            if self.proc.is_alive():
                self.proc.terminate()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def timeout_reason(timeout: float) -> str:
    return f"no result within --timeout {timeout:g} s"


def death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def run_inline(jobs: list[Job], on_result=None, work=run_job) -> list[dict]:
    """Every job in this process, one after the other (`--jobs 0`: no start-up cost, no time
    limit, and a trace that crashes the process ends the batch)."""
    import contextlib
    import io
    results = []
    for job in jobs:
        with contextlib.redirect_stderr(io.StringIO()):   # no second progress bar under the batch's
            results.append(work(job))
        if on_result is not None:
            on_result(results[-1])
    return results


def run_local(jobs: list[Job], n: int, timeout: float | None = None, on_result=None, work=run_job,
              prepare=warm) -> list[dict]:
    """Run `work(job)` for every job in `n` worker processes; results in job order.
    `work` and `prepare` (run once as each worker starts) must be module-level functions:
    they are pickled by name into the workers."""
    ctx = multiprocessing.get_context("spawn")
    todo = deque(jobs)
    results: dict[int, dict] = {}
    workers = [_Worker(ctx, work, prepare) for _ in range(max(1, min(n, len(jobs))))]

    def finish(result: dict) -> None:
        results[result["trace_id"]] = result
        if on_result is not None:
            on_result(result)

    try:
        while todo or any(w.job is not None for w in workers):
            for w in workers:
                if w.ready and w.job is None and todo:
                    w.give(todo.popleft(), timeout)
            deadlines = [w.deadline for w in workers if w.job is not None and w.deadline is not None]
            wait_for = None if not deadlines else max(0.0, min(deadlines) - time.monotonic())
            ready = set(wait([w.conn for w in workers] + [w.proc.sentinel for w in workers], wait_for))
            for w in list(workers):
                if w.conn in ready or w.proc.sentinel in ready:
                    msg = _receive(w)
                    if msg == READY:
                        w.ready = True
                        continue
                    if msg is not None:
                        finish(msg)
                        w.job = w.deadline = None
                        continue
                    w.proc.join(5)               # the worker died
                    if w.job is not None:
                        finish(failed_result(w.job, "crashed", f"worker process died ({death(w.proc.exitcode)}) "
                                                               "while analysing this trace"))
                    elif not w.ready:
                        raise RuntimeError(f"a worker process failed to start ({death(w.proc.exitcode)})")
                elif w.job is not None and w.deadline is not None and time.monotonic() >= w.deadline:
                    finish(failed_result(w.job, "timeout", timeout_reason(timeout)))
                else:
                    continue
                w.stop(kill=True)                # dead or overdue: replaced while work is left
                workers.remove(w)
                if todo:
                    workers.append(_Worker(ctx, work, prepare))
    finally:
        for w in workers:
            w.stop()
    return [results[j.trace_id] for j in jobs]


def _receive(w: _Worker):
    """The worker's next message, or None when it is gone."""
    try:
        return w.conn.recv() if w.conn.poll() else None
    except (EOFError, OSError):
        return None


# ------------------------------------------------------------------ Dask

def _dask_task(job: Job, timeout: float | None) -> dict:
    """One trace on a Dask worker, within the time limit."""
    import threading
    box: list[dict] = []
    t = threading.Thread(target=lambda: box.append(run_job(job)), daemon=True, name=f"scsitrace-{job.trace_id}")
    t.start()
    t.join(timeout)
    if not box:
        return failed_result(job, "timeout", timeout_reason(timeout))
    return box[0]


CONNECT_S = 30          # to reach the scheduler, and then for a worker to be there (each)
MIN_CONNECT_S = 5       # the least --timeout allows for either (a connection takes a second or two)


def scheduling_wait(timeout: float | None) -> float:
    """How long a batch waits to reach the scheduler, for a worker to be there, or, once
    none is left, for one to come back: --timeout covers scheduling as it covers running
    (at least MIN_CONNECT_S), CONNECT_S without it."""
    return CONNECT_S if timeout is None else max(float(timeout), min(MIN_CONNECT_S, CONNECT_S))


def _connected(Client, address: str, timeout: float | None):
    """A client of the scheduler at `address` with at least one worker, or UsageError within
    scheduling_wait(timeout) each: an unreachable scheduler, a garbage address or a cluster
    without workers fails in bounded time, in one line."""
    from .errors import UsageError
    wait = scheduling_wait(timeout)
    try:
        client = Client(address, timeout=wait)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise UsageError(f"--scheduler {address}: cannot connect ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no answer'})") from None
    try:
        client.wait_for_workers(1, timeout=wait)
    except (OSError, TimeoutError) as exc:
        client.close()
        raise UsageError(f"--scheduler {address}: no worker joined within {wait:g} s") from exc
    return client


def run_dask(address: str, jobs: list[Job], timeout: float | None = None, on_result=None) -> list[dict]:
    """Run every job on the Dask cluster whose scheduler is at `address`; results in job order.
    Bounded when the cluster fails under the batch: traces left when no worker has been there
    for scheduling_wait(timeout) end as `timeout`; a lost scheduler ends every
    trace not yet back as `interrupted`; one line each, distributed's own logging silenced."""
    try:
        from distributed import Client
    except ImportError:
        from .errors import UsageError
        raise UsageError("--scheduler needs Dask distributed: pip install 'scsitrace[dask]'") from None
    results: dict[int, dict] = {}

    def finish(result: dict) -> None:
        results[result["trace_id"]] = result
        if on_result is not None:
            on_result(result)

    with _distributed_silenced(), _connected(Client, address, timeout) as client:
        client.run(warm)              # imports done before any trace's time limit starts
        futures = {client.submit(_dask_task, job, timeout, key=f"scsitrace-{os.getpid()}-{job.trace_id}-{time.time_ns()}",
                                 pure=False): job for job in jobs}
        _collect(client, futures, scheduling_wait(timeout), finish)
    return [results[j.trace_id] for j in jobs]


WORKER_CHECK_S = 5      # how long a stalled batch waits for the scheduler to show a worker


def _collect(client, futures: dict, stall: float, finish) -> None:
    """Results as they come; when none has come for `stall` seconds and the cluster has no
    worker (none joined within WORKER_CHECK_S), the traces left fail as `timeout`: the time
    limit covers waiting to be scheduled, not only running."""
    import concurrent.futures
    from distributed import wait
    pending = set(futures)
    while pending:
        try:
            done, pending = wait(pending, timeout=stall, return_when="FIRST_COMPLETED")
        except concurrent.futures.CancelledError:      # the scheduler is lost: its futures cancelled
            done = {f for f in pending if f.status in ("finished", "error", "cancelled", "lost")} or set(pending)
            pending -= done
        except TimeoutError:
            if _has_worker(client, min(WORKER_CHECK_S, stall)):
                continue                 # traces are running (each bounded by --timeout, if given)
            for fut in sorted(pending, key=lambda f: futures[f].trace_id):
                finish(failed_result(futures[fut], "timeout", f"no Dask worker to run this trace for {stall:g} s "
                                                              "(the cluster lost its workers)"))
            client.cancel(list(pending))
            return
        deadline = time.monotonic() + stall       # for the round's results, together
        connected = client.status == "running"
        for fut in sorted(done, key=lambda f: futures[f].trace_id):
            finish(_task_result(fut, futures[fut], max(0.1, deadline - time.monotonic()), connected))


def _has_worker(client, wait_s: float) -> bool:
    try:
        client.wait_for_workers(1, timeout=wait_s)
        return True
    except Exception:               # TimeoutError, or the scheduler is gone: no worker either way
        return False


def _task_result(fut, job: Job, wait_s: float, connected: bool = True) -> dict:
    """A finished task's result row, or the row saying why there is none (a result held by a
    worker that died before it was fetched waits for the trace to run again: `wait_s` at most)."""
    import asyncio
    import concurrent.futures
    if not connected and fut.status not in ("finished", "error", "cancelled"):
        return failed_result(job, "interrupted", "the Dask scheduler lost this trace before its result came back")
    try:
        return fut.result(timeout=wait_s)
    except TimeoutError:
        return failed_result(job, "timeout", "its result was lost with its Dask worker and no worker ran it "
                                             "again in time")
    except (concurrent.futures.CancelledError, asyncio.CancelledError) as exc:
        why = getattr(exc, "reason", None) or "cancelled"
        return failed_result(job, "interrupted", f"the Dask scheduler lost this trace before its result came back "
                                                 f"({why})")
    except OSError as exc:          # distributed's CommClosedError: the result's connection went down
        return failed_result(job, "interrupted", "the connection to the Dask cluster was lost before this "
                                                 f"trace's result came back ({type(exc).__name__})")
    except Exception as exc:   # KilledWorker after the scheduler's retries, or a lost task
        kind = type(exc).__name__
        if kind == "KilledWorker":
            return failed_result(job, "crashed", f"{kind}: the Dask worker running this trace died")
        first = str(exc).splitlines()[0] if str(exc) else ""
        return failed_result(job, "error", f"internal error: {kind}: {first}")


@contextlib.contextmanager
def _distributed_silenced():
    """distributed's loggers (each has its own level from Dask's config) quiet while the batch
    talks to the cluster: a lost scheduler or worker is told by one line per trace, not by
    distributed's tracebacks on stderr."""
    import logging
    loggers = [logging.getLogger(name) for name in ("distributed", "tornado", "asyncio")]
    loggers += [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
                if name.startswith("distributed.")]
    old = [(lg, lg.disabled, lg.handlers[:]) for lg in loggers]
    for lg in loggers:              # a logger made later propagates to "distributed": no handler there
        lg.disabled = True
        lg.handlers = [logging.NullHandler()] if lg.name == "distributed" else lg.handlers
    try:
        yield
    finally:
        for lg, disabled, handlers in old:
            lg.disabled, lg.handlers = disabled, handlers
