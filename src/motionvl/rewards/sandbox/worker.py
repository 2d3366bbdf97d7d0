"""The worker process that runs one candidate's generated terms (the child side of isolation.py).

Started as `python -I -c BOOT <package root> <socket fd>` in an empty directory with a minimal
environment. It compiles the candidate itself (compiler warnings captured, never printed), maps
the state, loads every numpy module its wrappers may need, then limits itself before any term
runs: no bytes written to files, no new file descriptor at all (every lower number is taken, so
no file or socket can be opened), no processes, an address-space cap, and before each call a
CPU-time limit a little above that call's deadline; its stderr, which the parent reads only to
say why a start failed, goes to /dev/null from then on. The state arrives as a read-only mapping
of shared memory (the parent writes it; here it cannot be written by any route), sized for a
batch of up to `capacity` environments: a call names how many rows it uses, and only a batch
larger than the mapping, or of other fields, means a new worker. The term outputs and each
term's CPU time go back over the socket. Whatever a term does, the parent's deadline and these
limits end it; the worker never answers for the parent's state because it never holds it.

Protocol. Start-up, as messages (an 8-byte header with the JSON and payload lengths, the JSON):
  parent -> {"op": "load", "source", "filename", "terms": [names], "memory_bytes", "cpu_s",
             "layout": {"size", "fields": [[name, dtype, shape, offset, per_env]], "joint_names",
                        "joint_roles"}}   (a per-env field's shape has the capacity as its first dimension)
            + two file descriptors: a read-write 8-byte progress page (the index of the running
            term, for the parent's message when it has to stop a call; a negative START_PHASES
            value while starting) and the state mapping, read-only
  worker -> {"ok": true} | {"problems": [...]}
Then per call, fixed binary records (no parsing on the training loop's path):
  parent -> CALL (seq, dt, gait_period, N)
  worker -> REPLY (seq, -1, K x N x 8 + K x 8) + the K x N float64 outputs + K float64 CPU seconds
          | REPLY (seq, k, length) + the JSON list of problems of term k
"""

from __future__ import annotations

import json
import math
import mmap
import os
import resource
import socket
import struct
import time

HEADER = struct.Struct("<II")
CALL = struct.Struct("<Qddq")  # seq, dt, gait_period, environments in this call
REPLY = struct.Struct("<Qqq")  # seq, index of the failing term (-1: none), length of what follows
MAX_FDS = 2
START_PHASES = {-1: "compiling the candidate", -2: "loading numpy's modules", -3: "limiting itself"}
"""Progress page values while a worker starts (what a start that overruns its deadline was doing)."""
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
        "from motionvl.rewards.sandbox.worker import main; main(int(sys.argv[2]))")


class ChannelClosed(Exception):
    """The other side closed the socket."""


def send(sock: socket.socket, message: dict, payload: bytes | memoryview = b"", fds=()) -> None:
    data = json.dumps(message).encode()
    head = HEADER.pack(len(data), len(payload))
    if fds:
        socket.send_fds(sock, [head], list(fds))
        sock.sendall(data)
    else:
        sock.sendall(head + data)
    if len(payload):
        sock.sendall(payload)


# With a deadline, a wait polls in slices this long: a Ctrl-C that the kernel hands to another thread
# (DDS, torch) only sets Python's flag, which the main thread acts on when it next runs Python code.
SIGNAL_CHECK_S = 0.1


def recv_exact(sock: socket.socket, size: int, deadline: float | None = None) -> bytearray:
    """`size` bytes; with a deadline (time.monotonic()), socket.timeout once it passes."""
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("timed out")
            sock.settimeout(min(remaining, SIGNAL_CHECK_S))
            try:
                n = sock.recv_into(view[got:])
            except socket.timeout:
                continue
        else:
            n = sock.recv_into(view[got:])
        if n == 0:
            raise ChannelClosed()
        got += n
    return buf


def recv(sock: socket.socket) -> tuple[dict, bytearray, list]:
    """One message: (JSON, payload, received file descriptors). Honours the socket's timeout."""
    head, fds, _, _ = socket.recv_fds(sock, HEADER.size, MAX_FDS)
    if not head:
        raise ChannelClosed()
    if len(head) < HEADER.size:
        head += recv_exact(sock, HEADER.size - len(head))
    json_len, payload_len = HEADER.unpack(head)
    message = json.loads(recv_exact(sock, json_len))
    return message, recv_exact(sock, payload_len), fds


def _lowest_free_fd() -> int:
    fd = 0
    while True:
        try:
            os.fstat(fd)
        except OSError:
            return fd
        fd += 1


def _limit_resources(memory_bytes: int) -> None:
    """Limits before any term runs (defence in depth behind the static rules and the guards)."""
    with open("/proc/self/status") as status:
        vm_bytes = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) * 1024
    limits = (
        (resource.RLIMIT_AS, vm_bytes + memory_bytes),
        (resource.RLIMIT_FSIZE, 0),  # no bytes written to any file
        (resource.RLIMIT_NOFILE, _lowest_free_fd()),  # every number below is taken: no new descriptor at all
        (resource.RLIMIT_NPROC, 0),  # no new processes (not enforced for root; nothing can fork anyway)
        (resource.RLIMIT_CORE, 0),
    )
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass


def _limit_cpu(seconds: float) -> None:
    """Soft CPU limit `seconds` above what this process has used (SIGXCPU ends it beyond)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + seconds)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass


def main(fd: int) -> None:
    import warnings

    import numpy as np

    from motionvl.rewards.sandbox.errors import RewardCodeError, problem
    from motionvl.rewards.sandbox.instrument import compile_code
    from motionvl.rewards.sandbox.namespace import warm_up
    from motionvl.rewards.sandbox.outputs import evaluate_term
    from motionvl.rewards.state import RewardState

    sock = socket.socket(fileno=fd)
    request, _, fds = recv(sock)
    progress = np.frombuffer(mmap.mmap(fds[0], 8), dtype=np.int64)
    layout = request["layout"]
    mapping = mmap.mmap(fds[1], layout["size"], access=mmap.ACCESS_READ)
    for received in fds:
        os.close(received)
    views = {name: (np.frombuffer(mapping, dtype=np.dtype(dtype), count=math.prod(shape), offset=offset).reshape(shape),
                    per_env) for name, dtype, shape, offset, per_env in layout["fields"]}
    joint_names = tuple(layout["joint_names"])
    joint_roles = tuple(tuple(r) for r in layout["joint_roles"])
    progress[0] = -1
    try:
        compiled = compile_code(request["source"], filename=request["filename"])
        terms = [compiled.terms[name] for name in request["terms"]]
    except RewardCodeError as exc:
        send(sock, {"problems": exc.problems})
        return
    progress[0] = -2
    warm_up()
    progress[0] = -3
    warnings.simplefilter("ignore")  # a term's run-time warnings are nobody's business: its output is checked
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # nothing a term does can fill the parent's stderr pipe and block on it
    os.close(devnull)
    _limit_resources(int(request["memory_bytes"]))
    cpu_s = float(request["cpu_s"])
    send(sock, {"ok": True})

    empty = {name: None for name in RewardState.__dataclass_fields__}
    while True:
        try:
            seq, dt, gait_period, n = CALL.unpack(recv_exact(sock, CALL.size))
        except ChannelClosed:
            return
        _limit_cpu(cpu_s)
        fields = {name: view[:n] if per_env else view for name, (view, per_env) in views.items()}
        state = RewardState(**{**empty, **fields, "dt": dt, "gait_period": gait_period, "joint_names": joint_names,
                               "joint_roles": joint_roles})
        out = np.empty((len(terms), n))
        cpu = np.zeros(len(terms))
        failed, problems = -1, []
        with compiled.guard.call(n):  # all terms of the call share one work budget too
            for k, term in enumerate(terms):
                progress[0] = k
                start = time.thread_time()
                try:
                    out[k] = evaluate_term(term, state)
                except RewardCodeError as exc:
                    failed, problems = k, exc.problems
                    break
                except MemoryError:
                    failed, problems = k, [problem(term.line, "memory", "the term ran out of the worker's memory; "
                                                   "keep arrays at (N,) or (N, J)")]
                    break
                cpu[k] = time.thread_time() - start
        payload = out.tobytes() + cpu.tobytes() if failed < 0 else json.dumps(problems).encode()
        sock.sendall(REPLY.pack(seq, failed, len(payload)) + payload)
