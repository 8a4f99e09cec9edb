"""Streams between two processes over shm and tcp, connected through a listener
(docs/python.md: Endpoint.stream_send, Endpoint.stream_recv with and without waitall):
byte order across sends and receives of other sizes, every kind of buffer, both
directions at once."""

import numpy as np
import pytest

from loomtest import WAIT, as_bytes, digest, make_buffer, make_empty_like, pattern, wait_all

STREAM_KINDS = ["bytes", "bytearray", "memoryview_slice", "array_i", "numpy_u8", "numpy_f64"]


@pytest.mark.parametrize("size", [8, 5000, 1 << 20, 4 << 20])
@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_stream_echo_is_byte_exact(sock_pair, kind, size):
    """We send ``size`` bytes; the peer receives them all (waitall, digest checked) and
    sends them back; we receive them (waitall) into a buffer of the same kind."""
    p = sock_pair
    data = make_buffer(kind, size, size + len(kind))
    out = make_empty_like(kind, size)
    cid = p.peer.send("stream_echo", size=size)
    send = p.ep.stream_send(data)
    recv = p.ep.stream_recv(out, waitall=True)
    _, n = wait_all([send, recv])
    reply = p.peer.reply(cid, progress=p.worker)
    assert reply["length"] == size and reply["sha256"] == digest(data)
    assert n == size
    assert as_bytes(out) == as_bytes(data)


def test_many_sends_one_receive(sock_pair):
    """Seven sends of the peer fill one waitall receive, in order."""
    p = sock_pair
    size = 100003
    out = np.zeros(size, dtype=np.uint8)
    recv = p.ep.stream_recv(out)  # waitall is the default
    p.peer.call("stream_send", size=size, seed=1, pieces=7, progress=p.worker)
    assert recv.wait(timeout=WAIT) == size
    assert np.array_equal(out, pattern(size, 1))


def test_one_send_many_receives(sock_pair):
    """One send of the peer is read by four receives posted at once, in posting order."""
    p = sock_pair
    size = 4 * 250_000
    parts = [np.zeros(size // 4, dtype=np.uint8) for _ in range(4)]
    reqs = [p.ep.stream_recv(part, waitall=True) for part in parts]
    p.peer.call("stream_send", size=size, seed=2, pieces=1, progress=p.worker)
    assert wait_all(reqs) == [size // 4] * 4
    assert np.array_equal(np.concatenate(parts), pattern(size, 2))


def test_receive_without_waitall_returns_what_is_there(sock_pair):
    """waitall=False completes with at least one byte and at most what was sent, the
    first bytes of the stream; a waitall receive then takes exactly the rest."""
    p = sock_pair
    size = 5000
    big = np.zeros(65536, dtype=np.uint8)
    p.peer.call("stream_send", size=size, seed=3, progress=p.worker)
    n = p.ep.stream_recv(big, waitall=False).wait(timeout=WAIT)
    assert 1 <= n <= size
    expected = pattern(size, 3)
    assert np.array_equal(big[:n], expected[:n])
    assert np.all(big[n:] == 0)
    if n < size:
        rest = np.zeros(size - n, dtype=np.uint8)
        assert p.ep.stream_recv(rest).wait(timeout=WAIT) == size - n
        assert np.array_equal(rest, expected[n:])


def test_peer_receives_what_we_send_in_pieces(sock_pair):
    """Our sends of odd sizes arrive as one byte stream at the peer (digest)."""
    p = sock_pair
    data = pattern(300_001, 4)
    cid = p.peer.send("stream_recv", size=len(data), waitall=True)
    cuts = [0, 1, 9, 4096, 70000, 299_999, len(data)]
    reqs = [p.ep.stream_send(data[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    wait_all(reqs)
    reply = p.peer.reply(cid, progress=p.worker)
    assert reply == {"id": cid, "length": len(data), "sha256": digest(data)}
