"""Active messages between two processes over shm and tcp (docs/python.md:
Endpoint.am_send, Worker.set_am_handler, Worker.am_messages, AmMessage): eager and
rendezvous, handlers as Python callables, reply endpoints both ways, the lifetime of a
rendezvous message that is kept, released, dropped or collected, and ``async for``."""

import asyncio
import gc

import numpy as np
import pytest

from loomtest import SIZES, WAIT, as_bytes, digest, pattern, progress_until

TO_PEER, TO_US = 10, 11  # the peer echoes id 10 back to us as id 11


@pytest.fixture(scope="module")
def echo_pair(pair):
    """The module's pair with the peer echoing active messages (id 10 -> reply id 11)."""
    pair.peer.call("am_echo", am_id=TO_PEER, reply_id=TO_US, progress=pair.worker)
    return pair


def collect(worker, am_id):
    """Installs a handler that keeps every message of ``am_id``; returns their list."""
    got = []
    worker.set_am_handler(am_id, got.append)
    return got


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", ["auto", "eager", "rndv"])
def test_am_echo_through_reply_endpoint(echo_pair, mode, size):
    """We send id 10 with reply=True; the peer's handler answers through msg.reply_ep; our
    handler gets the answer: header, length, protocol and data must be ours."""
    p = echo_pair
    got = collect(p.worker, TO_US)
    header = b"hdr:" + str(size).encode() + b":" + mode.encode()
    data = pattern(size, size + len(mode))
    req = p.ep.am_send(TO_PEER, header=header, data=data, reply=True,
                       eager=(mode == "eager"), rndv=(mode == "rndv"))
    req.wait(timeout=WAIT)
    progress_until(p.worker, lambda: got, what="the echoed active message")
    seen = p.peer.event("am", progress=p.worker)
    assert bytes.fromhex(seen["header"]) == header
    assert seen["length"] == size and seen["sha256"] == digest(data)
    assert seen["has_reply_ep"]
    if mode == "rndv":
        assert seen["is_rndv"] and not seen["eager_data"]
    if mode == "eager":
        assert not seen["is_rndv"] and seen["eager_data"]

    msg = got[0]
    assert len(got) == 1
    assert msg.header == header and msg.length == size
    assert msg.is_rndv == seen["is_rndv"]  # the peer answered with the protocol it got
    if msg.is_rndv:
        assert msg.data is None
    else:
        assert isinstance(msg.data, bytes) and msg.data == data.tobytes()
    out = msg.receive().wait(timeout=WAIT)
    assert isinstance(out, bytearray) and len(out) == size
    assert out == data.tobytes()


@pytest.mark.parametrize("rndv", [False, True], ids=["eager", "rndv"])
def test_am_receive_into_a_given_buffer(echo_pair, rndv):
    """AmMessage.receive(buf) fills the caller's numpy array in place and returns it."""
    p = echo_pair
    got = collect(p.worker, TO_US)
    data = pattern(70000, 21)
    p.ep.am_send(TO_PEER, header=b"h", data=data, reply=True, rndv=rndv).wait(timeout=WAIT)
    progress_until(p.worker, lambda: got, what="the echoed active message")
    p.peer.event("am", progress=p.worker)
    target = np.zeros(70000 + 8, dtype=np.uint8)
    result = got[0].receive(target).wait(timeout=WAIT)
    assert result is target
    assert np.array_equal(target[:70000], data)
    assert np.all(target[70000:] == 0)


@pytest.mark.parametrize("size", [8, 1 << 20])
def test_reply_endpoint_of_a_peer_we_never_connected(fresh_pair, size):
    """The peer sends with reply=True; our handler's msg.reply_ep (an endpoint Loom made
    for the peer, or ours) carries our answer, which the peer's handler reports. Without
    reply=True there is no reply endpoint."""
    p = fresh_pair
    got = collect(p.worker, 20)
    p.peer.call("am_collect", am_id=21, progress=p.worker)
    # A rendezvous send completes once we took the data: do not wait for it yet.
    p.peer.call("am_send", am_id=20, header="aa", size=size, seed=3, reply=True, wait=False, progress=p.worker)
    progress_until(p.worker, lambda: got, what="the peer's active message")
    msg = got.pop()
    assert msg.reply_ep is not None
    assert msg.receive().wait(timeout=WAIT) == pattern(size, 3).tobytes()
    assert p.peer.call("wait_pending", progress=p.worker)["status"] == "LOOM_OK"
    answer = pattern(size, 4)
    msg.reply_ep.am_send(21, header=b"answer", data=answer).wait(timeout=WAIT)
    seen = p.peer.event("am", progress=p.worker)
    assert bytes.fromhex(seen["header"]) == b"answer" and seen["sha256"] == digest(answer)

    p.peer.call("am_send", am_id=20, header="bb", size=8, seed=5, reply=False, progress=p.worker)
    progress_until(p.worker, lambda: got, what="the second active message")
    assert got[0].reply_ep is None and got[0].header == b"\xbb"


def test_rendezvous_message_kept_until_released(fresh_pair):
    """A rendezvous message kept by the handler holds its sender's request until
    release(); after it, the sender completes."""
    p = fresh_pair
    got = collect(p.worker, 30)
    p.peer.call("am_send", am_id=30, size=1 << 20, seed=1, rndv=True, wait=False, progress=p.worker)
    progress_until(p.worker, lambda: got, what="the rendezvous message")
    assert got[0].is_rndv and got[0].data is None
    # Bounded look: while we keep the message, the sender's request stays in progress.
    assert p.peer.call("wait_pending", limit=0.5, progress=p.worker)["status"] == "LOOM_INPROGRESS"
    got[0].release()
    assert p.peer.call("wait_pending", progress=p.worker)["status"] == "LOOM_OK"


def test_rendezvous_message_dropped_by_handler_completes_sender(fresh_pair):
    """A handler that keeps nothing: the rendezvous message is released when the handler
    returns, and the sender completes (no request left hanging)."""
    p = fresh_pair
    calls = []
    p.worker.set_am_handler(31, lambda msg: calls.append((msg.length, msg.is_rndv)))
    reply = p.peer.call("am_send", am_id=31, size=1 << 20, seed=1, rndv=True, progress=p.worker)
    assert reply["status"] == "LOOM_OK"
    assert calls == [(1 << 20, True)]


def test_rendezvous_message_collected_completes_sender(fresh_pair):
    """A rendezvous message kept, then dropped by the application (collected): released,
    its sender completes."""
    p = fresh_pair
    got = collect(p.worker, 32)
    p.peer.call("am_send", am_id=32, size=1 << 20, seed=1, rndv=True, wait=False, progress=p.worker)
    progress_until(p.worker, lambda: got, what="the rendezvous message")
    got.clear()
    gc.collect()
    assert p.peer.call("wait_pending", progress=p.worker)["status"] == "LOOM_OK"


def test_removed_handler_is_not_called(fresh_pair):
    """set_am_handler(id, None) removes the handler: a later message of that id does not
    reach it (a message of another id sent after it does arrive)."""
    p = fresh_pair
    old = collect(p.worker, 40)
    p.peer.call("am_send", am_id=40, size=8, seed=1, progress=p.worker)
    progress_until(p.worker, lambda: old, what="the first message")
    p.worker.set_am_handler(40, None)
    later = collect(p.worker, 41)
    p.peer.call("am_send", am_id=40, size=8, seed=2, progress=p.worker)
    p.peer.call("am_send", am_id=41, size=8, seed=3, progress=p.worker)
    progress_until(p.worker, lambda: later, what="the message of the other id")
    assert len(old) == 1 and old[0].data == pattern(8, 1).tobytes()


def test_highest_am_id(echo_pair):
    """Ids go up to 65535."""
    p = echo_pair
    got = collect(p.worker, 65535)
    p.peer.call("am_collect", am_id=65535, progress=p.worker)
    p.ep.am_send(65535, header=b"top", data=b"12345678").wait(timeout=WAIT)
    seen = p.peer.event("am", progress=p.worker)
    assert bytes.fromhex(seen["header"]) == b"top" and seen["sha256"] == digest(b"12345678")
    assert not got  # nothing came back to us on 65535


def test_async_for_over_am_messages(echo_pair):
    """``async for`` over worker.am_messages(11) receives the peer's echoes of 12 messages
    sent concurrently (eager and rendezvous), each awaited with ``await msg.receive()``."""
    p = echo_pair
    sizes = [0, 8, 100, 5000, 65536, 1 << 20] * 2
    sent = {b"n%02d" % i: pattern(size, 40 + i) for i, size in enumerate(sizes)}

    async def consume(stream):
        received = {}
        async for msg in stream:
            received[msg.header] = bytes(await msg.receive())
            if len(received) == len(sent):
                return received

    async def main():
        # The consumer runs while we send: the peer's rendezvous answers wait for it.
        consumer = asyncio.create_task(consume(p.worker.am_messages(TO_US)))
        sends = [p.ep.am_send(TO_PEER, header=h, data=d, reply=True, rndv=(len(d) == 100))
                 for h, d in sent.items()]
        await asyncio.gather(*sends)
        return await consumer

    received = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert received.keys() == sent.keys()
    for header, data in sent.items():
        assert received[header] == data.tobytes(), header
    for _ in sent:
        p.peer.event("am", progress=p.worker)
    p.worker.detach()


def test_handler_sees_every_message_in_order(fresh_pair):
    """100 active messages of one endpoint (eager, 0 to 99 bytes) reach the handler once
    each, in order, with their data."""
    p = fresh_pair
    got = collect(p.worker, 42)
    ids = [p.peer.send("am_send", am_id=42, header=f"{i:04x}", size=i, seed=i) for i in range(100)]
    progress_until(p.worker, lambda: len(got) >= 100, what="100 active messages")
    for cid in ids:
        assert p.peer.reply(cid, progress=p.worker)["status"] == "LOOM_OK"
    assert [m.header for m in got] == [bytes.fromhex(f"{i:04x}") for i in range(100)]
    assert [as_bytes(m.data) for m in got] == [pattern(i, i).tobytes() for i in range(100)]
