"""Worker, Context and Listener basics (docs/python.md: Worker, Objects and lifetimes,
Constants): addresses, progress, the event fd (arm/wait, sleeping without the GIL),
Request.done() making no progress, listeners and connection requests between two
processes, context features."""

import select
import threading
import time

import numpy as np
import pytest

import loom
from loomtest import WAIT, Peer, pattern, progress_until


def test_version_and_constants():
    assert isinstance(loom.__version__, str) and loom.__version__
    assert loom.TAG_MASK_FULL == (1 << 64) - 1


def test_context_features_and_name():
    """A context with a subset of features, and a named one, make working workers."""
    with loom.Context(features={"tag", "wakeup"}, name="pytest-ctx") as ctx:
        w = ctx.worker()
        ep = w.connect(w.address)
        buf = bytearray(4)
        recv = w.recv(buf, 1)
        ep.send(b"tags", 1)
        assert recv.wait(timeout=WAIT) == (1, 4) and buf == b"tags"
    with loom.Context(features=["tag", "am", "stream", "rma", "amo", "wakeup"]) as ctx:
        assert ctx.worker().address


def test_worker_address_is_bytes_and_distinct(ctx):
    a, b = ctx.worker(), ctx.worker()
    assert isinstance(a.address, bytes) and len(a.address) > 0
    assert a.address != b.address
    assert a.address == a.address


def test_progress_counts_events(two_workers):
    """progress() returns how many events it handled: some once a message came, and
    the receive completes from it."""
    a, b, ep = two_workers
    buf = bytearray(8)
    recv = b.recv(buf, 5)
    ep.send(b"12345678", 5).wait(timeout=WAIT)
    total = 0
    end = time.monotonic() + WAIT
    while not recv.done() and time.monotonic() < end:
        a.progress()
        total += b.progress()
    assert recv.done() and total > 0
    assert isinstance(b.progress(), int)


def test_done_makes_no_progress(fresh_pair):
    """Request.done() only looks: a message the peer already sent (its eager send done)
    does not complete our receive until we progress."""
    p = fresh_pair
    # First a message with progress: the connection is up, the next send needs nothing from us.
    warm = p.worker.recv(bytearray(8), 0x5F)
    p.peer.call("send", msgs=[{"tag": 0x5F, "size": 8, "seed": 0}], progress=p.worker)
    warm.wait(timeout=WAIT)
    buf = bytearray(8)
    recv = p.worker.recv(buf, 0x60)
    p.peer.call("send", msgs=[{"tag": 0x60, "size": 8, "seed": 1}])  # no progress here meanwhile
    for _ in range(1000):
        assert not recv.done()
    assert recv.status == "LOOM_INPROGRESS"
    progress_until(p.worker, recv.done, what="the receive")
    assert bytes(buf) == pattern(8, 1).tobytes()


def test_blocking_style_with_arm_and_wait(fresh_pair):
    """The documented sleep: arm() True -> wait() until an event, False -> progress again.
    A receive of the peer's 1 MiB message completes that way."""
    p = fresh_pair
    w = p.worker
    assert isinstance(w.fileno(), int) and w.fileno() >= 0
    buf = np.zeros(1 << 20, dtype=np.uint8)
    recv = w.recv(buf, 0x61)
    cid = p.peer.send("send", msgs=[{"tag": 0x61, "size": 1 << 20, "seed": 2}])
    end = time.monotonic() + WAIT
    while not recv.done():
        assert time.monotonic() < end, "the receive did not complete"
        if w.progress():
            continue
        if w.arm():
            # Bounded: select on the fd first (wait() has no timeout); wait() then returns.
            if select.select([w.fileno()], [], [], 1.0)[0]:
                w.wait()
    assert np.array_equal(buf, pattern(1 << 20, 2))
    assert p.peer.reply(cid, progress=w)["statuses"] == ["LOOM_OK"]


def test_wait_releases_the_gil(fresh_pair):
    """While the main thread sleeps in worker.wait(), another Python thread runs: it tells
    the peer to send, which wakes the wait. (A wait holding the GIL would leave the peer
    untold: it then sends anyway after its bound, and reports that nobody told it.)"""
    p = fresh_pair
    w = p.worker
    buf = bytearray(16)
    recv = w.recv(buf, 0x62)
    cid = p.peer.send("send_when_told", tag=0x62, size=16, seed=3, bound=20.0)
    while w.progress():
        pass
    assert w.arm(), "events pending before anything was sent"
    told = threading.Event()

    def tell():
        p.peer.send("go")
        told.set()

    # The delay only makes it likely that the main thread is inside wait() when the
    # thread runs (had it run earlier, the test would pass without proving anything).
    thread = threading.Timer(0.2, tell)
    thread.start()
    w.wait()
    thread.join(timeout=WAIT)
    progress_until(w, recv.done, what="the peer's message")
    assert told.is_set()
    assert p.peer.reply(cid, progress=w)["told"], "the peer was not told while we waited: wait() held the GIL"
    assert bytes(buf) == pattern(16, 3).tobytes()


def test_flush_and_fence_of_a_worker(two_workers):
    """Worker.flush() completes (after the sends before it), fence() returns."""
    a, b, ep = two_workers
    recv = b.recv(bytearray(1 << 20), 7)
    ep.send(pattern(1 << 20, 4), 7)
    a.fence()
    flush = a.flush()
    progress_until([a, b], lambda: flush.done() and recv.done(), what="the flush and the receive")
    assert flush.status == "LOOM_OK"


@pytest.fixture(params=["shm", "tcp"])
def peer_listening(request, monkeypatch):
    """A peer process with a listener on 127.0.0.1, this process on the same transport."""
    monkeypatch.setenv("LOOM_TLS", request.param)
    peer = Peer(request.param, args=["--listen"])
    yield peer
    peer.close()


def test_connect_to_a_listener_and_talk(peer_listening, ctx):
    """connect_to(host, port) reaches the peer's listener, whose on_connection sees our
    address (conn.client_address) and accepts; tagged messages flow both ways."""
    peer = peer_listening
    w = ctx.worker()
    ep = w.connect_to("127.0.0.1", peer.ready["port"])
    accepted = peer.event("accepted", progress=w)
    assert accepted["host"] == "127.0.0.1" and accepted["port"] > 0
    data = pattern(100_000, 5)
    back = np.zeros(100_000, dtype=np.uint8)
    cid = peer.send("echo", size=100_000, tag=0x70, reply_tag=0x71)
    recv = w.recv(back, 0x71)
    ep.send(data, 0x70).wait(timeout=WAIT)
    recv.wait(timeout=WAIT)
    peer.reply(cid, progress=w)
    assert np.array_equal(back, data)
    ep.close().wait(timeout=WAIT)


def test_listener_here_accepts_and_rejects(ctx, monkeypatch):
    """Our listener on 127.0.0.1: .address names it; a peer process connects twice, we
    accept the first (it can send to us) and reject the second (its connect_to fails)."""
    monkeypatch.setenv("LOOM_TLS", "tcp")
    w = ctx.worker()
    seen = []

    def on_connection(conn):
        host, port = conn.client_address
        seen.append((host, port))
        if len(seen) == 1:
            seen.append(conn.accept())
        else:
            conn.reject()

    listener = w.listen(on_connection, host="127.0.0.1", port=0)
    host, port = listener.address
    assert host == "127.0.0.1" and isinstance(port, int) and port > 0
    peer = Peer("tcp")
    try:
        peer.call("connect_to", host="127.0.0.1", port=port, progress=w)
        assert len(seen) == 2 and seen[0][0] == "127.0.0.1" and isinstance(seen[1], loom.Endpoint)
        buf = bytearray(8)
        recv = w.recv(buf, 0x80)
        peer.call("send", msgs=[{"tag": 0x80, "size": 8, "seed": 6}], progress=w)
        assert recv.wait(timeout=WAIT) == (0x80, 8) and bytes(buf) == pattern(8, 6).tobytes()
        with pytest.raises(Exception) as info:
            peer.call("connect_to", ep="second", host="127.0.0.1", port=port, progress=w)
        assert "REJECTED" in str(info.value) or "ConnectionError" in str(info.value), info.value
    finally:
        peer.close()
    listener.close()
    listener.close()  # idempotent
