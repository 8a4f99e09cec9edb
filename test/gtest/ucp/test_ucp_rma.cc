/**
 * RMA and atomics through the C API, over the transport sets self (one worker to
 * itself), shm and tcp (two workers in this process), plus two real processes: mappings
 * and remote keys, put and get of every size across each flavour boundary (short, bcopy,
 * zero-copy) into allocated and registered memory at unaligned offsets, fence and flush,
 * every atomic at both sizes, malformed keys, out-of-range accesses, unmapped memory, and
 * peers that fail or endpoints closed with operations outstanding.
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp_pair.h"
#include "ucp_side.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using loom::test::ForkedPeer;
using loom::test::LogCapture;

constexpr std::uint64_t kAllFeatures =
    LOOM_FEATURE_TAG | LOOM_FEATURE_RMA | LOOM_FEATURE_AMO32 | LOOM_FEATURE_AMO64;

using loom::test::TlSet;

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::uint8_t>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
    return v;
}

/** A mapping and its address. */
struct Mapped {
    loom_mem_h memh = nullptr;
    std::uint8_t* address = nullptr;
    std::size_t length = 0;
};

class UcpRmaTest : public loom::test::UcpPairTest {
protected:
    UcpRmaTest() : UcpPairTest(kAllFeatures) {}

    /** Keys, then the endpoint (dropping what is outstanding), then the memory it may still use. */
    void on_teardown() override {
        for (loom_rkey_h k : rkeys_) loom_rkey_destroy(k);
        rkeys_.clear();
        if (ep_) force_close(ep_);
        ep_ = nullptr;
        for (loom_mem_h m : maps_) EXPECT_EQ(LOOM_OK, loom_mem_unmap(ctx_, m));
        maps_.clear();
    }

    /** Waits for a status-or-request (progressing both workers); frees the request. */
    loom_status_t wait(loom_status_ptr_t r) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        loom_status_t s;
        while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS) {
            if (std::chrono::steady_clock::now() > deadline) {
                ADD_FAILURE() << "request timed out";
                return LOOM_ERR_TIMED_OUT;
            }
            progress();
        }
        loom_request_free(r);
        return s;
    }

    loom_status_t flush() { return wait(loom_ep_flush_nbx(ep_, nullptr)); }

    /** Maps @p length bytes: allocated by Loom, or a registered buffer of ours. */
    Mapped map(std::size_t length, bool allocate, unsigned prot = 0) {
        Mapped m;
        loom_mem_map_params_t p{};
        p.field_mask = LOOM_MEM_MAP_PARAM_FIELD_LENGTH;
        p.length = length;
        if (allocate) {
            p.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
            p.flags = LOOM_MEM_MAP_ALLOCATE;
        } else {
            buffers_.emplace_back(length);
            p.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_ADDRESS;
            p.address = buffers_.back().data();
        }
        if (prot != 0) {
            p.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_PROT;
            p.prot = prot;
        }
        EXPECT_EQ(LOOM_OK, loom_mem_map(ctx_, &p, &m.memh));
        if (m.memh == nullptr) return m;
        maps_.push_back(m.memh);
        loom_mem_attr_t a{};
        a.field_mask = LOOM_MEM_ATTR_FIELD_ADDRESS | LOOM_MEM_ATTR_FIELD_LENGTH;
        EXPECT_EQ(LOOM_OK, loom_mem_query(m.memh, &a));
        m.address = static_cast<std::uint8_t*>(a.address);
        m.length = a.length;
        if (!allocate) {
            EXPECT_EQ(p.address, a.address);
        }
        EXPECT_EQ(length, a.length);
        return m;
    }

    std::vector<std::uint8_t> pack(loom_mem_h memh) {
        void* buf = nullptr;
        size_t len = 0;
        EXPECT_EQ(LOOM_OK, loom_rkey_pack(ctx_, memh, &buf, &len));
        std::vector<std::uint8_t> blob(static_cast<std::uint8_t*>(buf),
                                       static_cast<std::uint8_t*>(buf) + len);
        loom_rkey_buffer_release(buf);
        return blob;
    }

    /** The remote key of @p m unpacked on the test's endpoint (destroyed at teardown). */
    loom_rkey_h rkey_of(const Mapped& m) {
        auto blob = pack(m.memh);
        loom_rkey_h k = nullptr;
        EXPECT_EQ(LOOM_OK, loom_ep_rkey_unpack(ep_, blob.data(), blob.size(), &k));
        if (k) rkeys_.push_back(k);
        return k;
    }

    static std::uint64_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

    loom_status_t put(const void* buf, std::size_t n, const void* raddr, loom_rkey_h k,
                      const loom_request_param_t* p = nullptr) {
        return wait(loom_put_nbx(ep_, buf, n, addr(raddr), k, p));
    }
    loom_status_t get(void* buf, std::size_t n, const void* raddr, loom_rkey_h k,
                      const loom_request_param_t* p = nullptr) {
        return wait(loom_get_nbx(ep_, buf, n, addr(raddr), k, p));
    }

    /** An atomic; @p reply null: posted. */
    loom_status_t atomic(loom_atomic_op_t op, unsigned size, std::uint64_t value, void* reply,
                         const void* raddr, loom_rkey_h k) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
        p.datatype = loom_dt_make_contig(size);
        if (reply) {
            p.op_attr_mask |= LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
            p.reply_buffer = reply;
        }
        std::uint32_t v32 = static_cast<std::uint32_t>(value);
        const void* operand = size == 4 ? static_cast<const void*>(&v32) : &value;
        return wait(loom_atomic_op_nbx(ep_, op, operand, 1, addr(raddr), k, &p));
    }

    /** Puts then gets @p size bytes at remote offset @p roff of @p m, checking the data each way. */
    void round_trip(const Mapped& m, loom_rkey_h k, std::size_t size, std::size_t roff, std::size_t loff,
                    unsigned seed) {
        auto data = pattern(size + loff, seed);
        std::memset(m.address, 0xee, m.length);
        ASSERT_EQ(LOOM_OK, put(data.data() + loff, size, m.address + roff, k)) << size;
        ASSERT_EQ(LOOM_OK, flush()) << size;
        ASSERT_EQ(0, std::memcmp(m.address + roff, data.data() + loff, size))
            << "put of " << size << " bytes";
        if (roff > 0) {
            EXPECT_EQ(0xee, m.address[roff - 1]) << "put wrote before its range";
        }
        if (roff + size < m.length) {
            EXPECT_EQ(0xee, m.address[roff + size]) << "put wrote past its range";
        }
        std::vector<std::uint8_t> back(size + loff + 1, 0x11);
        ASSERT_EQ(LOOM_OK, get(back.data() + loff, size, m.address + roff, k)) << size;
        ASSERT_EQ(0, std::memcmp(back.data() + loff, data.data() + loff, size))
            << "get of " << size << " bytes";
        EXPECT_EQ(0x11, back[loff + size]) << "get wrote past the local buffer";
    }

    /** Every atomic operation, posted and fetching, 32 and 64 bits, on the word at offset 8 of @p m. */
    void check_every_atomic(const Mapped& m, loom_rkey_h k) {
        struct Case {
            loom_atomic_op_t op;
            std::uint64_t initial, operand, expect;
        };
        const std::uint64_t a = 0xf0f0f0f00ff00ff0ull, b = 0x0123456789abcdefull;
        const Case cases[] = {
            {LOOM_ATOMIC_OP_ADD, a, b, a + b}, {LOOM_ATOMIC_OP_AND, a, b, a & b},
            {LOOM_ATOMIC_OP_OR, a, b, a | b},  {LOOM_ATOMIC_OP_XOR, a, b, a ^ b},
            {LOOM_ATOMIC_OP_SWAP, a, b, b},
        };
        for (unsigned size : {4u, 8u}) {
            const std::uint64_t mask = size == 4 ? 0xffffffffull : ~0ull;
            std::uint8_t* word = m.address + 8;
            auto read = [&] {
                std::uint64_t v = 0;
                std::memcpy(&v, word, size);
                return v;
            };
            for (const Case& c : cases) {
                for (bool fetch : {false, true}) {
                    if (!fetch && c.op == LOOM_ATOMIC_OP_SWAP) continue;  // swap always fetches
                    std::memset(m.address, 0x5c, 64);
                    std::memcpy(word, &c.initial, size);
                    std::uint64_t reply = 0x7777777777777777ull;
                    ASSERT_EQ(LOOM_OK, atomic(c.op, size, c.operand, fetch ? &reply : nullptr, word, k))
                        << "op " << c.op << " size " << size;
                    ASSERT_EQ(LOOM_OK, flush());
                    EXPECT_EQ(c.expect & mask, read())
                        << "op " << c.op << " size " << size << " fetch " << fetch;
                    if (fetch) {
                        std::uint64_t old = 0;
                        std::memcpy(&old, &reply, size);
                        EXPECT_EQ(c.initial & mask, old) << "op " << c.op << " size " << size;
                        if (size == 4) {
                            EXPECT_EQ(0x77777777u, reply >> 32) << "a 4-byte reply wrote 8 bytes";
                        }
                    }
                    EXPECT_EQ(0x5c, m.address[8 - 1]);
                    EXPECT_EQ(0x5c, m.address[8 + size]) << "the atomic touched a neighbour";
                }
            }
            // Compare-and-swap (as in UCX): the operand is the value to compare with; the reply
            // buffer holds the value to swap in, then the old value.
            for (bool equal : {true, false}) {
                std::memcpy(word, &a, size);
                std::uint64_t cmp = equal ? a : a + 1;
                std::uint64_t swap_in = b;
                ASSERT_EQ(LOOM_OK, atomic(LOOM_ATOMIC_OP_CSWAP, size, cmp, &swap_in, word, k));
                std::uint64_t old = 0;
                std::memcpy(&old, &swap_in, size);
                EXPECT_EQ(a & mask, old) << "cswap size " << size;
                EXPECT_EQ((equal ? b : a) & mask, read()) << "cswap size " << size << " equal " << equal;
            }
        }
    }

    loom_worker_h& initiator_ = sender_;  ///< the pair's names in RMA terms
    loom_worker_h& target_ = receiver_;
    std::vector<loom_mem_h> maps_;
    std::vector<loom_rkey_h> rkeys_;
    std::vector<std::vector<std::uint8_t>> buffers_;
};

// Every limit of self (short 4 KiB), shm (short 232, bcopy 8 KiB) and tcp (short 8 KiB,
// bcopy 64 KiB, get bcopy 65528), one below, at and above, up to 4 MiB.
const std::vector<std::size_t> kSizes = {1,     7,     8,      231,     232,           233,    4095,  4096,
                                         4097,  8191,  8192,   8193,    65527,         65528,  65529, 65535,
                                         65536, 65537, 100000, 1 << 20, (1 << 20) + 3, 4 << 20};

TEST_P(UcpRmaTest, PutGetEverySizeRegisteredMemory) {
    Mapped m = map((4 << 20) + 64, false);
    loom_rkey_h k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    unsigned seed = 1;
    for (std::size_t size : kSizes) round_trip(m, k, size, 0, 0, seed++);
}

/**
 * Puts, gets and a fetching atomic past their deadline (already past when posted): their
 * data is in the transport's hands from the call, so they complete normally, data intact
 * (docs/reliability.md, per-operation deadlines).
 */
TEST_P(UcpRmaTest, DeadlineOfRmaInFlightLetsItComplete) {
    Mapped m = map((4 << 20) + 64, false);
    loom_rkey_h k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    loom_request_param_t past{};
    past.op_attr_mask = LOOM_OP_ATTR_FIELD_DEADLINE | LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE;
    // Connected first: an operation still queued for a lane that is connecting (rc) is
    // withdrawn at its deadline, unsent (docs/reliability.md).
    ASSERT_EQ(LOOM_OK, put(m.address, 8, m.address, k));
    ASSERT_EQ(LOOM_OK, flush());
    for (std::size_t size : {std::size_t{8}, std::size_t{70000}, std::size_t{4} << 20}) {
        auto data = pattern(size, 11);
        ASSERT_EQ(LOOM_OK, put(data.data(), size, m.address, k, &past)) << size;
        ASSERT_EQ(LOOM_OK, flush());
        std::vector<std::uint8_t> back(size);
        ASSERT_EQ(LOOM_OK, get(back.data(), size, m.address, k, &past)) << size;
        EXPECT_EQ(0, std::memcmp(back.data(), data.data(), size)) << size;
    }
    std::uint64_t value = 5, reply = 0, start = 0;
    std::memcpy(&start, m.address + 8, sizeof(start));
    loom_request_param_t p = past;
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_DATATYPE | LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
    p.datatype = loom_dt_make_contig(8);
    p.reply_buffer = &reply;
    ASSERT_EQ(LOOM_OK,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_ADD, &value, 1, addr(m.address + 8), k, &p)));
    EXPECT_EQ(start, reply);
}

TEST_P(UcpRmaTest, PutGetEverySizeAllocatedMemory) {
    Mapped m = map((4 << 20) + 64, true);
    ASSERT_NE(nullptr, m.address);
    loom_rkey_h k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    unsigned seed = 3;
    for (std::size_t size : kSizes) round_trip(m, k, size, 0, 0, seed++);
}

/**
 * LOOM_MEM_MAP_FIXED places the allocation at exactly the address asked for (an OpenSHMEM
 * symmetric heap is at one address in every process), is reachable like any allocation, and
 * never replaces what is mapped there already.
 */
TEST_P(UcpRmaTest, FixedAllocationIsAtTheAddressAndNeverOverAnother) {
    // A free range: reserve one, give it back, ask for it.
    const std::size_t length = (1 << 20) + 64;
    void* hole = ::mmap(nullptr, 2 * length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, hole);
    ASSERT_EQ(0, ::munmap(hole, 2 * length));
    loom_mem_map_params_t p{};
    p.field_mask = LOOM_MEM_MAP_PARAM_FIELD_ADDRESS | LOOM_MEM_MAP_PARAM_FIELD_LENGTH | LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
    p.address = hole;
    p.length = length;
    p.flags = LOOM_MEM_MAP_ALLOCATE | LOOM_MEM_MAP_FIXED;
    loom_mem_h memh = nullptr;
    ASSERT_EQ(LOOM_OK, loom_mem_map(ctx_, &p, &memh));
    maps_.push_back(memh);
    loom_mem_attr_t a{};
    a.field_mask = LOOM_MEM_ATTR_FIELD_ADDRESS | LOOM_MEM_ATTR_FIELD_LENGTH;
    ASSERT_EQ(LOOM_OK, loom_mem_query(memh, &a));
    EXPECT_EQ(hole, a.address);
    EXPECT_GE(a.length, length);
    Mapped m;
    m.memh = memh;
    m.address = static_cast<std::uint8_t*>(a.address);
    m.length = a.length;
    loom_rkey_h k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    unsigned seed = 5;
    for (std::size_t size : {std::size_t{8}, std::size_t{4096}, std::size_t{1} << 20}) round_trip(m, k, size, 0, 0, seed++);
    // Over the first one: refused, and the first one keeps its contents.
    m.address[length - 1] = 0x3c;
    loom_mem_h clash = nullptr;
    EXPECT_EQ(LOOM_ERR_NO_MEMORY, loom_mem_map(ctx_, &p, &clash));
    EXPECT_EQ(nullptr, clash);
    EXPECT_EQ(0x3c, m.address[length - 1]);
    // FIXED needs ALLOCATE and a page-aligned address.
    p.flags = LOOM_MEM_MAP_FIXED;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_mem_map(ctx_, &p, &clash));
    p.flags = LOOM_MEM_MAP_ALLOCATE | LOOM_MEM_MAP_FIXED;
    p.address = static_cast<std::uint8_t*>(hole) + length + 8;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_mem_map(ctx_, &p, &clash));
}

/**
 * Mappings no machine can give are refused at once, with a clear error: an allocation of
 * 1 TiB (shm sized a segment that large and populated it until memory ran out) and a
 * range that wraps around the address space (accepted on shm and self).
 */
TEST_P(UcpRmaTest, ImpossibleMappingsAreRefused) {
    loom::test::LogCapture log("error");
    loom_mem_map_params_t p{};
    p.field_mask = LOOM_MEM_MAP_PARAM_FIELD_LENGTH | LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
    p.length = std::size_t{1} << 40;
    p.flags = LOOM_MEM_MAP_ALLOCATE;
    loom_mem_h memh = nullptr;
    EXPECT_EQ(LOOM_ERR_NO_MEMORY, loom_mem_map(ctx_, &p, &memh));
    EXPECT_EQ(nullptr, memh);
    char byte = 0;
    p.field_mask = LOOM_MEM_MAP_PARAM_FIELD_ADDRESS | LOOM_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address = &byte;
    p.length = SIZE_MAX - 8;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_mem_map(ctx_, &p, &memh));
    EXPECT_EQ(nullptr, memh);
    EXPECT_EQ(1, log.count("wrap around the address space"));
    // What is possible still maps.
    p.length = 1;
    ASSERT_EQ(LOOM_OK, loom_mem_map(ctx_, &p, &memh));
    maps_.push_back(memh);
}

TEST_P(UcpRmaTest, UnalignedOffsets) {
    Mapped m = map((1 << 20) + 64, false);
    loom_rkey_h k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    unsigned seed = 5;
    for (std::size_t size : {1, 3, 232, 233, 8193, 65537, 1 << 20}) {
        for (auto [roff, loff] : {std::pair<std::size_t, std::size_t>{1, 3}, {7, 0}, {13, 5}, {63, 1}}) {
            round_trip(m, k, size, roff, loff, seed++);
        }
    }
}

/** A mapping given for the local buffer is used for zero-copy (and must cover the buffer). */
TEST_P(UcpRmaTest, LocalBufferMapping) {
    Mapped remote = map(1 << 20, false);
    Mapped local = map(1 << 20, true);
    loom_rkey_h k = rkey_of(remote);
    auto data = pattern(1 << 20, 9);
    std::memcpy(local.address, data.data(), data.size());
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_MEMH;
    p.memh = local.memh;
    ASSERT_EQ(LOOM_OK, put(local.address, data.size(), remote.address, k, &p));
    ASSERT_EQ(LOOM_OK, flush());
    EXPECT_EQ(0, std::memcmp(remote.address, data.data(), data.size()));
    std::memset(local.address, 0, local.length);
    ASSERT_EQ(LOOM_OK, get(local.address, data.size(), remote.address, k, &p));
    EXPECT_EQ(0, std::memcmp(local.address, data.data(), data.size()));
    // A buffer the mapping does not cover is refused.
    std::vector<std::uint8_t> other(64);
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, put(other.data(), other.size(), remote.address, k, &p));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, put(local.address + 8, local.length, remote.address, k, &p));
}

TEST_P(UcpRmaTest, ZeroLengthCompletesAtOnce) {
    Mapped m = map(64, false);
    loom_rkey_h k = rkey_of(m);
    EXPECT_EQ(nullptr, loom_put_nbx(ep_, m.address, 0, addr(m.address), k, nullptr));
    EXPECT_EQ(nullptr, loom_get_nbx(ep_, m.address, 0, addr(m.address + 64), k, nullptr));
    EXPECT_EQ(nullptr, loom_put_nbx(ep_, nullptr, 0, addr(m.address), k, nullptr));
    // A null buffer, endpoint or key with data to move is refused.
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, LOOM_PTR_STATUS(loom_put_nbx(ep_, nullptr, 8, addr(m.address), k, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, LOOM_PTR_STATUS(loom_get_nbx(ep_, nullptr, 8, addr(m.address), k, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              LOOM_PTR_STATUS(loom_put_nbx(ep_, m.address, 8, addr(m.address), nullptr, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              LOOM_PTR_STATUS(loom_get_nbx(nullptr, m.address, 8, addr(m.address), k, nullptr)));
}

TEST_P(UcpRmaTest, IovPutAndUnsupportedDatatypes) {
    Mapped m = map(300000, false);
    loom_rkey_h k = rkey_of(m);
    for (std::size_t size : {10, 20000, 300000}) {
        auto data = pattern(size, 4);
        std::size_t a = size / 3, b = size / 4;
        loom_dt_iov_t iov[3] = {{data.data(), a}, {data.data() + a, b}, {data.data() + a + b, size - a - b}};
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
        p.datatype = loom_dt_make_iov();
        std::memset(m.address, 0, m.length);
        ASSERT_EQ(LOOM_OK, put(iov, 3, m.address, k, &p)) << size;
        ASSERT_EQ(LOOM_OK, flush());
        EXPECT_EQ(0, std::memcmp(m.address, data.data(), size)) << size;
        std::vector<std::uint8_t> back(size);
        loom_dt_iov_t riov[1] = {{back.data(), size}};
        EXPECT_EQ(LOOM_ERR_UNSUPPORTED, get(riov, 1, m.address, k, &p)) << "get takes contiguous data only";
    }
    // Contiguous elements larger than a byte: count is in elements.
    std::vector<std::uint64_t> words = {1, 2, 3, 4, 5};
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
    p.datatype = loom_dt_make_contig(8);
    ASSERT_EQ(LOOM_OK, put(words.data(), words.size(), m.address, k, &p));
    std::vector<std::uint64_t> back(5);
    ASSERT_EQ(LOOM_OK, get(back.data(), back.size(), m.address, k, &p));
    EXPECT_EQ(words, back);
}

/** Puts to one address on both sides of a fence: the later value wins, every time. */
TEST_P(UcpRmaTest, FenceOrdersPuts) {
    Mapped m = map(1 << 20, false);
    loom_rkey_h k = rkey_of(m);
    auto big = pattern(1 << 20, 2);
    for (int round = 0; round < 50; ++round) {
        std::uint64_t first = 1000 + round, second = 5000 + round;
        std::memcpy(big.data(), &first, sizeof(first));
        // A large (zero-copy where the lane has it) and a small put to the same word.
        loom_status_ptr_t r1 = loom_put_nbx(ep_, big.data(), big.size(), addr(m.address), k, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(r1));
        ASSERT_EQ(LOOM_OK, round % 2 ? loom_ep_fence(ep_) : loom_worker_fence(initiator_));
        loom_status_ptr_t r2 = loom_put_nbx(ep_, &second, sizeof(second), addr(m.address), k, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(r2));
        ASSERT_EQ(LOOM_OK, wait(r1));
        ASSERT_EQ(LOOM_OK, wait(r2));
        ASSERT_EQ(LOOM_OK, flush());
        std::uint64_t seen;
        std::memcpy(&seen, m.address, sizeof(seen));
        ASSERT_EQ(second, seen) << "round " << round;
    }
}

/**
 * After a flush the data is at the target. Where the target applies puts itself (tcp),
 * the puts below complete at once and only a flush that waits for the target sees them.
 */
TEST_P(UcpRmaTest, FlushMakesPutsVisible) {
    Mapped m = map(64 * 1024, false);
    loom_rkey_h k = rkey_of(m);
    std::memset(m.address, 0, m.length);
    std::vector<std::uint64_t> values(1000);
    for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = 0xabc00000 + i;
        loom_status_ptr_t r = loom_put_nbx(ep_, &values[i], 8, addr(m.address + 8 * i), k, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(r));
        if (LOOM_PTR_IS_PTR(r)) loom_request_free(r);  // the values stay in place until the flush
    }
    ASSERT_EQ(LOOM_OK, flush());
    for (std::size_t i = 0; i < values.size(); ++i) {
        std::uint64_t seen;
        std::memcpy(&seen, m.address + 8 * i, 8);
        ASSERT_EQ(values[i], seen) << "word " << i << " not at the target after the flush";
    }
    // The worker flush too, for puts and posted atomics.
    Mapped words = map(64, true);
    loom_rkey_h wk = rkey_of(words);
    std::memset(words.address, 0, 64);
    for (int i = 0; i < 100; ++i)
        ASSERT_EQ(LOOM_OK, atomic(LOOM_ATOMIC_OP_ADD, 8, 3, nullptr, words.address, wk));
    ASSERT_EQ(LOOM_OK, wait(loom_worker_flush_nbx(initiator_, nullptr)));
    std::uint64_t sum;
    std::memcpy(&sum, words.address, 8);
    EXPECT_EQ(300u, sum);
}

/** Every operation at both sizes, posted and fetching; the old value and the result checked. */
TEST_P(UcpRmaTest, AtomicsEveryOperation) {
    Mapped m = map(64, true);  // shm atomics need memory the transport allocated
    loom_rkey_h k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    check_every_atomic(m, k);
}

TEST_P(UcpRmaTest, AtomicBadParameters) {
    Mapped m = map(64, true);
    loom_rkey_h k = rkey_of(m);
    std::uint64_t v = 1, reply = 0;
    loom_request_param_t p{};
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_ADD, &v, 1, addr(m.address), k, &p)))
        << "no datatype";
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
    p.datatype = loom_dt_make_contig(2);
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_ADD, &v, 1, addr(m.address), k, &p)));
    p.datatype = loom_dt_make_contig(8);
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_ADD, &v, 2, addr(m.address), k, &p)))
        << "count 2";
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_ADD, &v, 1, addr(m.address + 4), k, &p)))
        << "misaligned";
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_LAST, &v, 1, addr(m.address), k, &p)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_SWAP, &v, 1, addr(m.address), k, &p)))
        << "swap without a reply buffer";
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_CSWAP, &v, 1, addr(m.address), k, &p)));
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
    p.reply_buffer = nullptr;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_ADD, &v, 1, addr(m.address), k, &p)));
    p.reply_buffer = &reply;
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED,
              wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_ADD, &v, 1, addr(m.address + 64), k, &p)))
        << "outside the region";
    EXPECT_EQ(LOOM_OK, wait(loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_ADD, &v, 1, addr(m.address + 56), k, &p)));
}

/** Features select what works: no RMA feature, no key; AMO32 alone, no 64-bit atomics. */
TEST_P(UcpRmaTest, FeaturesAreRequired) {
    init({}, LOOM_FEATURE_TAG);
    Mapped m = map(64, true);
    auto blob = pack(m.memh);
    loom_rkey_h k = nullptr;
    EXPECT_EQ(LOOM_ERR_UNSUPPORTED, loom_ep_rkey_unpack(ep_, blob.data(), blob.size(), &k));
    init({}, LOOM_FEATURE_AMO32);
    m = map(64, true);
    k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    std::uint64_t reply = 0;
    EXPECT_EQ(LOOM_OK, atomic(LOOM_ATOMIC_OP_ADD, 4, 1, &reply, m.address, k));
    EXPECT_EQ(LOOM_ERR_UNSUPPORTED, atomic(LOOM_ATOMIC_OP_ADD, 8, 1, &reply, m.address, k));
    EXPECT_EQ(LOOM_ERR_UNSUPPORTED, put(&reply, 8, m.address, k)) << "put needs LOOM_FEATURE_RMA";
}

TEST_P(UcpRmaTest, RkeyPackUnpackRoundTrip) {
    Mapped m = map(4096, false);
    auto blob = pack(m.memh);
    ASSERT_GE(blob.size(), 24u);
    EXPECT_EQ(2, blob[0]) << "version";
    std::uint32_t total;
    std::memcpy(&total, blob.data() + 4, 4);
    EXPECT_EQ(blob.size(), total);
    // Two keys from one blob, used alternately, destroyed in any order.
    loom_rkey_h k1 = nullptr, k2 = nullptr;
    ASSERT_EQ(LOOM_OK, loom_ep_rkey_unpack(ep_, blob.data(), blob.size(), &k1));
    ASSERT_EQ(LOOM_OK, loom_ep_rkey_unpack(ep_, blob.data(), blob.size(), &k2));
    std::uint64_t v = 42, back = 0;
    ASSERT_EQ(LOOM_OK, put(&v, 8, m.address + 100, k1));
    ASSERT_EQ(LOOM_OK, flush());
    ASSERT_EQ(LOOM_OK, get(&back, 8, m.address + 100, k2));
    EXPECT_EQ(42u, back);
    loom_rkey_destroy(k1);
    ASSERT_EQ(LOOM_OK, get(&back, 8, m.address + 100, k2));
    loom_rkey_destroy(k2);
    // A key is for the endpoint it was unpacked on.
    if (!GetParam().self) {
        loom_ep_h back_ep = connect(target_, initiator_);
        loom_rkey_h k3 = nullptr;
        ASSERT_EQ(LOOM_OK, loom_ep_rkey_unpack(back_ep, blob.data(), blob.size(), &k3));
        EXPECT_EQ(LOOM_ERR_INVALID_PARAM, put(&v, 8, m.address, k3));
        loom_rkey_destroy(k3);
    }
}

/** Truncated, padded, foreign-version and inconsistent blobs: refused, never read past their size. */
TEST_P(UcpRmaTest, MalformedRkeysAreRefused) {
    Mapped m = map(4096, false);
    auto blob = pack(m.memh);
    LogCapture capture("error");
    loom_rkey_h k = nullptr;
    for (std::size_t n = 0; n < blob.size(); ++n) {
        // An exact-size copy, so AddressSanitizer catches a read past it.
        std::vector<std::uint8_t> cut(blob.begin(), blob.begin() + static_cast<long>(n));
        EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_rkey_unpack(ep_, n ? cut.data() : blob.data(), n, &k)) << n;
    }
    auto padded = blob;
    padded.push_back(0);
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_rkey_unpack(ep_, padded.data(), padded.size(), &k));
    auto bad = blob;
    bad[0] ^= 0xff;  // the version byte
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_rkey_unpack(ep_, bad.data(), bad.size(), &k));
    bad = blob;
    bad[1] += 1;  // one entry more than the blob holds
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_rkey_unpack(ep_, bad.data(), bad.size(), &k));
    bad = blob;
    bad[2] = 0xff;  // unknown rights
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_rkey_unpack(ep_, bad.data(), bad.size(), &k));
    bad = blob;
    std::memset(bad.data() + 16, 0xff, 8);  // a region that wraps around the address space
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_rkey_unpack(ep_, bad.data(), bad.size(), &k));
    bad = blob;
    bad[24] = 200;  // the first entry's name runs past the end
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_rkey_unpack(ep_, bad.data(), bad.size(), &k));
    // Every single-byte corruption: refused or accepted, but never a crash.
    for (std::size_t i = 0; i < blob.size(); ++i) {
        bad = blob;
        bad[i] ^= 0x5a;
        loom_rkey_h any = nullptr;
        if (loom_ep_rkey_unpack(ep_, bad.data(), bad.size(), &any) == LOOM_OK) loom_rkey_destroy(any);
    }
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_rkey_unpack(ep_, nullptr, 10, &k));
    EXPECT_GE(capture.count("rkey_unpack"), 7);
}

TEST_P(UcpRmaTest, MemMapBadParameters) {
    loom_mem_h h = nullptr;
    loom_mem_map_params_t p{};
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_mem_map(ctx_, &p, &h)) << "no length";
    std::vector<std::uint8_t> buf(64);
    p.field_mask = LOOM_MEM_MAP_PARAM_FIELD_LENGTH;
    p.length = 64;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_mem_map(ctx_, &p, &h)) << "no address, no allocation";
    p.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_ADDRESS | LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
    p.address = buf.data();
    p.flags = 1u << 5;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_mem_map(ctx_, &p, &h)) << "unknown flag";
    p.flags = 0;
    p.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_PROT;
    p.prot = 1u << 20;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_mem_map(ctx_, &p, &h)) << "unknown protection";
    p.field_mask = LOOM_MEM_MAP_PARAM_FIELD_LENGTH | LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
    p.flags = LOOM_MEM_MAP_ALLOCATE;
    p.length = 0;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_mem_map(ctx_, &p, &h)) << "zero length";
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_mem_unmap(ctx_, nullptr));
}

/** Accesses outside the key's region, or without the right, fail with a status. */
TEST_P(UcpRmaTest, OutOfRangeAndRightsAreRefused) {
    Mapped m = map(4096, false);
    loom_rkey_h k = rkey_of(m);
    std::vector<std::uint8_t> buf(1 << 20, 1);
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, put(buf.data(), 8, m.address + 4092, k)) << "crosses the end";
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, put(buf.data(), 8, m.address - 8, k)) << "before the start";
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, put(buf.data(), buf.size(), m.address, k)) << "large";
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, get(buf.data(), 4097, m.address, k));
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, get(buf.data(), 1, m.address + 4096, k));
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, put(buf.data(), 1, reinterpret_cast<void*>(~0ull), k)) << "wraps";
    EXPECT_EQ(LOOM_OK, put(buf.data(), 4096, m.address, k));
    // Read-only memory: gets work, puts and atomics do not.
    Mapped ro =
        map(4096, true,
            LOOM_MEM_MAP_PROT_LOCAL_READ | LOOM_MEM_MAP_PROT_LOCAL_WRITE | LOOM_MEM_MAP_PROT_REMOTE_READ);
    loom_rkey_h rk = rkey_of(ro);
    EXPECT_EQ(LOOM_OK, get(buf.data(), 4096, ro.address, rk));
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, put(buf.data(), 8, ro.address, rk));
    std::uint64_t reply;
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, atomic(LOOM_ATOMIC_OP_ADD, 8, 1, &reply, ro.address, rk));
    EXPECT_EQ(LOOM_OK, flush());
}

/**
 * The transports' own checks, behind a key whose protocol-level region was forged
 * larger: shm checks the transport key at the initiator, tcp at the target (the put is
 * refused there and the flush reports it), self the target's key table in the call.
 */
TEST_P(UcpRmaTest, TransportChecksAForgedRegion) {
    if (std::string(GetParam().tls).rfind("rc", 0) == 0) {
        GTEST_SKIP() << "rc: the NIC checks the memory registration, which covers whole pages (the registration "
                        "cache registers pages), so a forged region that stays inside them is not caught (nor "
                        "with UCX); an access outside every registration fails the endpoint (Rc/IbPairTest)";
    }
    Mapped m = map(4096, false);
    auto blob = pack(m.memh);
    std::uint64_t length = 1 << 20;
    std::memcpy(blob.data() + 16, &length, 8);
    loom_rkey_h k = nullptr;
    ASSERT_EQ(LOOM_OK, loom_ep_rkey_unpack(ep_, blob.data(), blob.size(), &k));
    rkeys_.push_back(k);
    LogCapture capture("error");
    std::vector<std::uint8_t> buf(8192, 3);
    loom_status_t put_status = put(buf.data(), 16, m.address + 4090, k);
    loom_status_t flush_status = flush();
    EXPECT_TRUE(put_status == LOOM_ERR_ACCESS_DENIED || flush_status == LOOM_ERR_ACCESS_DENIED)
        << loom_status_string(put_status) << " / " << loom_status_string(flush_status);
    EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, get(buf.data(), 8192, m.address, k));
    EXPECT_EQ(LOOM_OK, flush()) << "the error was reported once";
}

/**
 * Unmap while a peer holds the key (documented behaviour): tcp and self refuse every
 * access once the registration is gone (tcp at the target, reported by the flush; self in
 * the call); shm (in one process, or through CMA) reaches the memory as long as it is
 * mapped, since it does not look the registration up. Never a crash.
 */
TEST_P(UcpRmaTest, UnmapWhileKeyInUse) {
    Mapped m = map(8192, false);
    loom_rkey_h k = rkey_of(m);
    ASSERT_EQ(LOOM_OK, loom_mem_unmap(ctx_, m.memh));
    maps_.erase(std::find(maps_.begin(), maps_.end(), m.memh));
    std::vector<std::uint8_t> buf(8192, 9);
    loom_status_t p = put(buf.data(), 8, m.address, k);
    loom_status_t f = flush();
    loom_status_t g = get(buf.data(), 8192, m.address, k);
    if (std::string(GetParam().name) == "tcp") {
        EXPECT_EQ(LOOM_OK, p) << "posted: the target refuses it";
        EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, f);
        EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, g);
    } else if (std::string(GetParam().name) == "self") {
        EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, p);
        EXPECT_EQ(LOOM_OK, f);
        EXPECT_EQ(LOOM_ERR_ACCESS_DENIED, g);
    } else {
        EXPECT_EQ(LOOM_OK, p);
        EXPECT_EQ(LOOM_OK, f);
        EXPECT_EQ(LOOM_OK, g);
    }
}

TEST_P(UcpRmaTest, CallbacksRequestsAndImmediateFlags) {
    Mapped m = map(1 << 20, false);
    loom_rkey_h k = rkey_of(m);
    loom_context_attr_t cattr{};
    cattr.field_mask = LOOM_ATTR_FIELD_REQUEST_SIZE;
    ASSERT_EQ(LOOM_OK, loom_context_query(ctx_, &cattr));
    std::vector<char> mem(cattr.request_size + 64);
    struct Seen {
        int calls = 0;
        loom_status_t status = LOOM_INPROGRESS;
    } seen;
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_REQUEST | LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA |
                     LOOM_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.request = mem.data() + cattr.request_size;
    p.user_data = &seen;
    p.cb.send = [](void*, loom_status_t status, void* ud) {
        auto* s = static_cast<Seen*>(ud);
        ++s->calls;
        s->status = status;
    };
    auto data = pattern(1 << 20, 8);
    for (std::size_t size : {8, 100000, 1 << 20}) {
        seen = {};
        loom_status_ptr_t r = loom_put_nbx(ep_, data.data(), size, addr(m.address), k, &p);
        ASSERT_EQ(p.request, r) << "NO_IMM_CMPL returns the caller's request";
        EXPECT_EQ(LOOM_OK, wait(r));
        if (seen.calls == 0) progress();
        EXPECT_LE(seen.calls, 1);
        std::vector<std::uint8_t> back(size);
        seen = {};
        r = loom_get_nbx(ep_, back.data(), size, addr(m.address), k, &p);
        ASSERT_EQ(p.request, r);
        EXPECT_EQ(LOOM_OK, wait(r));
        EXPECT_EQ(0, std::memcmp(back.data(), data.data(), size));
    }
    // FORCE_IMM_CMPL: a small put completes or says no_resource; a get always says no_resource.
    loom_request_param_t f{};
    f.op_attr_mask = LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    loom_status_ptr_t r = loom_put_nbx(ep_, data.data(), 8, addr(m.address), k, &f);
    EXPECT_TRUE(r == nullptr || LOOM_PTR_STATUS(r) == LOOM_ERR_NO_RESOURCE);
    EXPECT_EQ(LOOM_ERR_NO_RESOURCE,
              LOOM_PTR_STATUS(loom_get_nbx(ep_, data.data(), 8, addr(m.address), k, &f)));
    r = loom_put_nbx(ep_, data.data(), 1 << 20, addr(m.address), k,
                     &f);  // bcopy on self, zero-copy elsewhere
    EXPECT_TRUE(r == nullptr || LOOM_PTR_STATUS(r) == LOOM_ERR_NO_RESOURCE);
    EXPECT_EQ(LOOM_OK, flush());
}

/** A forced close fails what is outstanding; the requests complete, none hangs. */
TEST_P(UcpRmaTest, ForcedCloseFailsOutstanding) {
    Mapped m = map(4 << 20, false);
    loom_rkey_h k = rkey_of(m);
    std::vector<std::uint8_t> buf(4 << 20);
    std::vector<loom_status_ptr_t> reqs;
    // Without target progress, tcp's gets wait for the target: they are outstanding.
    for (int i = 0; i < 8; ++i) {
        loom_status_ptr_t r = loom_get_nbx(ep_, buf.data(), buf.size(), addr(m.address), k, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(r));
        if (LOOM_PTR_IS_PTR(r)) reqs.push_back(r);
    }
    std::uint64_t reply;
    loom_request_param_t ap{};
    ap.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE | LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
    ap.datatype = loom_dt_make_contig(8);
    ap.reply_buffer = &reply;
    std::uint64_t one = 1;
    loom_status_ptr_t a = loom_atomic_op_nbx(ep_, LOOM_ATOMIC_OP_ADD, &one, 1, addr(m.address), k, &ap);
    ASSERT_FALSE(LOOM_PTR_IS_ERR(a));
    if (LOOM_PTR_IS_PTR(a)) reqs.push_back(a);
    if (std::string(GetParam().name) == "tcp") {
        EXPECT_FALSE(reqs.empty()) << "tcp gets wait for the target";
    }
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    EXPECT_EQ(LOOM_OK, wait(loom_ep_close_nbx(ep_, &p)));
    ep_ = nullptr;
    for (loom_status_ptr_t r : reqs) {
        ASSERT_NE(LOOM_INPROGRESS, loom_request_check_status(r)) << "completed by the close";
        EXPECT_EQ(LOOM_ERR_CANCELED, wait(r));
    }
    for (int i = 0; i < 100; ++i) progress();  // late replies find nothing
}

/** Worker destroy with operations outstanding: they complete (canceled) first. */
TEST_P(UcpRmaTest, WorkerDestroyCancelsOutstanding) {
    Mapped m = map(1 << 20, false);
    loom_rkey_h k = rkey_of(m);
    std::vector<std::uint8_t> buf(1 << 20);
    loom_context_attr_t cattr{};
    cattr.field_mask = LOOM_ATTR_FIELD_REQUEST_SIZE;
    ASSERT_EQ(LOOM_OK, loom_context_query(ctx_, &cattr));
    // Caller memory: the handle stays readable after the worker (and its request pool) is gone.
    std::vector<char> mem(cattr.request_size + 64);
    struct Seen {
        int calls = 0;
        loom_status_t status = LOOM_OK;
    } seen;
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_REQUEST | LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA;
    p.request = mem.data() + cattr.request_size;
    p.user_data = &seen;
    p.cb.send = [](void*, loom_status_t status, void* ud) {
        auto* s = static_cast<Seen*>(ud);
        ++s->calls;
        s->status = status;
    };
    loom_status_ptr_t r = loom_get_nbx(ep_, buf.data(), buf.size(), addr(m.address), k, &p);
    if (r == nullptr) GTEST_SKIP() << "the get completed at once on " << GetParam().name;
    ASSERT_EQ(p.request, r);
    ASSERT_EQ(LOOM_INPROGRESS, loom_request_check_status(r));
    for (loom_rkey_h key : rkeys_) loom_rkey_destroy(key);
    rkeys_.clear();
    ep_ = nullptr;  // destroyed with its worker
    loom_worker_destroy(initiator_);
    if (target_ != initiator_) loom_worker_destroy(target_);
    initiator_ = target_ = nullptr;
    EXPECT_EQ(1, seen.calls);
    EXPECT_EQ(LOOM_ERR_CANCELED, seen.status);
    EXPECT_EQ(LOOM_ERR_CANCELED, loom_request_check_status(r));
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpRmaTest,
                         testing::Values(TlSet{"self", "self", true}, TlSet{"shm", "shm", false},
                                         TlSet{"tcp", "tcp", false}),
                         [](const testing::TestParamInfo<TlSet>& info) {
                             return std::string(info.param.name);
                         });

/** rc, where test/rdma/run_rdma_tests.sh runs the protocol layer on RDMA devices (LOOMTEST_UCP_VERBS=1). */
INSTANTIATE_TEST_SUITE_P(Verbs, UcpRmaTest, testing::ValuesIn(loom::test::verbs_tl_sets()),
                         [](const testing::TestParamInfo<TlSet>& info) {
                             return std::string(info.param.name);
                         });

/**
 * Who performs atomics (LOOM_ATOMIC_MODE): by default CPU atomics on every transport (rc:
 * the target's progress), on memory the user registered as well as on memory Loom
 * allocated; the protocol table names the path; with the NIC's atomics chosen, an
 * endpoint whose lane would use CPU atomics refuses them. Over shm and tcp, and over rc
 * in the RDMA VM (the Verbs instance).
 */
class UcpAtomicPathTest : public UcpRmaTest {
protected:
    bool rc() const { return std::string(GetParam().tls).rfind("rc", 0) == 0; }
};

TEST_P(UcpAtomicPathTest, EveryOperationOnRegisteredAndAllocatedMemory) {
    for (bool allocate : {false, true}) {
        Mapped m = map(64, allocate);
        loom_rkey_h k = rkey_of(m);
        ASSERT_NE(nullptr, k);
        SCOPED_TRACE(allocate ? "allocated" : "registered");
        check_every_atomic(m, k);
    }
}

TEST_P(UcpAtomicPathTest, AFenceOrdersAPutAfterPostedAtomics) {
    Mapped m = map(64, false);
    loom_rkey_h k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    for (int round = 0; round < 20; ++round) {
        std::memset(m.address, 0, 16);
        for (int i = 0; i < 8; ++i)
            ASSERT_EQ(LOOM_OK, atomic(LOOM_ATOMIC_OP_ADD, 8, 1, nullptr, m.address, k));
        ASSERT_EQ(LOOM_OK, loom_ep_fence(ep_));
        const std::uint64_t value = 1000 + round;
        ASSERT_EQ(LOOM_OK, put(&value, sizeof(value), m.address, k));
        ASSERT_EQ(LOOM_OK, flush());
        std::uint64_t got;
        std::memcpy(&got, m.address, 8);
        ASSERT_EQ(value, got) << "round " << round
                              << ": an atomic posted before the fence landed after the put";
    }
}

TEST_P(UcpAtomicPathTest, ProtoInfoNamesThePath) {
    testing::internal::CaptureStderr();
    init({{"LOOM_PROTO_INFO", "y"}});
    std::string info = testing::internal::GetCapturedStderr();
    EXPECT_NE(std::string::npos, info.find("by CPU atomics (atomic with every other transport's)")) << info;
}

TEST_P(UcpAtomicPathTest, DeviceModeRefusesCpuAtomics) {
    init({{"LOOM_ATOMIC_MODE", "device"}});
    Mapped m = map(64, true);
    loom_rkey_h k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    std::uint64_t reply = 0;
    // In the RDMA VM the Verbs instance runs on rxe (NIC atomics) and on siw (none).
    const char* devices = std::getenv("LOOM_NET_DEVICES");
    const bool nic = rc() && devices != nullptr && std::string(devices).rfind("siw", 0) != 0;
    if (nic) {
        // verbs' own atomics: 64-bit fetch-and-add and compare-and-swap, nothing else.
        std::memset(m.address, 0, 16);
        ASSERT_EQ(LOOM_OK, atomic(LOOM_ATOMIC_OP_ADD, 8, 5, &reply, m.address, k));
        ASSERT_EQ(LOOM_OK, atomic(LOOM_ATOMIC_OP_ADD, 8, 5, &reply, m.address, k));
        EXPECT_EQ(5u, reply);
        LogCapture capture("error");
        EXPECT_EQ(LOOM_ERR_UNSUPPORTED, atomic(LOOM_ATOMIC_OP_XOR, 8, 1, &reply, m.address, k));
        EXPECT_EQ(1, capture.count("has no 64-bit atomic xor")) << capture.text();
    } else {
        LogCapture capture("error");
        EXPECT_EQ(LOOM_ERR_UNSUPPORTED, atomic(LOOM_ATOMIC_OP_ADD, 8, 1, &reply, m.address, k));
        EXPECT_EQ(1, capture.count("LOOM_ATOMIC_MODE=device")) << capture.text();
    }
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpAtomicPathTest,
                         testing::Values(TlSet{"shm", "shm", false}, TlSet{"tcp", "tcp", false}),
                         [](const testing::TestParamInfo<TlSet>& info) {
                             return std::string(info.param.name);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(UcpAtomicPathTest);
INSTANTIATE_TEST_SUITE_P(Verbs, UcpAtomicPathTest, testing::ValuesIn(loom::test::verbs_tl_sets()),
                         [](const testing::TestParamInfo<TlSet>& info) {
                             return std::string(info.param.name);
                         });

/**
 * One worker to itself over self and shm: self is the AM lane and shm, the faster
 * rendezvous lane, carries RMA, so keys carry two entries and the RMA lane has its own
 * pending queue.
 */
class UcpRmaTwoLanesTest : public UcpRmaTest {};

TEST_P(UcpRmaTwoLanesTest, EverythingOnTheRendezvousLane) {
    Mapped m = map((4 << 20) + 64, true);
    loom_rkey_h k = rkey_of(m);
    ASSERT_NE(nullptr, k);
    unsigned seed = 11;
    for (std::size_t size : kSizes) round_trip(m, k, size, 0, 0, seed++);
    std::uint64_t reply = 0;
    std::memset(m.address, 0, 16);
    ASSERT_EQ(LOOM_OK, atomic(LOOM_ATOMIC_OP_ADD, 8, 5, nullptr, m.address, k));
    ASSERT_EQ(LOOM_OK, atomic(LOOM_ATOMIC_OP_ADD, 8, 5, &reply, m.address, k));
    EXPECT_EQ(5u, reply);
    ASSERT_EQ(LOOM_OK, loom_ep_fence(ep_));
    ASSERT_EQ(LOOM_OK, wait(loom_worker_flush_nbx(initiator_, nullptr)));
    std::uint64_t v;
    std::memcpy(&v, m.address, 8);
    EXPECT_EQ(10u, v);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpRmaTwoLanesTest, testing::Values(TlSet{"self_shm", "self,shm", true}),
                         [](const testing::TestParamInfo<TlSet>& info) {
                             return std::string(info.param.name);
                         });

// --- two processes ---------------------------------------------------------------------------

/** One process's context, worker and endpoint to the other, for RMA and atomics. */
struct Side : loom::test::UcpSide {
    bool open(const char* tls) { return UcpSide::open(tls, kAllFeatures); }
    /** Always in peer error mode: the tests kill peers. */
    bool connect(const std::vector<std::uint8_t>& peer) { return UcpSide::connect(peer, true); }

    /** Waits for a status-or-request; @p info: a receive's, filled also when it completes later. */
    loom_status_t wait(loom_status_ptr_t r, int seconds = 30, loom_tag_recv_info_t* info = nullptr) {
        return wait_with(
            r, [info](void* q) { return info ? loom_tag_recv_request_test(q, info) : loom_request_check_status(q); },
            seconds);
    }
};

constexpr std::size_t kRegion = 4 << 20;
constexpr loom_tag_t kTagDone = 1, kTagVerify = 2, kTagVerdict = 3;

/** The target: maps kRegion bytes, sends its address, the region's address and its key, serves until told. */
int target_main(ForkedPeer::Channel& ch, const char* tls, bool allocate) {
    Side me;
    if (!me.open(tls)) return 1;
    loom_mem_map_params_t mp{};
    mp.field_mask =
        LOOM_MEM_MAP_PARAM_FIELD_LENGTH | LOOM_MEM_MAP_PARAM_FIELD_FLAGS | LOOM_MEM_MAP_PARAM_FIELD_ADDRESS;
    mp.length = kRegion;
    // shm atomics across processes need transport-allocated memory (which the peer maps and
    // reaches directly); registered memory is reached with CMA, or through the target.
    std::vector<std::uint8_t> own(allocate ? 0 : kRegion);
    mp.flags = allocate ? LOOM_MEM_MAP_ALLOCATE : 0;
    mp.address = allocate ? nullptr : own.data();
    loom_mem_h memh;
    if (loom_mem_map(me.ctx, &mp, &memh) != LOOM_OK) return 2;
    loom_mem_attr_t a{};
    a.field_mask = LOOM_MEM_ATTR_FIELD_ADDRESS;
    (void)loom_mem_query(memh, &a);
    auto* region = static_cast<std::uint8_t*>(a.address);
    std::memset(region, 0, kRegion);
    void* key;
    size_t key_len;
    if (loom_rkey_pack(me.ctx, memh, &key, &key_len) != LOOM_OK) return 3;
    ch.send(me.address());
    std::uint64_t where = reinterpret_cast<std::uintptr_t>(region);
    ch.send(std::vector<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&where),
                                      reinterpret_cast<std::uint8_t*>(&where) + 8));
    ch.send(std::vector<std::uint8_t>(static_cast<std::uint8_t*>(key),
                                      static_cast<std::uint8_t*>(key) + key_len));
    loom_rkey_buffer_release(key);
    auto parent = ch.recv();
    if (!parent || !me.connect(*parent)) return 4;
    // Serve (progress) until the initiator is done; on request, check the region's bytes.
    for (;;) {
        std::uint64_t msg[2] = {0, 0};
        loom_tag_recv_info_t info{};
        loom_request_param_t rp{};
        rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
        rp.recv_info.tag_recv = &info;
        if (me.wait(loom_tag_recv_nbx(me.worker, msg, sizeof(msg), 0, 0, &rp), 120, &info) != LOOM_OK)
            return 5;
        if (info.sender_tag == kTagDone) break;
        if (info.sender_tag == kTagVerify) {
            // msg: seed and length of the pattern expected at the region's start.
            auto expect = pattern(msg[1], static_cast<unsigned>(msg[0]));
            std::uint64_t ok = std::memcmp(region, expect.data(), expect.size()) == 0 ? 1 : 0;
            if (me.wait(loom_tag_send_nbx(me.ep, &ok, sizeof(ok), kTagVerdict, nullptr)) != LOOM_OK) return 6;
        } else if (info.sender_tag == 99) {
            // Stop serving: progress no more until killed.
            ch.send(std::string("stopped"));
            (void)ch.recv(std::chrono::seconds(120));
            return 7;
        }
    }
    if (loom_mem_unmap(me.ctx, memh) != LOOM_OK) return 8;
    return 0;
}

class UcpRmaMultiProcTest : public testing::TestWithParam<const char*> {
protected:
    /** Connects to a target process and unpacks its key. */
    void start(ForkedPeer& peer, Side& me) {
        ASSERT_TRUE(me.open(GetParam()));
        auto child = peer.channel().recv();
        auto where = peer.channel().recv();
        auto key = peer.channel().recv();
        ASSERT_TRUE(child && where && key);
        std::memcpy(&region_, where->data(), 8);
        peer.channel().send(me.address());
        ASSERT_TRUE(me.connect(*child));
        ASSERT_EQ(LOOM_OK, loom_ep_rkey_unpack(me.ep, key->data(), key->size(), &rkey_));
    }

    std::uint64_t region_ = 0;
    loom_rkey_h rkey_ = nullptr;
};

TEST_P(UcpRmaMultiProcTest, PutGetAtomicsBetweenProcesses) {
    const char* tls = GetParam();
    ForkedPeer peer([tls](ForkedPeer::Channel& ch) { return target_main(ch, tls, true); });
    Side me;
    start(peer, me);
    ASSERT_NE(nullptr, rkey_);
    unsigned seed = 20;
    for (std::size_t size : {1, 8, 233, 4097, 8193, 65537, 1 << 20, 4 << 20}) {
        auto data = pattern(size, ++seed);
        ASSERT_EQ(LOOM_OK, me.wait(loom_put_nbx(me.ep, data.data(), size, region_, rkey_, nullptr))) << size;
        ASSERT_EQ(LOOM_OK, me.wait(loom_ep_flush_nbx(me.ep, nullptr))) << size;
        // The target checks its memory itself ...
        std::uint64_t verify[2] = {seed, size}, verdict = 0;
        loom_status_ptr_t rr = loom_tag_recv_nbx(me.worker, &verdict, 8, kTagVerdict, ~0ull, nullptr);
        ASSERT_EQ(LOOM_OK, me.wait(loom_tag_send_nbx(me.ep, verify, sizeof(verify), kTagVerify, nullptr)));
        ASSERT_EQ(LOOM_OK, me.wait(rr)) << "target exit " << peer.wait(std::chrono::milliseconds(1));
        EXPECT_EQ(1u, verdict) << "the target's memory differs after a put of " << size << " bytes";
        // ... and we read it back.
        std::vector<std::uint8_t> back(size, 0);
        ASSERT_EQ(LOOM_OK, me.wait(loom_get_nbx(me.ep, back.data(), size, region_, rkey_, nullptr))) << size;
        EXPECT_EQ(data, back) << size;
    }
    // Atomics at both sizes on one word: each fetched value is the previous result.
    for (unsigned size : {4u, 8u}) {
        const std::uint64_t word = region_ + 64;
        std::uint64_t zero = 0, expect = 0;
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE | LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
        p.datatype = loom_dt_make_contig(size);
        std::uint64_t reply = 0;
        p.reply_buffer = &reply;
        const std::uint64_t mask = size == 4 ? 0xffffffffull : ~0ull;
        ASSERT_EQ(LOOM_OK,
                  me.wait(loom_atomic_op_nbx(me.ep, LOOM_ATOMIC_OP_SWAP, &zero, 1, word, rkey_, &p)));
        struct Step {
            loom_atomic_op_t op;
            std::uint64_t v;
        } steps[] = {{LOOM_ATOMIC_OP_ADD, 0x1234567812345678ull},
                     {LOOM_ATOMIC_OP_XOR, 0xff00ff00ff00ff00ull},
                     {LOOM_ATOMIC_OP_OR, 0x0f0f0f0f0f0f0f0full},
                     {LOOM_ATOMIC_OP_AND, 0xfffffff0fffffff0ull},
                     {LOOM_ATOMIC_OP_SWAP, 0xdeadbeefcafef00dull}};
        for (const Step& s : steps) {
            reply = 0;
            ASSERT_EQ(LOOM_OK, me.wait(loom_atomic_op_nbx(me.ep, s.op, &s.v, 1, word, rkey_, &p))) << s.op;
            EXPECT_EQ(expect & mask, reply & mask) << "op " << s.op << " size " << size;
            switch (s.op) {
                case LOOM_ATOMIC_OP_ADD:
                    expect += s.v;
                    break;
                case LOOM_ATOMIC_OP_XOR:
                    expect ^= s.v;
                    break;
                case LOOM_ATOMIC_OP_OR:
                    expect |= s.v;
                    break;
                case LOOM_ATOMIC_OP_AND:
                    expect &= s.v;
                    break;
                default:
                    expect = s.v;
                    break;
            }
        }
        std::uint64_t cmp = expect & mask, swap = 7;
        p.reply_buffer = &swap;  // in: the value swapped in; out: the previous value
        ASSERT_EQ(LOOM_OK,
                  me.wait(loom_atomic_op_nbx(me.ep, LOOM_ATOMIC_OP_CSWAP, &cmp, 1, word, rkey_, &p)));
        EXPECT_EQ(expect & mask, swap & mask);
        std::uint64_t now = 0;
        ASSERT_EQ(LOOM_OK, me.wait(loom_get_nbx(me.ep, &now, size, word, rkey_, nullptr)));
        EXPECT_EQ(7u, now);
    }
    loom_rkey_destroy(rkey_);
    ASSERT_EQ(LOOM_OK, me.wait(loom_tag_send_nbx(me.ep, nullptr, 0, kTagDone, nullptr)));
    ASSERT_EQ(LOOM_OK, me.wait(loom_ep_flush_nbx(me.ep, nullptr)));
    EXPECT_EQ(0, peer.wait());
}

/**
 * loom_rkey_ptr: over shm, memory the target allocated is mapped here, and stores through
 * the pointer are in the target's memory (it checks them); its registered memory is not
 * mapped (unreachable), nor is anything over tcp.
 */
TEST_P(UcpRmaMultiProcTest, RkeyPtrMapsAllocatedMemoryOfAPeer) {
    const char* tls = GetParam();
    for (bool allocate : {true, false}) {
        SCOPED_TRACE(allocate ? "allocated" : "registered");
        ForkedPeer peer([tls, allocate](ForkedPeer::Channel& ch) { return target_main(ch, tls, allocate); });
        Side me;
        start(peer, me);
        ASSERT_NE(nullptr, rkey_);
        void* ptr = nullptr;
        const bool mapped = allocate && std::string(tls) == "shm";
        {
            LogCapture capture("error");
            EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_rkey_ptr(rkey_, region_ + kRegion + 1, &ptr));
            EXPECT_EQ(1, capture.count("is outside the key's region")) << capture.text();
        }
        ASSERT_EQ(mapped ? LOOM_OK : LOOM_ERR_UNREACHABLE, loom_rkey_ptr(rkey_, region_ + 100, &ptr));
        if (mapped) {
            void* base = nullptr;
            ASSERT_EQ(LOOM_OK, loom_rkey_ptr(rkey_, region_, &base));
            EXPECT_EQ(static_cast<std::uint8_t*>(base) + 100, ptr);
            auto data = pattern(4096, 77);
            std::memcpy(base, data.data(), data.size());  // plain stores into the peer's memory
            std::uint64_t verify[2] = {77, data.size()}, verdict = 0;
            loom_status_ptr_t rr = loom_tag_recv_nbx(me.worker, &verdict, 8, kTagVerdict, ~0ull, nullptr);
            ASSERT_EQ(LOOM_OK,
                      me.wait(loom_tag_send_nbx(me.ep, verify, sizeof(verify), kTagVerify, nullptr)));
            ASSERT_EQ(LOOM_OK, me.wait(rr));
            EXPECT_EQ(1u, verdict) << "the target does not see the stores made through loom_rkey_ptr";
        }
        loom_rkey_destroy(rkey_);
        rkey_ = nullptr;
        ASSERT_EQ(LOOM_OK, me.wait(loom_tag_send_nbx(me.ep, nullptr, 0, kTagDone, nullptr)));
        ASSERT_EQ(LOOM_OK, me.wait(loom_ep_flush_nbx(me.ep, nullptr)));
        EXPECT_EQ(0, peer.wait());
    }
}

/** The target dies while gets wait for it: they complete with an error, the handler runs. */
TEST_P(UcpRmaMultiProcTest, PeerKilledWithGetsOutstanding) {
    const char* tls = GetParam();
    // shm's gets of registered memory go through the target (like tcp's) without CMA.
    loom::test::ScopedEnv cma("LOOM_SHM_CMA", std::string("no"));
    ForkedPeer peer([tls](ForkedPeer::Channel& ch) { return target_main(ch, tls, false); });
    Side me;
    start(peer, me);
    ASSERT_NE(nullptr, rkey_);
    std::vector<std::uint8_t> buf(kRegion);
    // One get served, so everything is connected.
    ASSERT_EQ(LOOM_OK, me.wait(loom_get_nbx(me.ep, buf.data(), 4096, region_, rkey_, nullptr)));
    std::uint64_t stop = 0;
    ASSERT_EQ(LOOM_OK, me.wait(loom_tag_send_nbx(me.ep, &stop, sizeof(stop), 99, nullptr)));
    ASSERT_TRUE(peer.channel().recv_text()) << "the target did not stop";
    std::vector<loom_status_ptr_t> gets;
    for (int i = 0; i < 4; ++i) {
        loom_status_ptr_t r = loom_get_nbx(me.ep, buf.data(), kRegion, region_, rkey_, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(r)) << "the target does not progress: the get must wait";
        gets.push_back(r);
    }
    for (int i = 0; i < 1000; ++i) loom_worker_progress(me.worker);
    for (loom_status_ptr_t r : gets) ASSERT_EQ(LOOM_INPROGRESS, loom_request_check_status(r));
    peer.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, peer.wait());
    for (loom_status_ptr_t r : gets) {
        loom_status_t s = me.wait(r, 60);
        EXPECT_NE(LOOM_OK, s);
        EXPECT_NE(LOOM_ERR_TIMED_OUT, s) << "a get hung after its target died";
    }
    EXPECT_EQ(1, me.errors) << "the error handler runs once";
    EXPECT_TRUE(LOOM_PTR_IS_ERR(loom_get_nbx(me.ep, buf.data(), 8, region_, rkey_, nullptr)))
        << "the endpoint stays failed";
    loom_rkey_destroy(rkey_);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpRmaMultiProcTest, testing::Values("shm", "tcp"),
                         [](const testing::TestParamInfo<const char*>& info) {
                             return std::string(info.param);
                         });

/**
 * A remote key holds one entry per memory domain of the owner. The initiator must use
 * the entry of the domain its lane reaches, not the one named like its own device: here
 * the target has rxe0 and rxe1, the initiator only rxe1, and its lane reaches the
 * target's rxe0. Run in the RDMA VM (the family of the device LOOM_NET_DEVICES names,
 * when devices 0 and 1 of it exist); endpoint to endpoint too under LOOM_IB_CM=verbs.
 */
class UcpRmaDevicesTest : public testing::TestWithParam<std::string> {};

TEST_P(UcpRmaDevicesTest, KeyEntryFollowsTheDeviceTheLaneReaches) {
    const std::string family = GetParam();
    const char* cm = std::getenv("LOOM_IB_CM");
    const bool ep_to_ep = cm != nullptr && std::string(cm) == "verbs";
    const std::string extra = ep_to_ep ? ",lo" : "";
    struct Side {
        loom_context_h ctx = nullptr;
        loom_worker_h worker = nullptr;
        Side(const char* tls, const std::string& devices) {
            loom::test::ScopedEnv t("LOOM_TLS", tls), d("LOOM_NET_DEVICES", devices);
            loom_params_t params{};
            params.field_mask = LOOM_PARAM_FIELD_FEATURES;
            params.features = LOOM_FEATURE_RMA;
            EXPECT_EQ(LOOM_OK, loom_init(&params, &ctx));
            if (ctx != nullptr) {
                EXPECT_EQ(LOOM_OK, loom_worker_create(ctx, nullptr, &worker));
            }
        }
        ~Side() {
            if (worker != nullptr) loom_worker_destroy(worker);
            if (ctx != nullptr) loom_cleanup(ctx);
        }
    };
    const char* tls = ep_to_ep ? "rc,tcp:aux" : "rc";
    Side target(tls, family + "0:1," + family + "1:1" + extra);
    Side initiator(tls, family + "1:1" + extra);
    ASSERT_NE(nullptr, target.worker);
    ASSERT_NE(nullptr, initiator.worker);
    void* addr;
    size_t addr_len;
    ASSERT_EQ(LOOM_OK, loom_worker_get_address(target.worker, &addr, &addr_len));
    loom_ep_params_t ep_params{};
    ep_params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = addr;
    loom_ep_h ep = nullptr;
    ASSERT_EQ(LOOM_OK, loom_ep_create(initiator.worker, &ep_params, &ep));
    loom_worker_release_address(target.worker, addr);
    std::vector<std::uint8_t> region(1 << 16, 0);
    loom_mem_map_params_t mp{};
    mp.field_mask = LOOM_MEM_MAP_PARAM_FIELD_ADDRESS | LOOM_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = region.data();
    mp.length = region.size();
    loom_mem_h memh = nullptr;
    ASSERT_EQ(LOOM_OK, loom_mem_map(target.ctx, &mp, &memh));
    void* key_buf;
    size_t key_len;
    ASSERT_EQ(LOOM_OK, loom_rkey_pack(target.ctx, memh, &key_buf, &key_len));
    loom_rkey_h rkey = nullptr;
    ASSERT_EQ(LOOM_OK, loom_ep_rkey_unpack(ep, key_buf, key_len, &rkey));
    loom_rkey_buffer_release(key_buf);
    auto wait = [&](loom_status_ptr_t r) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        loom_status_t s;
        while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS && std::chrono::steady_clock::now() < deadline) {
            loom_worker_progress(initiator.worker);
            loom_worker_progress(target.worker);
        }
        loom_request_free(r);
        return s;
    };
    auto data = pattern(4000, 9);
    const auto base = reinterpret_cast<std::uint64_t>(region.data());
    ASSERT_EQ(LOOM_OK, wait(loom_put_nbx(ep, data.data(), data.size(), base + 100, rkey, nullptr)));
    ASSERT_EQ(LOOM_OK, wait(loom_ep_flush_nbx(ep, nullptr)));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), region.begin() + 100)) << "the put did not land";
    std::vector<std::uint8_t> back(data.size());
    ASSERT_EQ(LOOM_OK, wait(loom_get_nbx(ep, back.data(), back.size(), base + 100, rkey, nullptr)));
    EXPECT_EQ(data, back);
    loom_rkey_destroy(rkey);
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    (void)loom_ep_close_nbx(ep, &p);
    EXPECT_EQ(LOOM_OK, loom_mem_unmap(target.ctx, memh));
}

/** The device family of LOOM_NET_DEVICES ("rxe0:1" gives "rxe") when it has devices 0 and 1, in the RDMA VM. */
std::vector<std::string> device_families() {
    const char* devices = std::getenv("LOOM_NET_DEVICES");
    if (std::getenv("LOOMTEST_UCP_VERBS") == nullptr || devices == nullptr) return {};
    std::string d(devices);
    std::string family = d.substr(0, d.find_first_of("0123456789:,"));
    for (const char* n : {"0", "1"}) {
        if (access(("/sys/class/infiniband/" + family + n).c_str(), F_OK) != 0) return {};
    }
    return {family};
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(UcpRmaDevicesTest);
INSTANTIATE_TEST_SUITE_P(Verbs, UcpRmaDevicesTest, testing::ValuesIn(device_families()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
