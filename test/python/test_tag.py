"""Tagged messages between two processes over shm and tcp (docs/python.md: Worker.recv,
probe, recv_message; Endpoint.send): every size from empty to rendezvous, every kind of
buffer, tag masks, synchronous sends, probes, truncation. Data is compared byte for
byte in this process and by digest in the peer."""

import zlib

import numpy as np
import pytest

import loom
from loomtest import (BUFFER_KINDS, SIZES, WAIT, as_bytes, digest, make_buffer, make_empty_like, pattern,
                      progress_until, wait_all)

REPLY_BIT = 1 << 40  # the peer answers an echo on the request's tag with this bit set


def seed_of(*parts):
    """A stable seed (hash() differs between processes) for the data of one case."""
    return zlib.crc32(repr(parts).encode())


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", BUFFER_KINDS)
def test_echo_round_trip_is_byte_exact(pair, kind, size):
    """This process sends ``kind`` of ``size`` bytes; the peer receives it (digest
    checked) and sends it back, received here into a buffer of the same kind."""
    seed = seed_of(kind, size)
    data = make_buffer(kind, size, seed)
    out = make_empty_like(kind, size)
    tag = 0x100 + SIZES.index(size)
    cid = pair.peer.send("echo", size=size, tag=tag, reply_tag=tag | REPLY_BIT)
    recv = pair.worker.recv(out, tag | REPLY_BIT)
    send = pair.ep.send(data, tag)
    _, (sender_tag, length) = wait_all([send, recv])
    reply = pair.peer.reply(cid, progress=pair.worker)

    assert reply["length"] == size
    assert reply["sender_tag"] == tag
    assert reply["sha256"] == digest(pattern(size, seed)), "the peer received other bytes than sent"
    assert (sender_tag, length) == (tag | REPLY_BIT, size)
    assert as_bytes(out) == as_bytes(data)
    assert send.status == recv.status == "LOOM_OK"


@pytest.mark.parametrize("size", [8, 5000, 4 << 20])
def test_receive_into_larger_buffer_reports_message_length(pair, size):
    """A buffer larger than the message: the result's length is the message's, the bytes
    past it are untouched."""
    out = np.full(size + 100, 0xA5, dtype=np.uint8)
    req = pair.worker.recv(out, 0x200)
    pair.peer.call("send", msgs=[{"tag": 0x200, "size": size, "seed": 7}], progress=pair.worker)
    assert req.wait(timeout=WAIT) == (0x200, size)
    assert np.array_equal(out[:size], pattern(size, 7))
    assert np.all(out[size:] == 0xA5)


@pytest.mark.parametrize("size,posted_first", [(8, True), (1 << 20, True), (8, False), (5000, False)],
                         ids=["8-expected", "1MiB-expected", "8-unexpected", "5000-unexpected"])
def test_tag_masks_select_messages(pair, size, posted_first):
    """Receives with masks: one matching only tags 0x2_xxxx, one matching anything (mask
    0). The peer sends 0x1_0001 then 0x2_0002: the masked receive must get the second,
    the wildcard one the first, whether the receives were posted before the messages
    came (expected) or after (unexpected queue; eager sizes only, a rendezvous send
    waits for its receive)."""
    masked = np.zeros(size, dtype=np.uint8)
    anything = np.zeros(size, dtype=np.uint8)
    msgs = [{"tag": 0x1_0001, "size": size, "seed": 1}, {"tag": 0x2_0002, "size": size, "seed": 2}]
    if posted_first:
        r_masked = pair.worker.recv(masked, 0x2_0000, mask=0xFFFF_0000)
        r_any = pair.worker.recv(anything, 0, mask=0)
        pair.peer.call("send", msgs=msgs, progress=pair.worker)
    else:
        pair.peer.call("send", msgs=msgs, progress=pair.worker)
        # The sends completed at the peer; progress until both are here (probe, no removal).
        progress_until(pair.worker, lambda: pair.worker.probe(0x2_0002) is not None, what="the messages")
        r_masked = pair.worker.recv(masked, 0x2_0000, mask=0xFFFF_0000)
        r_any = pair.worker.recv(anything, 0, mask=0)
    assert r_masked.wait(timeout=WAIT) == (0x2_0002, size)
    assert r_any.wait(timeout=WAIT) == (0x1_0001, size)
    assert np.array_equal(masked, pattern(size, 2))
    assert np.array_equal(anything, pattern(size, 1))


def test_full_mask_is_the_default(pair):
    """recv(buf, tag) without a mask matches the exact tag only: a message with a tag
    differing in the top bit is not taken."""
    close_tag, exact_tag = 0x8000_0000_0000_0300, 0x300
    other = np.zeros(8, dtype=np.uint8)
    exact = np.zeros(8, dtype=np.uint8)
    r_exact = pair.worker.recv(exact, exact_tag)
    pair.peer.call("send", msgs=[{"tag": close_tag, "size": 8, "seed": 3},
                                 {"tag": exact_tag, "size": 8, "seed": 4}], progress=pair.worker)
    assert r_exact.wait(timeout=WAIT) == (exact_tag, 8)
    assert np.array_equal(exact, pattern(8, 4))
    # The other message waits in the unexpected queue for its own receive.
    assert pair.worker.recv(other, close_tag, mask=loom.TAG_MASK_FULL).wait(timeout=WAIT) == (close_tag, 8)
    assert np.array_equal(other, pattern(8, 3))
    assert loom.TAG_MASK_FULL == 2**64 - 1


def test_many_messages_in_flight_match_their_tags(pair):
    """64 receives posted in the reverse order of the peer's sends: each gets its tag."""
    n = 64
    bufs = [np.zeros(256, dtype=np.uint8) for _ in range(n)]
    reqs = {i: pair.worker.recv(bufs[i], 0x400 + i) for i in reversed(range(n))}
    pair.peer.call("send", msgs=[{"tag": 0x400 + i, "size": 256, "seed": 100 + i} for i in range(n)],
                   progress=pair.worker)
    for i, req in reqs.items():
        assert req.wait(timeout=WAIT) == (0x400 + i, 256)
        assert np.array_equal(bufs[i], pattern(256, 100 + i))


def test_sync_send_completes_only_once_matched(pair):
    """An eager send completes without the receiver; a synchronous one of the same size
    only after the peer posted its receive. The peer idles (progressing) in between."""
    plain = pair.ep.send(b"12345678", 0x500)
    plain.wait(timeout=WAIT)  # completes although the peer posted nothing
    sync = pair.ep.send(b"abcdefgh", 0x501, sync=True)
    # A bounded look (not a synchronisation): within 0.5 s of progress on both sides the
    # synchronous send must not complete, since nobody received it.
    with pytest.raises(loom.TimedOut):
        sync.wait(timeout=0.5)
    assert not sync.done() and sync.status == "LOOM_INPROGRESS"
    reply = pair.peer.call("recv", size=8, tag=0x501, progress=pair.worker)
    assert reply["sha256"] == digest(b"abcdefgh")
    sync.wait(timeout=WAIT)
    assert sync.status == "LOOM_OK"
    assert pair.peer.call("recv", size=8, tag=0x500, progress=pair.worker)["sha256"] == digest(b"12345678")


@pytest.mark.parametrize("size", [0, 8, 5000, 4 << 20])
def test_sync_send_of_every_size_arrives(pair, size):
    """Synchronous sends from empty to rendezvous arrive intact (digest at the peer)."""
    data = pattern(size, 9)
    cid = pair.peer.send("recv", size=size, tag=0x502)
    pair.ep.send(data, 0x502, sync=True).wait(timeout=WAIT)
    reply = pair.peer.reply(cid, progress=pair.worker)
    assert (reply["status"], reply["length"], reply["sha256"]) == ("LOOM_OK", size, digest(data))


@pytest.mark.parametrize("size", [8, 5000, 4 << 20])
def test_probe_then_receive_the_message(pair, size):
    """probe() sees the peer's message (tag, length) without taking it; probe(remove=True)
    takes it, after which it is gone, and recv_message() receives it."""
    tag = 0x600 + size
    cid = pair.peer.send("send", msgs=[{"tag": tag, "size": size, "seed": 11}])
    progress_until(pair.worker, lambda: pair.worker.probe(tag) is not None, what="the probed message")
    seen = pair.worker.probe(tag)
    assert (seen.tag, seen.length) == (tag, size)
    assert pair.worker.probe(tag + 1) is None
    assert pair.worker.probe(tag, mask=0xFFFF)  # a mask works for probes too
    msg = pair.worker.probe(tag, remove=True)
    assert msg is not None and (msg.tag, msg.length) == (tag, size)
    assert pair.worker.probe(tag) is None, "a removed message is still in the queue"
    buf = np.zeros(size, dtype=np.uint8)
    assert pair.worker.recv_message(buf, msg).wait(timeout=WAIT) == (tag, size)
    assert np.array_equal(buf, pattern(size, 11))
    assert pair.peer.reply(cid, progress=pair.worker)["statuses"] == ["LOOM_OK"]


def test_probe_finds_nothing_when_nothing_was_sent(pair):
    """probe() of a tag nobody sent returns None (after progress)."""
    pair.worker.progress()
    assert pair.worker.probe(0x7777) is None
    assert pair.worker.probe(0x7777, remove=True) is None


@pytest.mark.parametrize("size", [5000, 1 << 20])
def test_truncation_raises_message_truncated(pair, size):
    """A message longer than the buffer: loom.MessageTruncated with its status; the
    sender's request completes (either way), and the next message arrives intact."""
    tag = 0x700 + size
    small = bytearray(100)
    req = pair.worker.recv(small, tag)
    reply = pair.peer.call("send", msgs=[{"tag": tag, "size": size, "seed": 5}], progress=pair.worker)
    with pytest.raises(loom.MessageTruncated) as info:
        req.wait(timeout=WAIT)
    assert info.value.status == "LOOM_ERR_MESSAGE_TRUNCATED"
    assert isinstance(info.value, loom.LoomError)
    assert req.status == "LOOM_ERR_MESSAGE_TRUNCATED"
    assert reply["statuses"][0] != "LOOM_INPROGRESS"
    with pytest.raises(loom.MessageTruncated):
        req.result  # noqa: B018  (the property raises)
    # The connection goes on.
    ok = np.zeros(16, dtype=np.uint8)
    r2 = pair.worker.recv(ok, tag + 1)
    pair.peer.call("send", msgs=[{"tag": tag + 1, "size": 16, "seed": 6}], progress=pair.worker)
    assert r2.wait(timeout=WAIT) == (tag + 1, 16)
    assert np.array_equal(ok, pattern(16, 6))


def test_truncated_probed_message(pair):
    """recv_message into a buffer shorter than the probed message raises
    MessageTruncated too."""
    pair.peer.call("send", msgs=[{"tag": 0x800, "size": 5000, "seed": 8}], progress=pair.worker)
    progress_until(pair.worker, lambda: pair.worker.probe(0x800) is not None, what="the message")
    msg = pair.worker.probe(0x800, remove=True)
    with pytest.raises(loom.MessageTruncated):
        pair.worker.recv_message(bytearray(10), msg).wait(timeout=WAIT)


def test_receive_into_read_only_buffer_is_refused(pair):
    """bytes are read-only: a receive into them must be refused (not written into)."""
    data = b"\x00" * 16
    with pytest.raises((BufferError, TypeError, ValueError)):
        pair.worker.recv(data, 0x900)
    assert data == b"\x00" * 16


def test_non_contiguous_buffer_is_refused(pair):
    """A strided numpy view is not one block of memory: the bindings must refuse it
    rather than send the bytes under it."""
    base = np.arange(64, dtype=np.uint8)
    strided = base[::2]
    with pytest.raises((BufferError, TypeError, ValueError)):
        pair.ep.send(strided, 0x901)
