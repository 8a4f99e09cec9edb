"""Lifetimes (docs/python.md: Objects and lifetimes, Requests): objects made and dropped
or closed by the hundred leave no Python object, file descriptor or memory behind; a
request dropped before it completes keeps its buffer alive (and intact) until it does,
then lets it go; a child keeps its parent alive; closing a parent closes its children.

Checks that could crash the interpreter if the bindings got a lifetime wrong (use after
close) run in a child interpreter, so that a crash fails one test instead of the run."""

import gc
import os
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import loom
from loomtest import WAIT, digest, fd_count, pattern, progress_until, rss_kib


def churn(rounds, close):
    """``rounds`` times: a context, two workers, endpoints both ways, a listener, a
    mapping, completed and pending requests, active-message handlers; closed explicitly
    (``close``) or only dropped. Returns weak references to everything it made."""
    refs = []
    for i in range(rounds):
        ctx = loom.Context()
        a, b = ctx.worker(), ctx.worker()
        ab, ba = a.connect(b.address), b.connect(a.address)
        listener = a.listen(lambda conn: conn.reject(), host="127.0.0.1", port=0)
        arr = np.zeros(512, dtype=np.uint64)
        mh = ctx.mem_map(arr)
        rkey = ab.unpack_rkey(mh.pack_rkey())
        b.set_am_handler(7, lambda msg: None)
        buf = bytearray(64)
        recv = b.recv(buf, 1)
        send = ab.send(b"x" * 64, 1)
        am = ab.am_send(7, b"h", b"d")
        # Both workers progress: over tcp the connection needs both sides.
        progress_until([a, b], lambda reqs=(send, recv, am): all(r.done() for r in reqs), what="the churn's requests")
        pending = a.recv(bytearray(16), 99)  # never matched
        refs += [weakref.ref(o) for o in (ctx, a, b, ab, ba, listener, mh, rkey, recv, send, am, pending, arr)]
        if close:
            rkey.close()
            listener.close()
            ab.close()
            ba.close(force=True)
            mh.close()
            a.close()
            b.close()
            ctx.close()
        del ctx, a, b, ab, ba, listener, arr, mh, rkey, buf, recv, send, am, pending
    return refs


@pytest.mark.parametrize("close", [True, False], ids=["closed", "dropped"])
def test_no_objects_fds_or_memory_left_behind(tls, close):
    """After warm-up, 150 more rounds of churn() leave: no live object (weakrefs dead), the
    same number of fds, and RSS within 8 MiB of where it was."""
    churn(10, close)
    gc.collect()
    fds, rss = fd_count(), rss_kib()
    refs = churn(150, close)
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    assert not alive, f"{len(alive)} objects still alive, e.g. {alive[:5]}"
    assert fd_count() <= fds, f"fds grew from {fds} to {fd_count()}"
    grown = rss_kib() - rss
    bound = 8 * 1024 + asan_quarantine_kib()
    assert grown < bound, f"RSS grew by {grown} KiB over 150 rounds (bound {bound} KiB)"


def asan_quarantine_kib():
    """Under AddressSanitizer (run_pytest.sh preloads it for a sanitizer build), freed
    memory waits in ASan's quarantine before it is reused: that much RSS is ASan's."""
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        return 0
    for option in os.environ.get("ASAN_OPTIONS", "").split(":"):
        if option.startswith("quarantine_size_mb="):
            return int(option.split("=", 1)[1]) * 1024
    return 256 * 1024  # ASan's default


def test_context_managers_close_everything():
    """``with`` closes: the worker and the context are closed on leaving the block."""
    with loom.Context() as ctx:
        with ctx.worker() as w:
            ep = w.connect(w.address)
            ep.send(b"x", 1).wait(timeout=WAIT)
        assert w.closed and ep.closed
        with ctx.mem_map(length=4096) as mh:
            assert mh.length >= 4096
        with pytest.raises(loom.InvalidParam):
            mh.pack_rkey()
    with pytest.raises(loom.InvalidParam):
        ctx.worker()


def test_parent_close_closes_children():
    """ctx.close() closes its workers, their endpoints, listeners and mappings."""
    ctx = loom.Context()
    w = ctx.worker()
    ep = w.connect(w.address)
    listener = w.listen(lambda conn: None, host="127.0.0.1", port=0)
    mh = ctx.mem_map(length=4096)
    ctx.close()
    assert w.closed and ep.closed
    for call in (lambda: listener.address, lambda: mh.pack_rkey(), lambda: ep.send(b"x", 1)):
        with pytest.raises(loom.InvalidParam):
            call()


def test_children_keep_their_parent_alive():
    """A worker whose context was dropped still works (the context lives on, held by
    it); an endpoint whose worker was dropped still sends."""
    ctx = loom.Context()
    ctx_ref = weakref.ref(ctx)
    w = ctx.worker()
    del ctx
    gc.collect()
    assert ctx_ref() is not None
    peer = w  # one worker talking to itself
    ep = peer.connect(w.address)
    w_ref = weakref.ref(w)
    del w, peer
    gc.collect()
    assert w_ref() is not None
    buf = bytearray(5)
    recv = w_ref().recv(buf, 3)
    ep.send(b"still", 3).wait(timeout=WAIT)
    assert recv.wait(timeout=WAIT) == (3, 5) and buf == b"still"
    del ep, recv
    gc.collect()
    assert w_ref() is None and ctx_ref() is None


def test_dropped_send_request_keeps_its_buffer(fresh_pair):
    """A 4 MiB (rendezvous) send from a temporary array whose request and array are both
    dropped at once: the array stays alive while Loom may read it, the peer gets exactly
    its bytes, and once the send completed the array is freed."""
    p = fresh_pair
    data = pattern(4 << 20, 31)
    expected = digest(data)
    ref = weakref.ref(data)
    p.ep.send(data, 0x50)  # the Request is dropped at once
    del data
    gc.collect()
    assert ref() is not None, "the buffer of a running send was freed"
    # Churn the allocator: a freed buffer would be reused and overwritten here.
    junk = [np.full(4 << 20, i, dtype=np.uint8) for i in range(4)]
    del junk
    reply = p.peer.call("recv", size=4 << 20, tag=0x50, progress=p.worker)
    assert reply["status"] == "LOOM_OK" and reply["sha256"] == expected
    progress_until(p.worker, lambda: ref() is None, what="the completed send to release its buffer")


def test_send_from_a_temporary_bytes_object(fresh_pair):
    """ep.send(bytes(...), tag) with nothing kept: the peer gets the bytes intact."""
    p = fresh_pair
    p.ep.send(pattern(1 << 20, 32).tobytes(), 0x51)
    gc.collect()
    reply = p.peer.call("recv", size=1 << 20, tag=0x51, progress=p.worker)
    assert reply["sha256"] == digest(pattern(1 << 20, 32))


def test_dropped_receive_request_still_receives(fresh_pair):
    """A receive whose request and buffer were dropped still takes its message (the
    next receive of the tag gets the second one), and frees the buffer when done."""
    p = fresh_pair
    target = np.zeros(4096, dtype=np.uint8)
    ref = weakref.ref(target)
    p.worker.recv(target, 0x52)
    del target
    gc.collect()
    assert ref() is not None, "the buffer of a pending receive was freed"
    second = np.zeros(4096, dtype=np.uint8)
    req = p.worker.recv(second, 0x52)
    p.peer.call("send", msgs=[{"tag": 0x52, "size": 4096, "seed": 1}, {"tag": 0x52, "size": 4096, "seed": 2}],
                progress=p.worker)
    assert req.wait(timeout=WAIT) == (0x52, 4096)
    assert np.array_equal(second, pattern(4096, 2))
    progress_until(p.worker, lambda: ref() is None, what="the completed receive to release its buffer")


def test_dropped_pending_request_then_worker_closed(ctx):
    """A receive dropped while pending, then its worker closed: no crash, buffer freed."""
    w = ctx.worker()
    target = np.zeros(64, dtype=np.uint8)
    ref = weakref.ref(target)
    w.recv(target, 0x53)
    del target
    gc.collect()
    assert ref() is not None
    w.close()
    gc.collect()
    assert ref() is None


def test_many_requests_in_flight_then_dropped(two_workers):
    """2000 receives and sends, none kept by the test: all complete, nothing leaks."""
    a, b, ep = two_workers
    gc.collect()
    refs = []
    for i in range(2000):
        buf = np.zeros(8, dtype=np.uint8)
        refs.append(weakref.ref(buf))
        b.recv(buf, 0x1000 + i)
        ep.send(np.full(8, i % 256, dtype=np.uint8), 0x1000 + i)
    del buf
    progress_until([a, b], lambda: all(r() is None for r in refs), what="2000 requests to complete")


# --- checks that could crash: in a child interpreter -----------------------------------------------

def run_isolated(code):
    """Runs ``code`` in a child interpreter (same loom); returns (exit status, output)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(loom.__file__))), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(code)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=WAIT, text=True)
    return proc.returncode, proc.stdout


def test_listener_port_is_a_sound_int():
    """Listener.port (docs: ``.port``) is an int equal to .address[1], read any number of
    times (a dangling return value would crash or corrupt it)."""
    status, out = run_isolated("""
        import gc, sys, loom
        with loom.Context() as ctx:
            w = ctx.worker()
            listener = w.listen(lambda conn: None, host="127.0.0.1", port=0)
            ports = [listener.port for _ in range(1000)]
            gc.collect()
            junk = [str(i) * 3 for i in range(100000)]
            assert all(type(p) is int and p == listener.address[1] for p in ports), ports[:3]
            assert sys.getrefcount(ports[0]) < 10000, sys.getrefcount(ports[0])
        print("ok")
    """)
    assert status == 0 and out.strip().endswith("ok"), out


def test_memoryview_of_allocated_memory_outliving_close():
    """A numpy view of memory Loom allocated (mem_map(length=N)) must not become a
    dangling pointer: close() refuses while it is exported (BufferError), or the memory
    stays valid until the last view goes."""
    status, out = run_isolated("""
        import numpy as np, loom
        ctx = loom.Context()
        mh = ctx.mem_map(length=1 << 20)
        view = np.frombuffer(mh, dtype=np.uint8)
        view[:] = 7
        try:
            mh.close()
        except BufferError:
            print("close refused while exported")
        view[:] = 9
        assert int(view.sum()) == 9 * (1 << 20)
        del view
        mh.close()
        ctx.close()
        print("ok")
    """)
    assert status == 0 and out.strip().endswith("ok"), out


def test_kept_active_message_after_its_worker_closed():
    """A rendezvous active message kept past its worker's close: receive() raises
    loom.LoomError (no crash), release() is harmless."""
    status, out = run_isolated("""
        import loom
        ctx = loom.Context()
        a, b = ctx.worker(), ctx.worker()
        ep = a.connect(b.address)
        kept = []
        b.set_am_handler(5, kept.append)
        send = ep.am_send(5, b"h", b"x" * 100000, rndv=True)
        while not kept:
            a.progress(); b.progress()
        b.close()
        try:
            kept[0].receive()
        except loom.LoomError as exc:
            print("raised", exc.status)
        kept[0].release()
        del kept
        a.close()
        ctx.close()
        print("ok")
    """)
    assert status == 0 and "raised" in out and out.strip().endswith("ok"), out
