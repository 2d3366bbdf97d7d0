"""Where generated terms run: in a worker process with limits and a deadline (training and the check),
or in this process (only to measure what the isolation costs).

`IsolatedTerms` starts one worker per candidate (worker.py) on its first call and keeps it for
the run. Each call copies the state fields the code reads into shared memory that the worker can
only map read-only (sized for the largest batch so far: a smaller batch uses its first rows, a
larger one or other fields get a new worker and mapping), sends one small message, and waits for
the outputs at most `deadline_s`: a call that does not return by then has its worker killed (the
whole process group) and fails with the term it was running named; so does a worker that dies
(CPU, memory or file limits, a fault), and one that fails to start says why (what it was doing,
its last words). With a `cost` (cost.StepCost), each call's CPU time per term, as the worker
measured it, is held against the reference reward's on the same batch. A failure is final for
that object: every later call raises the same error, so training stops on the first one.
Interrupting a call (Ctrl-C) kills the worker too; the next call starts a fresh one, never
reading a stale answer.

`InProcessTerms` runs the same guarded terms on frozen copies of the state in this process: the
same results and the same static and run-time guards, but no deadline, no memory cap and no
crash containment. `motionvl bench train --reward-isolation in-process` uses it to measure the
worker's cost; nothing trains on it by default.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

import numpy as np

from motionvl.rewards.messages import excerpt
from motionvl.rewards.sandbox import worker
from motionvl.rewards.sandbox.errors import RewardCodeError, problem
from motionvl.rewards.sandbox.instrument import CompiledCode
from motionvl.rewards.sandbox.outputs import OUTPUT_LIMIT, check_range, evaluate_term
from motionvl.rewards.sandbox.readonly import frozen_state
from motionvl.rewards.state import PER_ROBOT_FIELDS, RewardState

CALL_DEADLINE_S = 2.0
"""Longest wall time one call of a candidate's terms may take in training (all its terms on one
batch); a call within the work budget takes milliseconds even at thousands of environments."""
START_DEADLINE_S = 60.0
"""Longest wall time a worker may take to start and compile the candidate (a loaded machine)."""
MEMORY_HEADROOM_BYTES = 512 << 20
"""Address space a worker may add to what it holds after start-up (numpy, the compiled candidate)."""
_CHILD_ENV = {"PATH": os.defpath, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_ALIGN = 64
_SIGNAL_REASONS = {
    signal.SIGXCPU: "its CPU-time limit", signal.SIGKILL: "a kill", signal.SIGSEGV: "a memory fault",
    signal.SIGBUS: "a memory fault", signal.SIGXFSZ: "its file-size limit", signal.SIGABRT: "an abort",
}


def _array_fields(state: RewardState, fields) -> list[tuple[str, np.ndarray]]:
    out = []
    for name in sorted(fields):
        value = getattr(state, name, None)
        if isinstance(value, np.ndarray):
            out.append((name, value))
    return out


class InProcessTerms:
    """The candidate's terms evaluated here, on frozen copies of the fields they read."""

    def __init__(self, compiled: CompiledCode, names=None, *, cost=None):
        self.compiled = compiled
        self.terms = [compiled.terms[n] for n in (names if names is not None else compiled.terms)]
        self.cost = cost

    def evaluate(self, state: RewardState) -> dict[str, np.ndarray]:
        view = frozen_state(state, self.compiled.fields)
        out, cpu = {}, np.zeros(len(self.terms))
        with self.compiled.guard.call(state.num_envs):
            for k, term in enumerate(self.terms):
                start = time.thread_time()
                out[term.name] = evaluate_term(term, view)
                cpu[k] = time.thread_time() - start
        if self.cost is not None:
            self.cost.record(state, cpu, self.terms)
        return out

    def close(self) -> list[str]:
        return []


@dataclasses.dataclass
class _Worker:
    proc: subprocess.Popen
    sock: socket.socket
    workdir: str
    progress: np.ndarray
    layout_key: tuple  # the field names, dtypes and shapes bar N (and joint names) of the states it maps
    capacity: int  # the most environments a call can hold
    views: tuple  # (name, this side's writable view into the shared state, per_env) per field


def _stop(w: _Worker) -> list[str]:
    """Kill the worker's process group, reap it, and return the names of files it left behind."""
    try:
        os.killpg(w.proc.pid, signal.SIGKILL)  # the group we created; not yet reaped, so still ours
    except (ProcessLookupError, PermissionError):
        pass
    w.proc.wait()
    w.sock.close()
    if w.proc.stderr is not None:
        w.proc.stderr.close()
    leftovers = sorted(os.listdir(w.workdir)) if os.path.isdir(w.workdir) else []
    shutil.rmtree(w.workdir, ignore_errors=True)
    return leftovers


class IsolatedTerms:
    """The candidate's terms evaluated in a limited worker process with a deadline per call."""

    def __init__(self, compiled: CompiledCode, names=None, *, deadline_s: float = CALL_DEADLINE_S,
                 start_deadline_s: float = START_DEADLINE_S, memory_bytes: int = MEMORY_HEADROOM_BYTES, cost=None):
        """cost: a cost.StepCost each call's per-term CPU time is recorded with (None: no bound beyond the
        deadline and the guards)."""
        self.compiled = compiled
        self.cost = cost
        self.terms = [compiled.terms[n] for n in (names if names is not None else compiled.terms)]
        self.deadline_s, self.start_deadline_s, self.memory_bytes = float(deadline_s), float(start_deadline_s), memory_bytes
        self._worker: _Worker | None = None
        self._owner = os.getpid()
        self._seq = 0
        self._failure: RewardCodeError | None = None
        self._lock = threading.Lock()
        self._finalizer = None
        self._cpu = np.zeros(len(self.terms))  # each term's CPU seconds in the last call, as the worker measured

    # ------------------------------------------------------------------ public
    def evaluate(self, state: RewardState) -> dict[str, np.ndarray]:
        """{term name: (N,) float64} for this state; RewardCodeError (final) when a term fails, overruns its
        deadline or its worker dies."""
        with self._lock:
            if self._failure is not None:
                raise RewardCodeError(self._failure.problems)
            if not self.terms:
                return {}
            try:
                values = self._call(state)
                if self.cost is not None:
                    self.cost.record(state, self._cpu, self.terms)
                return values
            except RewardCodeError as exc:
                self._failure = exc
                self._shutdown()
                raise
            except BaseException:  # interrupted mid-call: the worker's answer would be stale
                self._shutdown()
                raise

    def close(self) -> list[str]:
        """Stop the worker; returns the names of any files it left in its working directory."""
        with self._lock:
            return self._shutdown()

    # ------------------------------------------------------------------ the worker's life
    def _shutdown(self) -> list[str]:
        w, self._worker = self._worker, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return _stop(w) if w is not None and self._owner == os.getpid() else []

    def _start(self, fields, state: RewardState, key: tuple) -> _Worker:
        """A worker for states of this layout (field dtypes and shapes bar N) and up to this batch's N: it maps
        the state once, read-only, and is replaced when a larger batch or another layout comes (it can open no
        new descriptor for one)."""
        layout, offset, capacity = [], 0, state.num_envs
        for name, value in fields:
            per_env = name not in PER_ROBOT_FIELDS
            layout.append([name, value.dtype.str, list(value.shape), offset, per_env])
            offset += -(-value.nbytes // _ALIGN) * _ALIGN
        size = max(offset, _ALIGN)
        workdir = tempfile.mkdtemp(prefix="motionvl-reward-worker-")
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        package_root = str(Path(__file__).resolve().parents[3])
        try:
            # -I: no PYTHON* variables, user site or cwd on the path; an empty cwd; its own process group
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", worker.BOOT, package_root, str(child.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir,
                env=_CHILD_ENV, start_new_session=True, pass_fds=(child.fileno(),))
        finally:
            child.close()
        progress_fd = os.memfd_create("motionvl-reward-progress", os.MFD_CLOEXEC)
        state_fd = os.memfd_create("motionvl-reward-state", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        readonly_fd = -1
        try:
            os.ftruncate(progress_fd, 8)
            progress = np.frombuffer(mmap.mmap(progress_fd, 8), dtype=np.int64)
            os.ftruncate(state_fd, size)
            fcntl.fcntl(state_fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            shared = mmap.mmap(state_fd, size)
            readonly_fd = os.open(f"/proc/self/fd/{state_fd}", os.O_RDONLY | os.O_CLOEXEC)  # the worker's end
            views = tuple((name, np.frombuffer(shared, dtype=np.dtype(dtype), count=int(np.prod(shape)), offset=off)
                           .reshape(shape), per_env) for name, dtype, shape, off, per_env in layout)
            w = _Worker(proc, parent, workdir, progress, key, capacity, views)
            self._finalizer = weakref.finalize(self, _stop, w)
            worker.send(parent, {"op": "load", "source": self.compiled.source, "filename": self.compiled.filename,
                                 "terms": [t.name for t in self.terms], "memory_bytes": self.memory_bytes,
                                 "cpu_s": self.deadline_s + 1.0,
                                 "layout": {"size": size, "fields": layout, "joint_names": list(state.joint_names),
                                            "joint_roles": [list(r) for r in state.joint_roles]}},
                        fds=[progress_fd, readonly_fd])
        finally:
            for fd in (progress_fd, state_fd, readonly_fd):
                if fd >= 0:
                    os.close(fd)
        reply = self._receive(w, time.monotonic() + self.start_deadline_s, starting=True)
        if "problems" in reply:
            raise RewardCodeError(reply["problems"])
        return w

    def _call(self, state: RewardState) -> dict[str, np.ndarray]:
        if self._worker is not None and self._owner != os.getpid():  # a forked copy: start its own worker
            self._worker, self._finalizer, self._owner = None, None, os.getpid()
        fields = _array_fields(state, self.compiled.fields)
        n, k = state.num_envs, len(self.terms)
        key = tuple((name, value.dtype.str, value.shape if name in PER_ROBOT_FIELDS else value.shape[1:])
                    for name, value in fields) + (tuple(state.joint_names), tuple(state.joint_roles))
        if self._worker is not None and (self._worker.layout_key != key or self._worker.capacity < n):
            self._shutdown()
        if self._worker is None:
            self._worker = self._start(fields, state, key)
        w = self._worker
        for (_, view, per_env), (_, value) in zip(w.views, fields):
            np.copyto(view[:n] if per_env else view, value, casting="unsafe")
        self._seq += 1
        w.progress[0] = 0
        deadline = time.monotonic() + self.deadline_s
        try:
            w.sock.sendall(worker.CALL.pack(self._seq, float(state.dt), float(state.gait_period), n))
            seq, failed, length = worker.REPLY.unpack(worker.recv_exact(w.sock, worker.REPLY.size, deadline))
            payload = worker.recv_exact(w.sock, length, deadline)
        except (TimeoutError, socket.timeout):
            raise RewardCodeError(self._deadline_problem(w, n, starting=False)) from None
        except (worker.ChannelClosed, ConnectionError):
            raise RewardCodeError(self._death_problem(w, n, starting=False)) from None
        if seq != self._seq:
            raise RewardCodeError(problem(1, "sandbox-error", "the worker answered out of turn"))
        if failed >= 0:
            raise RewardCodeError(json.loads(payload))
        if length != 8 * (n + 1) * k:
            raise RewardCodeError(problem(1, "sandbox-error", "the worker returned a malformed answer"))
        answer = np.frombuffer(payload, dtype=np.float64)
        out, self._cpu = answer[: n * k].reshape(k, n), answer[n * k:]
        # finite and within range, checked again here (the worker's word is not taken for it), all terms at once
        if not (np.isfinite(out).all() and np.abs(out).max(initial=0.0) <= OUTPUT_LIMIT):
            for term, row in zip(self.terms, out):
                check_range(term, _finite(term, row))
        return {term.name: row for term, row in zip(self.terms, out)}

    def _receive(self, w: _Worker, deadline: float, starting: bool = False) -> dict:
        """The worker's start-up answer (a message), within the deadline."""
        try:
            w.sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            return worker.recv(w.sock)[0]
        except (TimeoutError, socket.timeout):
            raise RewardCodeError(self._deadline_problem(w, 0, starting)) from None
        except (worker.ChannelClosed, ConnectionError, json.JSONDecodeError):
            raise RewardCodeError(self._death_problem(w, 0, starting)) from None

    def _running(self, w: _Worker):
        k = int(w.progress[0])
        return self.terms[k] if 0 <= k < len(self.terms) else self.terms[0]

    def _deadline_problem(self, w: _Worker, n: int, starting: bool) -> str:
        if starting:
            doing = worker.START_PHASES.get(int(w.progress[0]), "starting Python and importing numpy")
            last = _last_words(w)
            _stop(w)
            self._worker = None
            return problem(1, "deadline", f"the sandbox worker did not start within {self.start_deadline_s:g} s: it "
                           f"was still {doing}" + (f"; its last output: {last}" if last else
                                                   " (a loaded machine, or a candidate too large to compile quickly)"))
        _stop(w)
        self._worker = None
        term = self._running(w)
        return problem(term.line, "deadline", f"`{term.source_name}` did not return within {self.deadline_s:g} s on "
                       f"{n} environments, so its worker was stopped; make the computation cheaper")

    def _death_problem(self, w: _Worker, n: int, starting: bool) -> str:
        try:
            w.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
        code = w.proc.returncode
        last = _last_words(w) if starting else ""
        _stop(w)
        self._worker = None
        if starting:
            return problem(1, "sandbox-error", f"the sandbox worker failed to start: {last or f'exit status {code}'}")
        term = self._running(w)
        if code is not None and code < 0:
            sig = signal.Signals(-code)
            how = f"was killed by {sig.name} ({_SIGNAL_REASONS.get(sig, 'a signal')})"
        else:
            how = f"exited (status {code})"
        return problem(term.line, "crashed", f"the worker running `{term.source_name}` on {n} environments {how}; "
                       "keep the computation small and within the rules")


def _last_words(w: _Worker) -> str:
    """An excerpt of the last line a starting worker wrote to its stderr ('' if none), read without waiting."""
    if w.proc.stderr is None:
        return ""
    try:
        os.set_blocking(w.proc.stderr.fileno(), False)
        tail = (w.proc.stderr.read(1 << 16) or b"")[-2000:]
    except (OSError, ValueError):
        return ""
    lines = tail.decode(errors="replace").strip().splitlines()
    return excerpt(lines[-1].strip(), 160) if lines else ""


def _finite(term, row: np.ndarray) -> np.ndarray:
    if not np.isfinite(row).all():
        raise RewardCodeError(problem(term.line, "non-finite", f"`{term.source_name}` returned NaN/inf"))
    return row
