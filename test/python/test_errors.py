"""Errors (docs/python.md: Errors, Objects and lifetimes, deadline, cancel): closed
objects raise loom.InvalidParam, deadlines and cancels end requests with loom.TimedOut
and loom.Canceled, truncation raises loom.MessageTruncated, and a peer process killed
with SIGKILL fails the pending requests of its endpoint with loom.ConnectionError
instead of leaving them hanging. Every wait is bounded."""

import asyncio
import socket
import time

import numpy as np
import pytest

import loom
from loomtest import WAIT, digest, pattern, progress_until

CONNECTION_STATUSES = {"LOOM_ERR_CONNECTION_RESET", "LOOM_ERR_ENDPOINT_FAILURE", "LOOM_ERR_PEER_TIMEOUT",
                       "LOOM_ERR_UNREACHABLE", "LOOM_ERR_CONNECTION_REFUSED", "LOOM_ERR_NOT_CONNECTED",
                       "LOOM_ERR_REJECTED"}


def assert_invalid_param(call):
    """``call()`` raises loom.LoomError with status LOOM_ERR_INVALID_PARAM."""
    with pytest.raises(loom.LoomError) as info:
        call()
    assert info.value.status == "LOOM_ERR_INVALID_PARAM", info.value
    assert isinstance(info.value, loom.InvalidParam)
    assert info.value.code == -3 or loom.status_name(info.value.code) == "LOOM_ERR_INVALID_PARAM"


# --- the exceptions ------------------------------------------------------------------------------

def test_exception_classes():
    """Every class callers catch is a loom.LoomError, itself an Exception."""
    for cls in (loom.TimedOut, loom.Canceled, loom.MessageTruncated, loom.ConnectionError, loom.NoResource,
                loom.InvalidParam):
        assert issubclass(cls, loom.LoomError) and cls is not loom.LoomError
    assert issubclass(loom.LoomError, Exception)
    assert loom.status_name(0) == "LOOM_OK"


def test_truncation_error_carries_status_code_and_text(two_workers):
    """The exception of a truncated receive: .status, .code (its number, which
    status_name maps back), and a message with Loom's text."""
    a, b, ep = two_workers
    req = b.recv(bytearray(4), 1)
    ep.send(b"0123456789", 1).wait(timeout=WAIT)
    with pytest.raises(loom.MessageTruncated) as info:
        req.wait(timeout=WAIT)
    exc = info.value
    assert exc.status == "LOOM_ERR_MESSAGE_TRUNCATED"
    assert isinstance(exc.code, int) and exc.code < 0
    assert loom.status_name(exc.code) == exc.status
    assert str(exc)  # Loom's description, not empty
    assert req.status == "LOOM_ERR_MESSAGE_TRUNCATED"


# --- closed objects ------------------------------------------------------------------------------

def test_operations_on_a_closed_endpoint(two_workers, ctx):
    """Every operation of a closed endpoint raises InvalidParam; close() is idempotent."""
    a, b, ep = two_workers
    mh = ctx.mem_map(bytearray(64))
    rkey = ep.unpack_rkey(mh.pack_rkey())
    ep.close().wait(timeout=WAIT)
    assert_invalid_param(lambda: ep.send(b"x", 1))
    assert_invalid_param(lambda: ep.send(b"x", 1, sync=True))
    assert_invalid_param(lambda: ep.am_send(1, b"h", b"d"))
    assert_invalid_param(lambda: ep.stream_send(b"x"))
    assert_invalid_param(lambda: ep.stream_recv(bytearray(1)))
    assert_invalid_param(lambda: ep.put(b"12345678", mh.address, rkey))
    assert_invalid_param(lambda: ep.get(bytearray(8), mh.address, rkey))
    assert_invalid_param(lambda: ep.atomic("add", 1, mh.address, rkey))
    assert_invalid_param(lambda: ep.flush())
    assert_invalid_param(lambda: ep.fence())
    assert_invalid_param(lambda: ep.unpack_rkey(mh.pack_rkey()))
    ep.close()  # again: nothing to do, no error
    mh.close()


def test_force_close_returns_a_request(two_workers):
    """close(force=True) closes at once too: the endpoint is unusable, its request
    completes."""
    a, b, ep = two_workers
    req = ep.close(force=True)
    req.wait(timeout=WAIT)
    assert_invalid_param(lambda: ep.send(b"x", 1))


def test_operations_on_a_closed_worker(ctx):
    """A closed worker raises InvalidParam for everything; what it made is closed with it."""
    w = ctx.worker()
    peer = ctx.worker()
    ep = w.connect(peer.address)
    listener = w.listen(lambda conn: conn.reject(), host="127.0.0.1", port=0)
    w.close()
    assert w.closed and ep.closed
    for call in (lambda: w.progress(), lambda: w.address, lambda: w.fileno(), lambda: w.arm(),
                 lambda: w.recv(bytearray(1), 1), lambda: w.probe(1), lambda: w.flush(), lambda: w.fence(),
                 lambda: w.connect(peer.address), lambda: w.listen(lambda c: None),
                 lambda: w.set_am_handler(1, lambda m: None), lambda: ep.send(b"x", 1),
                 lambda: listener.address):
        assert_invalid_param(call)
    w.close()
    listener.close()
    peer.close()


def test_operations_on_a_closed_context():
    """A closed context closes its workers and mappings; all of them raise InvalidParam."""
    ctx = loom.Context()
    w = ctx.worker()
    mh = ctx.mem_map(length=4096)
    arr = np.zeros(16)
    mh2 = ctx.mem_map(arr)
    ctx.close()
    assert w.closed
    assert_invalid_param(lambda: ctx.worker())
    assert_invalid_param(lambda: ctx.mem_map(length=4096))
    assert_invalid_param(lambda: w.progress())
    assert_invalid_param(lambda: mh.pack_rkey())
    assert_invalid_param(lambda: mh2.address)
    ctx.close()
    arr.resize(32, refcheck=False)  # the mapping released the array's buffer


def test_closed_memory_handle_and_key(two_workers, ctx):
    """A closed MemoryHandle and a closed RemoteKey raise InvalidParam."""
    a, b, ep = two_workers
    mh = ctx.mem_map(bytearray(64))
    rkey = ep.unpack_rkey(mh.pack_rkey())
    address = mh.address
    rkey.close()
    assert_invalid_param(lambda: ep.put(b"12345678", address, rkey))
    rkey.close()
    mh.close()
    assert_invalid_param(lambda: mh.pack_rkey())
    with pytest.raises((loom.LoomError, BufferError)):
        memoryview(mh)


def test_pending_request_of_a_closed_worker_is_canceled(ctx):
    """Closing a worker completes its pending receive (Canceled): waiting on it returns
    at once instead of hanging."""
    w = ctx.worker()
    buf = bytearray(8)
    req = w.recv(buf, 5)
    w.close()
    assert req.done()
    with pytest.raises(loom.Canceled):
        req.wait(timeout=5)
    buf.extend(b"x")  # the buffer's export was released


# --- deadlines, timeouts, cancel -------------------------------------------------------------------

def test_deadline_on_a_receive_that_never_matches(two_workers):
    """deadline=0.2: the receive completes with TimedOut about then; the next message of
    that tag goes to the next receive, intact."""
    a, b, ep = two_workers
    buf = bytearray(8)
    start = time.monotonic()
    req = b.recv(buf, 0x10, deadline=0.2)
    with pytest.raises(loom.TimedOut) as info:
        req.wait(timeout=WAIT)
    elapsed = time.monotonic() - start
    assert 0.15 <= elapsed < 10, elapsed
    assert info.value.status == "LOOM_ERR_TIMED_OUT" and req.status == "LOOM_ERR_TIMED_OUT"
    assert buf == bytearray(8)
    nxt = b.recv(buf, 0x10)
    ep.send(b"ABCDEFGH", 0x10).wait(timeout=WAIT)
    assert nxt.wait(timeout=WAIT) == (0x10, 8) and buf == b"ABCDEFGH"


def test_deadline_not_reached_changes_nothing(two_workers):
    """A generous deadline on a receive that matches: it completes normally."""
    a, b, ep = two_workers
    buf = bytearray(4)
    req = b.recv(buf, 0x11, deadline=30.0)
    ep.send(b"abcd", 0x11, deadline=30.0).wait(timeout=WAIT)
    assert req.wait(timeout=WAIT) == (0x11, 4) and buf == b"abcd"


def test_wait_timeout_leaves_the_request_running(two_workers):
    """wait(timeout=...) raises TimedOut but the request goes on: a message sent later
    completes it normally."""
    a, b, ep = two_workers
    buf = bytearray(6)
    req = b.recv(buf, 0x12)
    with pytest.raises(loom.TimedOut):
        req.wait(timeout=0.2)
    assert not req.done() and req.status == "LOOM_INPROGRESS"
    ep.send(b"later!", 0x12).wait(timeout=WAIT)
    assert req.wait(timeout=WAIT) == (0x12, 6) and buf == b"later!"
    assert req.status == "LOOM_OK" and req.result == (0x12, 6)


def test_cancel_of_an_unmatched_receive(two_workers):
    """cancel() of a receive nobody matched: Canceled; the message sent afterwards goes to
    the next receive."""
    a, b, ep = two_workers
    first = bytearray(4)
    req = b.recv(first, 0x13)
    req.cancel()
    with pytest.raises(loom.Canceled) as info:
        req.wait(timeout=WAIT)
    assert info.value.status == "LOOM_ERR_CANCELED" and req.status == "LOOM_ERR_CANCELED"
    second = bytearray(4)
    nxt = b.recv(second, 0x13)
    ep.send(b"wxyz", 0x13).wait(timeout=WAIT)
    assert nxt.wait(timeout=WAIT) == (0x13, 4)
    assert second == b"wxyz" and first == bytearray(4)


def test_cancel_of_a_completed_request_changes_nothing(two_workers):
    """cancel() after completion: still LOOM_OK with its result."""
    a, b, ep = two_workers
    buf = bytearray(2)
    req = b.recv(buf, 0x14)
    ep.send(b"ok", 0x14).wait(timeout=WAIT)
    assert req.wait(timeout=WAIT) == (0x14, 2)
    req.cancel()
    assert req.status == "LOOM_OK" and req.result == (0x14, 2)


@pytest.mark.parametrize("size,sync", [(8, True), (1 << 20, False)], ids=["sync-8", "rndv-1MiB"])
def test_deadline_withdraws_an_unmatched_send(fresh_pair, size, sync):
    """A synchronous or rendezvous send the peer never receives, with deadline=0.3: it
    ends with TimedOut and is withdrawn (the peer's probe finds nothing); the next send of
    that tag arrives normally."""
    p = fresh_pair
    p.peer.call("ping", progress=p.worker)
    start = time.monotonic()
    req = p.ep.send(pattern(size, 1), 0x15, sync=sync, deadline=0.3)
    with pytest.raises(loom.TimedOut):
        req.wait(timeout=WAIT)
    assert time.monotonic() - start >= 0.25
    assert p.peer.call("probe", tag=0x15, progress=p.worker)["found"] is False
    cid = p.peer.send("recv", size=16, tag=0x15)
    p.ep.send(pattern(16, 2), 0x15).wait(timeout=WAIT)
    reply = p.peer.reply(cid, progress=p.worker)
    assert reply["length"] == 16 and reply["sha256"] == digest(pattern(16, 2))


# --- connections ---------------------------------------------------------------------------------

def free_port():
    """A TCP port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connect_to_a_port_nobody_listens_on(ctx):
    """connect_to a closed port fails with ConnectionError (refused), and does not hang."""
    w = ctx.worker()
    start = time.monotonic()
    with pytest.raises(loom.ConnectionError) as info:
        ep = w.connect_to("127.0.0.1", free_port())
        ep.send(b"x", 1).wait(timeout=WAIT)
    assert info.value.status in CONNECTION_STATUSES | {"LOOM_ERR_TIMED_OUT"}
    assert time.monotonic() - start < WAIT


def test_rejected_connection(ctx):
    """A listener that rejects: the client's connect_to fails with ConnectionError
    (LOOM_ERR_REJECTED). One worker plays both sides (its progress runs on_connection)."""
    w = ctx.worker()
    seen = []

    def on_connection(conn):
        seen.append(conn.client_address)
        conn.reject()

    listener = w.listen(on_connection, host="127.0.0.1", port=0)
    with pytest.raises(loom.ConnectionError) as info:
        ep = w.connect_to("127.0.0.1", listener.address[1])
        ep.send(b"x", 1).wait(timeout=WAIT)
    assert info.value.status == "LOOM_ERR_REJECTED"
    assert len(seen) == 1 and seen[0][0] == "127.0.0.1" and seen[0][1] > 0


# --- a peer killed -------------------------------------------------------------------------------

def wait_for_failure(req, what):
    """Waits (bounded) for ``req`` to fail; returns its exception. A request still running
    at the bound is the hang this suite is about."""
    try:
        req.wait(timeout=WAIT)
    except loom.LoomError as exc:
        if not req.done():
            raise AssertionError(f"{what} still pending {WAIT} s after the peer was killed") from exc
        return exc
    raise AssertionError(f"{what} completed normally although its peer was killed before")


def test_peer_killed_fails_pending_requests(fresh_pair):
    """With a rendezvous send (the peer never receives it), a stream receive and a tagged
    receive pending, the peer is killed (SIGKILL): the endpoint's err_handler runs with a
    connection status, the send and the stream receive fail with loom.ConnectionError,
    a new operation fails, and the tagged receive (a worker's, not an endpoint's) stays
    posted until cancelled. Nothing hangs."""
    p = fresh_pair
    # The connection is up: a round trip first.
    cid = p.peer.send("echo", size=8, tag=0x20, reply_tag=0x21)
    back = bytearray(8)
    r = p.worker.recv(back, 0x21)
    p.ep.send(b"alive?!!", 0x20).wait(timeout=WAIT)
    r.wait(timeout=WAIT)
    p.peer.reply(cid, progress=p.worker)

    big = pattern(4 << 20, 1)
    send = p.ep.send(big, 0x22)  # rendezvous: waits for a receive the peer never posts
    stream = p.ep.stream_recv(bytearray(100))
    tagged = p.worker.recv(bytearray(8), 0x23)
    for _ in range(100):
        p.worker.progress()
    assert not send.done() and not stream.done() and not tagged.done()

    p.peer.kill()
    # Request.wait progresses the worker without sleeping: the failure must come out.
    exc = wait_for_failure(send, "the rendezvous send")
    assert isinstance(exc, loom.ConnectionError), exc
    exc = wait_for_failure(stream, "the stream receive")
    assert isinstance(exc, loom.ConnectionError), exc
    progress_until(p.worker, lambda: p.errors, timeout=WAIT, what="the endpoint's error handler")
    ep, status = p.errors[0]
    assert ep is p.ep  # the handler gets our Endpoint object, not a copy
    assert status in CONNECTION_STATUSES, status

    # A new operation on the failed endpoint fails at once, or its request does.
    with pytest.raises(loom.LoomError) as info:
        p.ep.send(b"x", 0x24).wait(timeout=WAIT)
    assert not isinstance(info.value, loom.TimedOut), info.value

    assert not tagged.done()
    tagged.cancel()
    with pytest.raises(loom.Canceled):
        tagged.wait(timeout=WAIT)
    assert len(p.errors) == 1, "the error handler ran more than once"


def test_peer_killed_while_we_wait_for_its_rendezvous_data(fresh_pair):
    """A peer killed after its rendezvous send was probed here but before we fetched it:
    the receive of that message fails (or completes) instead of hanging, and the error
    handler runs."""
    p = fresh_pair
    p.peer.send("send", msgs=[{"tag": 0x30, "size": 4 << 20, "seed": 1}])
    progress_until(p.worker, lambda: p.worker.probe(0x30) is not None, what="the peer's rendezvous message")
    msg = p.worker.probe(0x30, remove=True)
    p.peer.kill()
    buf = np.zeros(4 << 20, dtype=np.uint8)
    req = None
    try:
        # Refused at once when the death was seen already (a loaded machine), else by wait.
        req = p.worker.recv_message(buf, msg)
        req.wait(timeout=WAIT)
    except loom.LoomError as exc:
        assert req is None or req.done(), "the receive of a killed peer's message hangs"
        assert isinstance(exc, loom.ConnectionError), exc
    else:  # the data had been taken before the peer died: then it must be whole
        assert np.array_equal(buf, pattern(4 << 20, 1))
    progress_until(p.worker, lambda: p.errors, timeout=WAIT, what="the endpoint's error handler")


def test_peer_killed_fails_awaited_requests(fresh_pair):
    """The same from asyncio, where the loop sleeps on the worker's event fd between
    events: an awaited rendezvous send and stream receive of a killed peer's endpoint
    raise loom.ConnectionError within the bound (the wake-up must not depend on more
    progress calls than an idle loop makes)."""
    p = fresh_pair
    p.peer.call("ping", progress=p.worker)
    p.ep.send(b"wire-up!", 0x40).wait(timeout=WAIT)  # the connection is up

    async def main():
        send = p.ep.send(pattern(4 << 20, 2), 0x41)
        stream = p.ep.stream_recv(bytearray(10))
        # The peer dies while the loop is idle, asleep on the worker's fd: half a second
        # after the requests started (any spin of the await is over by then).
        asyncio.get_running_loop().call_later(0.5, p.peer.kill)
        results = await asyncio.wait_for(asyncio.gather(send, stream, return_exceptions=True), WAIT / 2)
        return results, send, stream

    try:
        results, send, stream = asyncio.run(main())
    except asyncio.TimeoutError:
        raise AssertionError(f"awaited requests of a killed peer still pending after {WAIT / 2} s "
                             f"(errors seen: {p.errors})") from None
    for what, result in zip(("send", "stream receive"), results):
        assert isinstance(result, loom.ConnectionError), (what, result)
    assert p.errors and p.errors[0][1] in CONNECTION_STATUSES
