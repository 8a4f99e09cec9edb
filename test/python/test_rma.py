"""RMA and atomics between two processes over shm and tcp (docs/python.md: Context.mem_map,
MemoryHandle, pack_rkey, Endpoint.unpack_rkey, put, get, atomic, flush, fence): the
remote memory is read back by its owner, not only through our own get."""

import gc
import weakref

import numpy as np
import pytest

import loom
from loomtest import WAIT, digest, pattern

COUNT = 1 << 18  # uint64 elements of the peer's array: 2 MiB, room for rendezvous-sized puts
U64 = 2**64


@pytest.fixture(scope="module")
def remote(pair):
    """The peer's numpy array of COUNT uint64 (element i = 3 * i), mapped; our key to it."""
    info = pair.peer.call("mem_map", name="mem", count=COUNT, step=3, progress=pair.worker)
    assert info["length"] == COUNT * 8
    assert info["address"] == info["array_address"], "mem_map of a numpy array must map it in place"
    rkey = pair.ep.unpack_rkey(bytes.fromhex(info["rkey"]))
    yield pair, info["address"], rkey
    rkey.close()


def remote_bytes(pair, offset, length, name="mem"):
    """The peer's view of its own mapped memory [offset, offset + length)."""
    return bytes.fromhex(pair.peer.call("dump", name=name, offset=offset, length=length, progress=pair.worker)["hex"])


@pytest.mark.parametrize("size", [8, 5000, 1 << 20])
def test_put_then_get_and_the_owner_sees_it(remote, size):
    """A put lands at the right place of the peer's array (the peer reads it, the bytes
    around it unchanged); a get reads it back."""
    pair, base, rkey = remote
    offset = 4096 + size % 4096  # not at the start: a wrong address arithmetic shows
    data = pattern(size, size)
    before = remote_bytes(pair, offset - 16, 16) + b"|" + remote_bytes(pair, offset + size, 16)
    pair.ep.put(data, base + offset, rkey).wait(timeout=WAIT)
    pair.ep.flush().wait(timeout=WAIT)
    assert remote_bytes(pair, offset, size) == data.tobytes()
    assert remote_bytes(pair, offset - 16, 16) + b"|" + remote_bytes(pair, offset + size, 16) == before

    back = np.zeros(size, dtype=np.uint8)
    pair.ep.get(back, base + offset, rkey).wait(timeout=WAIT)
    pair.ep.flush().wait(timeout=WAIT)
    assert np.array_equal(back, data)


def test_get_of_untouched_memory_reads_the_owners_values(remote):
    """A get of the array's last 4096 elements returns the peer's values (3 * i)."""
    pair, base, rkey = remote
    n = 4096
    back = np.zeros(n, dtype=np.uint64)
    first = COUNT - n
    pair.ep.get(back, base + first * 8, rkey).wait(timeout=WAIT)
    assert np.array_equal(back, np.arange(first, COUNT, dtype=np.uint64) * np.uint64(3))


def put_words(pair, base, rkey, index, values):
    """Puts uint64 ``values`` at element ``index`` of the peer's array, flushed."""
    pair.ep.put(np.array(values, dtype=np.uint64), base + index * 8, rkey).wait(timeout=WAIT)
    pair.ep.flush().wait(timeout=WAIT)


def remote_words(pair, index, n):
    return list(np.frombuffer(remote_bytes(pair, index * 8, n * 8), dtype=np.uint64))


def test_atomics_64(remote):
    """Every operation on 64-bit words, fetching and not: the previous values returned,
    the words left at the peer as the arithmetic says (wrapping at 2**64)."""
    pair, base, rkey = remote
    at = 100  # elements 100..115
    init = [10, 20, 30, 40, 0xF0F0, 0xF0F0, 0xF0F0, U64 - 2, 50, 60, 0xFF00, 0x0FF0, 0x00FF, 7]
    put_words(pair, base, rkey, at, init)
    addr = [base + (at + i) * 8 for i in range(len(init))]
    ep = pair.ep

    assert ep.atomic("add", 5, addr[0], rkey).wait(timeout=WAIT) is None
    assert ep.atomic("add", 7, addr[1], rkey, fetch=True).wait(timeout=WAIT) == 20
    assert ep.atomic("swap", 0xDEADBEEF, addr[2], rkey).wait(timeout=WAIT) == 30
    assert ep.atomic("cswap", 42, addr[3], rkey, compare=40).wait(timeout=WAIT) == 40  # matches: swapped
    assert ep.atomic("cswap", 43, addr[8], rkey, compare=12345).wait(timeout=WAIT) == 50  # does not: kept
    assert ep.atomic("and", 0x3C3C, addr[4], rkey, fetch=True).wait(timeout=WAIT) == 0xF0F0
    assert ep.atomic("or", 0x0F0F, addr[5], rkey, fetch=True).wait(timeout=WAIT) == 0xF0F0
    assert ep.atomic("xor", 0xFFFF, addr[6], rkey, fetch=True).wait(timeout=WAIT) == 0xF0F0
    assert ep.atomic("add", 5, addr[7], rkey, fetch=True).wait(timeout=WAIT) == U64 - 2  # wraps to 3
    assert ep.atomic("add", U64 - 1, addr[9], rkey).wait(timeout=WAIT) is None  # adds -1
    assert ep.atomic("and", 0x0F00, addr[10], rkey).wait(timeout=WAIT) is None
    assert ep.atomic("or", 0xF000, addr[11], rkey).wait(timeout=WAIT) is None
    assert ep.atomic("xor", 0x00F0, addr[12], rkey).wait(timeout=WAIT) is None
    ep.flush().wait(timeout=WAIT)

    expected = [15, 27, 0xDEADBEEF, 42, 0xF0F0 & 0x3C3C, 0xF0F0 | 0x0F0F, 0xF0F0 ^ 0xFFFF, 3, 50, 59,
                0xFF00 & 0x0F00, 0x0FF0 | 0xF000, 0x00FF ^ 0x00F0, 7]
    assert remote_words(pair, at, len(init)) == expected


def test_atomics_32(remote):
    """size=4 works on the 32-bit word at the address (the low half of a little-endian
    uint64): it wraps at 2**32 and leaves the high half alone."""
    pair, base, rkey = remote
    at = 200
    put_words(pair, base, rkey, at, [0xAAAA_AAAA_FFFF_FFFE, 0x5555_5555_0000_0010, 0x1111_1111_0000_00F0])
    ep = pair.ep
    assert ep.atomic("add", 3, base + at * 8, rkey, fetch=True, size=4).wait(timeout=WAIT) == 0xFFFF_FFFE
    assert ep.atomic("swap", 0x1234_5678, base + (at + 1) * 8, rkey, size=4).wait(timeout=WAIT) == 0x10
    assert ep.atomic("cswap", 0x77, base + (at + 2) * 8, rkey, compare=0xF0, size=4).wait(timeout=WAIT) == 0xF0
    ep.flush().wait(timeout=WAIT)
    assert remote_words(pair, at, 3) == [0xAAAA_AAAA_0000_0001, 0x5555_5555_1234_5678, 0x1111_1111_0000_0077]


def test_fetch_add_counts_every_operation(remote):
    """200 fetching adds of 1 in flight at once: each returns a distinct previous value,
    and the word ends 200 higher."""
    pair, base, rkey = remote
    at = 300
    put_words(pair, base, rkey, at, [1000])
    reqs = [pair.ep.atomic("add", 1, base + at * 8, rkey, fetch=True) for _ in range(200)]
    olds = sorted(r.wait(timeout=WAIT) for r in reqs)
    assert olds == list(range(1000, 1200))
    pair.worker.flush().wait(timeout=WAIT)
    assert remote_words(pair, at, 1) == [1200]


def test_fence_and_flush_order_puts(remote):
    """A put, a fence, a put to the same word: the second one wins at the peer."""
    pair, base, rkey = remote
    at = 400
    for value in range(5):
        pair.ep.put(np.array([value], dtype=np.uint64), base + at * 8, rkey)
        pair.ep.fence()
    pair.worker.fence()
    pair.ep.flush().wait(timeout=WAIT)
    assert remote_words(pair, at, 1) == [4]


def test_peer_writes_into_memory_loom_allocated_here(pair):
    """ctx.mem_map(length=N): memory Loom allocates, seen here through the buffer
    protocol (numpy.frombuffer, memoryview); the peer puts, gets and fetch-adds into it."""
    mh = pair.ctx.mem_map(length=1 << 20)
    view = None
    try:
        assert mh.length >= 1 << 20 and mh.address != 0
        view = np.frombuffer(mh, dtype=np.uint8)
        assert memoryview(mh).nbytes == mh.length
        view[:] = 0
        view[64:72] = np.frombuffer(np.uint64(41).tobytes(), dtype=np.uint8)
        size = 4000
        reply = pair.peer.call("rma", address=mh.address + 64, rkey=mh.pack_rkey().hex(), size=size, seed=77,
                               add=1, progress=pair.worker)
        data = pattern(size, 77)
        assert reply["sha256"] == digest(data)  # what the peer's get read back
        # The peer's put, then its fetch-add of 1 on the first word of it.
        first_word = int(np.frombuffer(data[:8].tobytes(), dtype=np.uint64)[0])
        assert reply["fetched"] == first_word
        expected = data.copy()
        expected[:8] = np.frombuffer(np.uint64((first_word + 1) % U64).tobytes(), dtype=np.uint8)
        assert np.array_equal(view[64:64 + size], expected)
        assert np.all(view[:64] == 0) and np.all(view[64 + size:] == 0)
    finally:
        del view
        mh.close()


def test_mapped_numpy_array_is_written_in_place(pair):
    """ctx.mem_map(numpy array) maps the array itself: the peer's put shows in the array
    object, with no copy."""
    arr = np.zeros(4096, dtype=np.uint64)
    with pair.ctx.mem_map(arr) as mh:
        assert mh.address == arr.ctypes.data and mh.length == arr.nbytes
        reply = pair.peer.call("rma", address=mh.address + 800, rkey=mh.pack_rkey().hex(), size=8000, seed=5,
                               add=0, progress=pair.worker)
        assert reply["sha256"] == digest(pattern(8000, 5))
        raw = arr.view(np.uint8)
        assert np.array_equal(raw[800:8800], pattern(8000, 5))
        assert np.all(raw[:800] == 0) and np.all(raw[8800:] == 0)


def test_mapping_keeps_its_buffer_until_closed(ctx):
    """A mapping holds the buffer and its export until close(): the array outlives its
    last name, a mapped bytearray cannot be resized, and both are free after close()."""
    arr = np.ones(1024, dtype=np.float64)
    ref = weakref.ref(arr)
    mh = ctx.mem_map(arr)
    del arr
    gc.collect()
    assert ref() is not None, "the mapped array was collected while mapped"
    ba = bytearray(4096)
    mh2 = ctx.mem_map(ba)
    with pytest.raises(BufferError):
        ba.extend(b"x")  # a resize would move the memory peers write
    mh.close()
    mh2.close()
    mh.close()  # idempotent
    gc.collect()
    assert ref() is None, "the array is still held after close()"
    ba.extend(b"x")
    assert len(ba) == 4097


def test_read_only_buffer_cannot_be_mapped(ctx):
    """bytes are read-only: mem_map needs a writable buffer."""
    with pytest.raises((BufferError, TypeError, ValueError, loom.LoomError)):
        ctx.mem_map(b"\x00" * 4096)
