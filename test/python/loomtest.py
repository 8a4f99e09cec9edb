"""Helpers shared by the Python suite (the pytest process) and its peer processes
(peer.py): deterministic test data, digests, bounded waits, and a line-oriented JSON
channel over pipes.

Nothing here sleeps to synchronise: every wait is on an event (a request, a pipe, the
worker's event fd) and is bounded by a deadline, so a broken binding fails a test
instead of hanging it.
"""

import array
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time

import numpy as np

import loom

HERE = os.path.dirname(os.path.abspath(__file__))
PEER_SCRIPT = os.path.join(HERE, "peer.py")

# Bound of any single wait on Loom or on a peer (seconds). Generous: the machine is shared
# with builds, and a 4 MiB message over tcp under load can take a while.
WAIT = 60.0

# Message sizes of the two-process tests: empty, eager short, a few KiB (eager, several
# fragments on some transports), and rendezvous sizes.
SIZES = [0, 8, 5000, 1 << 20, 4 << 20]


def pattern(size, seed):
    """``size`` pseudo-random bytes (a numpy uint8 array), the same for the same seed in
    every process: both sides of a test can produce the expected data."""
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def as_bytes(buf):
    """The bytes of any object with the buffer protocol (a copy), for comparisons."""
    return memoryview(buf).cast("B").tobytes() if memoryview(buf).nbytes else b""


def digest(buf):
    """sha256 hex digest of the bytes of ``buf`` (anything with the buffer protocol)."""
    return hashlib.sha256(memoryview(buf).cast("B") if memoryview(buf).nbytes else b"").hexdigest()


# --- buffers of every kind the bindings must accept ----------------------------------------------

BUFFER_KINDS = ["bytes", "bytearray", "memoryview_slice", "array_d", "array_i",
                "numpy_u8", "numpy_i32", "numpy_f64", "numpy_c64"]


def make_buffer(kind, nbytes, seed):
    """A buffer of type ``kind`` holding ``nbytes`` bytes of pattern(nbytes, seed).

    ``nbytes`` must be a multiple of the element size of the kind (the sizes used are
    multiples of 8). The memoryview kind is a slice in the middle of a larger bytearray,
    so a binding that sent from the start of the underlying object would be caught."""
    raw = pattern(nbytes, seed)
    if kind == "bytes":
        return raw.tobytes()
    if kind == "bytearray":
        return bytearray(raw.tobytes())
    if kind == "memoryview_slice":
        backing = bytearray(b"\xee" * 24 + raw.tobytes() + b"\xdd" * 24)
        return memoryview(backing)[24:24 + nbytes]
    if kind == "array_d":
        return array.array("d", raw.tobytes())
    if kind == "array_i":
        return array.array("i", raw.tobytes())
    dtype = {"numpy_u8": np.uint8, "numpy_i32": np.int32, "numpy_f64": np.float64,
             "numpy_c64": np.complex64}[kind]
    return raw.view(dtype).copy()


def make_empty_like(kind, nbytes):
    """A writable buffer of ``nbytes`` bytes of the same family as ``kind`` (bytes, which
    is read-only, gets a bytearray), filled with a marker that no pattern starts with
    reliably, so an untouched receive buffer is noticed."""
    if kind in ("bytes", "bytearray"):
        return bytearray(b"\x5a" * nbytes)
    if kind == "memoryview_slice":
        backing = bytearray(b"\x5a" * (nbytes + 48))
        return memoryview(backing)[24:24 + nbytes]
    if kind == "array_d":
        return array.array("d", b"\x5a" * nbytes)
    if kind == "array_i":
        return array.array("i", b"\x5a" * nbytes)
    dtype = {"numpy_u8": np.uint8, "numpy_i32": np.int32, "numpy_f64": np.float64,
             "numpy_c64": np.complex64}[kind]
    return np.frombuffer(bytearray(b"\x5a" * nbytes), dtype=dtype).copy()


# --- bounded waits --------------------------------------------------------------------------------

def wait_all(requests, timeout=WAIT):
    """Waits for every request (each wait bounded by what is left of ``timeout``);
    returns their results, raising the first error."""
    end = time.monotonic() + timeout
    return [req.wait(timeout=max(0.0, end - time.monotonic())) for req in requests]


def progress_until(workers, predicate, timeout=WAIT, what="a condition"):
    """Progresses ``workers`` until ``predicate()`` is true; fails after ``timeout``.

    Sleeps on the workers' event fds when none has anything pending (arm()), so it costs
    no CPU while it waits for a peer: the 2-core test machine is shared."""
    if not isinstance(workers, (list, tuple)):
        workers = [workers]
    end = time.monotonic() + timeout
    while not predicate():
        busy = False
        for w in workers:
            while w.progress():
                busy = True
        if predicate():
            return
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        if not busy and all(w.arm() for w in workers):
            select.select([w.fileno() for w in workers], [], [], min(left, 0.5))


def fd_count():
    """Number of open file descriptors of this process (Linux)."""
    return len(os.listdir("/proc/self/fd"))


def rss_kib():
    """Resident set size of this process in KiB (Linux)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


# --- JSON lines over pipes ------------------------------------------------------------------------

class LineReader:
    """Reads newline-terminated JSON objects from a file descriptor without blocking
    beyond a deadline (select + os.read; Python's buffered readline could hold lines that
    select no longer sees)."""

    def __init__(self, fd):
        self.fd = fd
        self.pending = b""
        self.eof = False

    def poll(self):
        """The next complete line's object if one is buffered or readable now, else None."""
        line = self._take()
        if line is not None or self.eof:
            return line
        if select.select([self.fd], [], [], 0)[0]:
            self._fill()
        return self._take()

    def _take(self):
        if b"\n" not in self.pending:
            return None
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def _fill(self):
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            self.eof = True
        self.pending += chunk


def write_line(fd, obj):
    """Writes one JSON object as a line to ``fd`` (a pipe: one os.write per line)."""
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


class PeerError(AssertionError):
    """The peer process failed a command, died, or did not answer in time."""


class Peer:
    """A child process running peer.py with LOOM_TLS=``tls``: a Loom worker driven by
    JSON commands on its stdin, answering on its stdout (docs in peer.py).

    Replies carry the command's id; unsolicited events (an active message arrived, an
    endpoint failed) have an "event" key and are queued until a test asks for them.
    While it waits for a line, the parent progresses ``progress`` (a worker) if given:
    the peer may need the parent's progress to finish what it was asked (a rendezvous,
    an emulated put into the parent's memory)."""

    def __init__(self, tls, args=(), env=None):
        child_env = dict(os.environ)
        # The child imports the very package the parent imported.
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(loom.__file__)))
        child_env["PYTHONPATH"] = os.pathsep.join(
            [pkg_root, HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        if tls is not None:
            child_env["LOOM_TLS"] = tls
        child_env.update(env or {})
        self.tls = tls
        self.proc = subprocess.Popen([sys.executable, PEER_SCRIPT, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=child_env)
        self.pid = self.proc.pid
        self.reader = LineReader(self.proc.stdout.fileno())
        self.events = []
        self.next_id = 1
        try:
            self.ready = self.event("ready")
        except BaseException:
            self.kill()  # a peer that did not start must not outlive the test
            raise
        self.address = bytes.fromhex(self.ready["address"])

    # -- lines --
    def _line(self, deadline, progress):
        """The next line from the peer; progresses ``progress`` while none is there."""
        workers = [] if progress is None else (progress if isinstance(progress, (list, tuple)) else [progress])
        fd = self.reader.fd
        while True:
            line = self.reader.poll()
            if line is not None:
                return line
            if self.reader.eof:
                raise PeerError(f"peer {self.pid} closed its stdout (exit status {self.proc.poll()})")
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerError(f"peer {self.pid} did not answer in time")
            busy = False
            for w in workers:
                while w.progress():
                    busy = True
            if busy:
                continue
            fds = [fd]
            if workers and all(w.arm() for w in workers):
                fds += [w.fileno() for w in workers]
            elif workers:
                left = 0  # events pending: look at the pipe without blocking, then progress
            select.select(fds, [], [], min(left, 0.5))

    def send(self, cmd, **args):
        """Sends a command; returns its id (for reply())."""
        cid = self.next_id
        self.next_id += 1
        write_line(self.proc.stdin.fileno(), {"cmd": cmd, "id": cid, **args})
        return cid

    def reply(self, cid, progress=None, timeout=WAIT):
        """Waits for the reply to command ``cid``; raises PeerError if the command failed."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._line(deadline, progress)
            if "event" in line:
                self.events.append(line)
                continue
            if line.get("id") != cid:
                raise PeerError(f"unexpected reply {line} while waiting for command {cid}")
            if "error" in line:
                raise PeerError(f"peer command failed: {line['error']}")
            return line

    def call(self, cmd, progress=None, timeout=WAIT, **args):
        """send() then reply()."""
        return self.reply(self.send(cmd, **args), progress=progress, timeout=timeout)

    def event(self, name, progress=None, timeout=WAIT):
        """Waits for (and removes) the first event named ``name``."""
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self.events):
                if ev["event"] == name:
                    return self.events.pop(i)
            line = self._line(deadline, progress)
            if "event" not in line:
                raise PeerError(f"unexpected reply {line} while waiting for event {name}")
            self.events.append(line)

    # -- process --
    def kill(self):
        """SIGKILL, then reap (bounded)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=WAIT)

    def close(self, timeout=20):
        """Asks the peer to exit, kills it if it does not within ``timeout``; returns the
        exit status."""
        if self.proc.poll() is None:
            try:
                self.send("exit")
            except OSError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        return self.proc.returncode
