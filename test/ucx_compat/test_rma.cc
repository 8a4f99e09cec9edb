/**
 * Memory mapping, remote keys, puts, gets and atomics through the UCX API, two workers of
 * one context in this process (w[1] accesses w[0]'s memory through ep[1]) over shm,self
 * and tcp. The blocking UCX 1.x forms (ucp_put, ucp_get, ucp_ep_flush, ucp_worker_flush),
 * which progress only the initiator, are exercised between two processes
 * (test_multiproc.cc), where the target progresses on its own.
 */
#include "ucx_compat_test.h"

namespace ucx_compat {
namespace {

class RmaTest : public PairTest {
protected:
    /**
     * Maps @p length bytes of w[0]'s context (allocated, or @p address registered) and unpacks its key on
     * ep[1].
     */
    void map_target(std::size_t length, void* address = nullptr) {
        ucp_mem_map_params_t mp{};
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.length = length;
        if (address != nullptr) {
            mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
            mp.address = address;
        } else {
            mp.flags = UCP_MEM_MAP_ALLOCATE;
        }
        ASSERT_EQ(UCS_OK, ucp_mem_map(p.ctx, &mp, &memh));
        ucp_mem_attr_t ma{};
        ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
        ASSERT_EQ(UCS_OK, ucp_mem_query(memh, &ma));
        target = static_cast<char*>(ma.address);
        ASSERT_NE(nullptr, target);
        ASSERT_GE(ma.length, length);
        if (address != nullptr) {
            EXPECT_EQ(address, ma.address);
        }
        void* packed = nullptr;
        size_t size = 0;
        ASSERT_EQ(UCS_OK, ucp_rkey_pack(p.ctx, memh, &packed, &size));
        ASSERT_EQ(UCS_OK, ucp_ep_rkey_unpack(p.ep[1], packed, &rkey));
        ucp_rkey_buffer_release(packed);
        raddr = reinterpret_cast<std::uint64_t>(target);
    }

    void TearDown() override {
        if (rkey != nullptr) ucp_rkey_destroy(rkey);
        if (memh != nullptr) {
            EXPECT_EQ(UCS_OK, ucp_mem_unmap(p.ctx, memh));
        }
    }

    /** Completes everything ep[1] started, at the target. */
    void flush() { ASSERT_EQ(UCS_OK, p.wait(ucp_ep_flush_nbx(p.ep[1], nullptr))); }

    ucp_mem_h memh = nullptr;
    ucp_rkey_h rkey = nullptr;
    char* target = nullptr;
    std::uint64_t raddr = 0;
};

TEST_P(RmaTest, MemMapQueryAdviseUnmap) {
    // Registered memory.
    std::vector<char> buf(1 << 20);
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_PROT | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = buf.data();
    mp.length = buf.size();
    mp.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE | UCP_MEM_MAP_PROT_REMOTE_READ |
              UCP_MEM_MAP_PROT_REMOTE_WRITE;
    mp.memory_type = UCS_MEMORY_TYPE_HOST;
    ucp_mem_h reg = nullptr;
    ASSERT_EQ(UCS_OK, ucp_mem_map(p.ctx, &mp, &reg));
    ucp_mem_attr_t ma{};
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH | UCP_MEM_ATTR_FIELD_MEM_TYPE;
    ASSERT_EQ(UCS_OK, ucp_mem_query(reg, &ma));
    EXPECT_EQ(buf.data(), ma.address);
    EXPECT_EQ(buf.size(), ma.length);
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, ma.mem_type);
    ucp_mem_advise_params_t ap{};
    ap.field_mask = UCP_MEM_ADVISE_PARAM_FIELD_ADDRESS | UCP_MEM_ADVISE_PARAM_FIELD_LENGTH |
                    UCP_MEM_ADVISE_PARAM_FIELD_ADVICE;
    ap.address = buf.data();
    ap.length = 4096;
    ap.advice = UCP_MADV_WILLNEED;
    EXPECT_EQ(UCS_OK, ucp_mem_advise(p.ctx, reg, &ap));
    ap.advice = UCP_MADV_NORMAL;
    EXPECT_EQ(UCS_OK, ucp_mem_advise(p.ctx, reg, &ap));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_mem_advise(p.ctx, reg, nullptr));
    EXPECT_EQ(UCS_OK, ucp_mem_unmap(p.ctx, reg));
    // Allocated memory: writable, as long as asked, released by unmap.
    mp = ucp_mem_map_params_t{};
    mp.field_mask =
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = nullptr;
    mp.length = 100000;
    mp.flags = UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_NONBLOCK;
    ucp_mem_h alloc = nullptr;
    ASSERT_EQ(UCS_OK, ucp_mem_map(p.ctx, &mp, &alloc));
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    ASSERT_EQ(UCS_OK, ucp_mem_query(alloc, &ma));
    ASSERT_NE(nullptr, ma.address);
    EXPECT_GE(ma.length, 100000u);
    std::memset(ma.address, 0x5a, 100000);
    EXPECT_EQ(UCS_OK, ucp_mem_unmap(p.ctx, alloc));
    // ALLOCATE|FIXED (spml ucx's symmetric heap): exactly at the address, writable; a second
    // one over it is refused with a status and one log line, and nothing is unmapped.
    mp.flags = UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED;
    mp.address = reinterpret_cast<void*>(0x6f0000000000ull);
    mp.length = 3 * 4096 + 100;
    ucp_mem_h fixed = nullptr;
    ASSERT_EQ(UCS_OK, ucp_mem_map(p.ctx, &mp, &fixed));
    ASSERT_EQ(UCS_OK, ucp_mem_query(fixed, &ma));
    EXPECT_EQ(mp.address, ma.address);
    EXPECT_GE(ma.length, mp.length);
    std::memset(mp.address, 0x6b, mp.length);
    ucp_mem_h clash = nullptr;
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_NO_MEMORY, ucp_mem_map(p.ctx, &mp, &clash));
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(1, layer_log_lines(err)) << err;
    EXPECT_EQ(nullptr, clash);
    EXPECT_EQ(0x6b, static_cast<unsigned char*>(mp.address)[mp.length - 1]) << "the first mapping is intact";
    EXPECT_EQ(UCS_OK, ucp_mem_unmap(p.ctx, fixed));
    // FIXED without ALLOCATE places nothing.
    mp.flags = UCP_MEM_MAP_FIXED;
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_mem_map(p.ctx, &mp, &fixed));
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(1, layer_log_lines(err)) << err;
    // Device memory: not supported either.
    mp = ucp_mem_map_params_t{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = buf.data();
    mp.length = 4096;
    mp.memory_type = UCS_MEMORY_TYPE_CUDA;
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, ucp_mem_map(p.ctx, &mp, &fixed));
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(1, layer_log_lines(err)) << err;
    // No length: refused with a status (Loom logs why).
    mp = ucp_mem_map_params_t{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
    mp.address = buf.data();
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_mem_map(p.ctx, &mp, &fixed));
    (void)testing::internal::GetCapturedStderr();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_mem_map(p.ctx, nullptr, &fixed));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_mem_query(nullptr, &ma));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_mem_unmap(p.ctx, nullptr));
}

TEST_P(RmaTest, RkeyPackUnpackPtrDestroy) {
    std::vector<char> buf(65536);
    ASSERT_NO_FATAL_FAILURE(map_target(buf.size(), buf.data()));
    void* packed = nullptr;
    size_t size = 0;
    ASSERT_EQ(UCS_OK, ucp_rkey_pack(p.ctx, memh, &packed, &size));
    EXPECT_GT(size, 8u);
    // A key may be unpacked several times, on several endpoints of the peer.
    ucp_rkey_h again = nullptr;
    ASSERT_EQ(UCS_OK, ucp_ep_rkey_unpack(p.ep[1], packed, &again));
    void* ptr = nullptr;
    // Both workers are in this process: a shm key is of our own memory, which is mapped here.
    const ucs_status_t st = ucp_rkey_ptr(again, raddr, &ptr);
    if (st == UCS_OK) {
        EXPECT_EQ(reinterpret_cast<void*>(raddr), ptr);
    } else {
        EXPECT_EQ(UCS_ERR_UNREACHABLE, st) << "a key of another transport is not mapped here";
    }
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_rkey_ptr(again, raddr + buf.size() + 1, &ptr));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_rkey_ptr(nullptr, raddr, &ptr));
    ucp_rkey_destroy(again);
    ucp_rkey_destroy(nullptr);
    ucp_rkey_buffer_release(packed);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_rkey_pack(p.ctx, memh, nullptr, &size));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_rkey_pack(p.ctx, nullptr, &packed, &size));
}

/**
 * Keys that are not what ucp_rkey_pack made: refused with UCS_ERR_INVALID_PARAM, never read past what they
 * claim.
 */
TEST_P(RmaTest, ForgedOrTruncatedKeysAreRefused) {
    std::vector<char> buf(4096);
    ASSERT_NO_FATAL_FAILURE(map_target(buf.size(), buf.data()));
    void* packed = nullptr;
    size_t size = 0;
    ASSERT_EQ(UCS_OK, ucp_rkey_pack(p.ctx, memh, &packed, &size));
    const std::vector<std::uint8_t> good(static_cast<std::uint8_t*>(packed),
                                         static_cast<std::uint8_t*>(packed) + size);
    ucp_rkey_buffer_release(packed);
    std::uint32_t claimed;  // the layer's header: magic, then the length of Loom's key after it
    std::memcpy(&claimed, good.data() + 4, 4);
    ASSERT_EQ(size - 8, claimed);
    // Every forgery sits in a zeroed 128 KiB buffer, so no read the layer may do leaves it.
    auto attempt = [&](std::vector<std::uint8_t> forged, const char* what) {
        SCOPED_TRACE(what);
        forged.resize(128 * 1024, 0);
        ucp_rkey_h k = nullptr;
        testing::internal::CaptureStderr();
        const ucs_status_t s = ucp_ep_rkey_unpack(p.ep[1], forged.data(), &k);
        const std::string err = testing::internal::GetCapturedStderr();
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, s) << ucs_status_string(s);
        EXPECT_EQ(nullptr, k);
        EXPECT_GE(layer_log_lines(err), 1) << err;
        if (s == UCS_OK) ucp_rkey_destroy(k);
    };
    attempt({}, "all zeros");
    attempt(std::vector<std::uint8_t>(64, 0xff), "all ones");
    {
        auto v = good;
        v[0] ^= 0x01;
        attempt(v, "wrong magic");
    }
    for (std::uint32_t len :
         {0u, 1u, 8u, claimed - 1, claimed / 2, claimed + 1, claimed + 100, 64u * 1024 + 1, ~0u}) {
        auto v = good;
        std::memcpy(v.data() + 4, &len, 4);
        attempt(v, ("length field " + std::to_string(len)).c_str());
    }
    {
        auto v = good;
        v[8] ^= 0x7f;  // Loom's key version
        attempt(v, "foreign version");
    }
    {
        auto v = good;
        v[10] = 0xff;  // access rights bits that do not exist
        attempt(v, "unknown access bits");
    }
    {
        auto v = good;
        v[9] = 200;  // more entries than the key holds
        attempt(v, "entry count");
    }
    // A real key, byte-for-byte, still works after all that.
    ucp_rkey_h k = nullptr;
    ASSERT_EQ(UCS_OK, ucp_ep_rkey_unpack(p.ep[1], good.data(), &k));
    ucp_rkey_destroy(k);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_ep_rkey_unpack(p.ep[1], nullptr, &k));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_ep_rkey_unpack(nullptr, good.data(), &k));
}

const std::size_t kRmaSizes[] = {1, 8, 64, 4000, 65536, 1 << 20};

TEST_P(RmaTest, PutEveryNonBlockingForm) {
    constexpr std::size_t kLen = 1 << 20;
    std::vector<char> buf(kLen, 0);
    ASSERT_NO_FATAL_FAILURE(map_target(kLen, buf.data()));
    unsigned seed = 0;
    for (std::size_t size : kRmaSizes) {
        for (int form = 0; form < 4; ++form) {
            SCOPED_TRACE(testing::Message() << size << " bytes, form " << form);
            auto data = pattern(size, ++seed);
            const std::size_t off = (seed * 13) % (kLen - size + 1);
            Done d;
            switch (form) {
                case 0: {  // _nbx with a callback, then ucp_ep_flush_nbx
                    ucp_request_param_t rp = send_param(&d);
                    ucs_status_ptr_t r = ucp_put_nbx(p.ep[1], data.data(), size, raddr + off, rkey, &rp);
                    EXPECT_EQ(UCS_OK, p.wait(r));
                    if (r != nullptr) {
                        EXPECT_EQ(1, d.calls);
                    }
                    Done fd;
                    ucp_request_param_t fp = send_param(&fd);
                    EXPECT_EQ(UCS_OK, p.wait(ucp_ep_flush_nbx(p.ep[1], &fp)));
                    break;
                }
                case 1: {  // UCX 1.x _nb, then ucp_ep_flush_nb
                    ucs_status_ptr_t r = ucp_put_nb(p.ep[1], data.data(), size, raddr + off, rkey, send_cb);
                    if (UCS_PTR_IS_PTR(r)) take_request(r);
                    EXPECT_EQ(UCS_OK, p.wait(r));
                    ucs_status_ptr_t f = ucp_ep_flush_nb(p.ep[1], 0, send_cb);
                    if (UCS_PTR_IS_PTR(f)) take_request(f);
                    EXPECT_EQ(UCS_OK, p.wait(f));
                    break;
                }
                case 2: {  // _nbi, then ucp_worker_flush_nbx
                    const ucs_status_t s = ucp_put_nbi(p.ep[1], data.data(), size, raddr + off, rkey);
                    EXPECT_TRUE(s == UCS_OK || s == UCS_INPROGRESS) << ucs_status_string(s);
                    ucp_request_param_t fp = send_param(&d);
                    EXPECT_EQ(UCS_OK, p.wait(ucp_worker_flush_nbx(p.w[1], &fp)));
                    break;
                }
                case 3: {  // _nbx from mapped memory (UCP_OP_ATTR_FIELD_MEMH), then ucp_worker_flush_nb
                    ucp_mem_map_params_t mp{};
                    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
                    mp.address = data.data();
                    mp.length = size;
                    ucp_mem_h local = nullptr;
                    ASSERT_EQ(UCS_OK, ucp_mem_map(p.ctx, &mp, &local));
                    ucp_request_param_t rp{};
                    rp.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
                    rp.memh = local;
                    EXPECT_EQ(UCS_OK,
                              p.wait(ucp_put_nbx(p.ep[1], data.data(), size, raddr + off, rkey, &rp)));
                    ucs_status_ptr_t f = ucp_worker_flush_nb(p.w[1], 0, send_cb);
                    if (UCS_PTR_IS_PTR(f)) take_request(f);
                    EXPECT_EQ(UCS_OK, p.wait(f));
                    EXPECT_EQ(UCS_OK, ucp_mem_unmap(p.ctx, local));
                    break;
                }
            }
            EXPECT_EQ(0, std::memcmp(target + off, data.data(), size))
                << "the data is not at the target after the flush";
        }
    }
    // An iov put.
    auto a = pattern(1000, 90), b = pattern(3000, 91);
    ucp_dt_iov_t iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = ucp_dt_make_iov();
    EXPECT_EQ(UCS_OK, p.wait(ucp_put_nbx(p.ep[1], iov, 2, raddr + 10, rkey, &rp)));
    flush();
    EXPECT_EQ(0, std::memcmp(target + 10, a.data(), a.size()));
    EXPECT_EQ(0, std::memcmp(target + 10 + a.size(), b.data(), b.size()));
}

TEST_P(RmaTest, GetEveryNonBlockingForm) {
    constexpr std::size_t kLen = 1 << 20;
    auto src = pattern(kLen, 55);
    ASSERT_NO_FATAL_FAILURE(map_target(kLen, src.data()));
    for (std::size_t size : kRmaSizes) {
        for (int form = 0; form < 3; ++form) {
            SCOPED_TRACE(testing::Message() << size << " bytes, form " << form);
            const std::size_t off = (size * 7 + form) % (kLen - size + 1);
            std::vector<char> out(size + 1, 'g');
            Done d;
            if (form == 0) {
                ucp_request_param_t rp = send_param(&d);
                EXPECT_EQ(UCS_OK, p.wait(ucp_get_nbx(p.ep[1], out.data(), size, raddr + off, rkey, &rp)));
            } else if (form == 1) {
                ucs_status_ptr_t r = ucp_get_nb(p.ep[1], out.data(), size, raddr + off, rkey, send_cb);
                if (UCS_PTR_IS_PTR(r)) take_request(r);
                EXPECT_EQ(UCS_OK, p.wait(r));
            } else {
                const ucs_status_t s = ucp_get_nbi(p.ep[1], out.data(), size, raddr + off, rkey);
                EXPECT_TRUE(s == UCS_OK || s == UCS_INPROGRESS) << ucs_status_string(s);
                flush();
            }
            EXPECT_EQ(0, std::memcmp(out.data(), src.data() + off, size));
            EXPECT_EQ('g', out[size]) << "written past the get's buffer";
        }
    }
}

/** Put, fence, put to the same place: the later one wins at the target. */
TEST_P(RmaTest, FenceOrdersPuts) {
    std::vector<std::uint64_t> buf(8, 0);
    ASSERT_NO_FATAL_FAILURE(map_target(buf.size() * 8, buf.data()));
    for (std::uint64_t i = 1; i <= 50; ++i) {
        std::uint64_t first = i * 2, second = i * 2 + 1;
        EXPECT_FALSE(UCS_STATUS_IS_ERR(ucp_put_nbi(p.ep[1], &first, 8, raddr, rkey)));
        EXPECT_EQ(UCS_OK, ucp_worker_fence(p.w[1]));
        EXPECT_FALSE(UCS_STATUS_IS_ERR(ucp_put_nbi(p.ep[1], &second, 8, raddr, rkey)));
        flush();
        EXPECT_EQ(second, buf[0]);
    }
}

TEST_P(RmaTest, OutOfRegionAccessFailsCleanly) {
    std::vector<char> buf(4096);
    ASSERT_NO_FATAL_FAILURE(map_target(buf.size(), buf.data()));
    char c[64] = {0};
    testing::internal::CaptureStderr();
    ucs_status_t s1 = p.wait(ucp_put_nbx(p.ep[1], c, 64, raddr + 4096 - 32, rkey, nullptr));
    ucs_status_t s2 = p.wait(ucp_get_nbx(p.ep[1], c, 64, raddr - 64, rkey, nullptr));
    (void)testing::internal::GetCapturedStderr();
    EXPECT_TRUE(UCS_STATUS_IS_ERR(s1)) << ucs_status_string(s1);
    EXPECT_TRUE(UCS_STATUS_IS_ERR(s2)) << ucs_status_string(s2);
}

// --- atomics ------------------------------------------------------------------------------------

/** Atomic targets are allocated by ucp_mem_map (shm atomics need memory peers can map). */
TEST_P(RmaTest, AtomicOpNbx32And64) {
    ASSERT_NO_FATAL_FAILURE(map_target(4096));
    auto* t64 = reinterpret_cast<std::uint64_t*>(target);
    auto* t32 = reinterpret_cast<std::uint32_t*>(target + 64);
    const std::uint64_t a64 = raddr;
    const std::uint64_t a32 = raddr + 64;
    *t64 = 1000;
    *t32 = 1000;
    auto op64 = [&](ucp_atomic_op_t op, std::uint64_t value, std::uint64_t* reply) {
        ucp_request_param_t rp{};
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | (reply ? UCP_OP_ATTR_FIELD_REPLY_BUFFER : 0);
        rp.datatype = ucp_dt_make_contig(8);
        rp.reply_buffer = reply;
        return p.wait(ucp_atomic_op_nbx(p.ep[1], op, &value, 1, a64, rkey, &rp));
    };
    auto op32 = [&](ucp_atomic_op_t op, std::uint32_t value, std::uint32_t* reply) {
        Done d;
        ucp_request_param_t rp =
            send_param(&d, UCP_OP_ATTR_FIELD_DATATYPE | (reply ? UCP_OP_ATTR_FIELD_REPLY_BUFFER : 0));
        rp.datatype = ucp_dt_make_contig(4);
        rp.reply_buffer = reply;
        return p.wait(ucp_atomic_op_nbx(p.ep[1], op, &value, 1, a32, rkey, &rp));
    };
    // Posted (no reply buffer), complete at the target after a flush.
    EXPECT_EQ(UCS_OK, op64(UCP_ATOMIC_OP_ADD, 5, nullptr));
    EXPECT_EQ(UCS_OK, op32(UCP_ATOMIC_OP_ADD, 7, nullptr));
    flush();
    EXPECT_EQ(1005u, *t64);
    EXPECT_EQ(1007u, *t32);
    // Fetching.
    std::uint64_t r64 = 0;
    std::uint32_t r32 = 0;
    EXPECT_EQ(UCS_OK, op64(UCP_ATOMIC_OP_ADD, 10, &r64));
    EXPECT_EQ(1005u, r64);
    EXPECT_EQ(UCS_OK, op32(UCP_ATOMIC_OP_ADD, 10, &r32));
    EXPECT_EQ(1007u, r32);
    EXPECT_EQ(UCS_OK, op64(UCP_ATOMIC_OP_SWAP, 0xF0F0, &r64));
    EXPECT_EQ(1015u, r64);
    EXPECT_EQ(UCS_OK, op32(UCP_ATOMIC_OP_SWAP, 0xF0F0, &r32));
    EXPECT_EQ(1017u, r32);
    EXPECT_EQ(UCS_OK, op64(UCP_ATOMIC_OP_AND, 0xFF00, &r64));
    EXPECT_EQ(0xF0F0u, r64);
    EXPECT_EQ(UCS_OK, op64(UCP_ATOMIC_OP_OR, 0x000F, &r64));
    EXPECT_EQ(0xF000u, r64);
    EXPECT_EQ(UCS_OK, op64(UCP_ATOMIC_OP_XOR, 0xFFFF, &r64));
    EXPECT_EQ(0xF00Fu, r64);
    EXPECT_EQ(0x0FF0u, *t64);
    EXPECT_EQ(UCS_OK, op32(UCP_ATOMIC_OP_XOR, 0x1, &r32));
    EXPECT_EQ(0xF0F1u, *t32);
    // CSWAP (ucp.h's table: X buffer, Z reply buffer, "Result = Y; if (X == Y) Y = Z"): the
    // operand is the value to compare with, the reply buffer holds the value to swap in.
    r64 = 77;
    EXPECT_EQ(UCS_OK, op64(UCP_ATOMIC_OP_CSWAP, 0x0FF0, &r64));
    EXPECT_EQ(0x0FF0u, r64);
    EXPECT_EQ(77u, *t64);
    r64 = 99;
    EXPECT_EQ(UCS_OK, op64(UCP_ATOMIC_OP_CSWAP, 12345, &r64));
    EXPECT_EQ(77u, r64) << "a failed compare returns the current value";
    EXPECT_EQ(77u, *t64) << "and swaps nothing";
    r32 = 5;
    EXPECT_EQ(UCS_OK, op32(UCP_ATOMIC_OP_CSWAP, 0xF0F1, &r32));
    EXPECT_EQ(0xF0F1u, r32);
    EXPECT_EQ(5u, *t32);
    // Bad opcode, size or count.
    testing::internal::CaptureStderr();
    std::uint64_t v = 1;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = ucp_dt_make_contig(8);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              status_of(ucp_atomic_op_nbx(p.ep[1], static_cast<ucp_atomic_op_t>(42), &v, 1, a64, rkey, &rp)));
    rp.datatype = ucp_dt_make_contig(2);
    EXPECT_TRUE(
        UCS_STATUS_IS_ERR(status_of(ucp_atomic_op_nbx(p.ep[1], UCP_ATOMIC_OP_ADD, &v, 1, a64, rkey, &rp))));
    (void)testing::internal::GetCapturedStderr();
}

TEST_P(RmaTest, UcxOneAtomicPostAndFetch) {
    ASSERT_NO_FATAL_FAILURE(map_target(4096));
    auto* t64 = reinterpret_cast<std::uint64_t*>(target);
    auto* t32 = reinterpret_cast<std::uint32_t*>(target + 8);
    *t64 = 100;
    *t32 = 100;
    t32[1] = 0xdeadbeef;  // the neighbour of the 32-bit word must not change
    EXPECT_FALSE(UCS_STATUS_IS_ERR(ucp_atomic_post(p.ep[1], UCP_ATOMIC_POST_OP_ADD, 5, 8, raddr, rkey)));
    EXPECT_FALSE(UCS_STATUS_IS_ERR(ucp_atomic_post(p.ep[1], UCP_ATOMIC_POST_OP_ADD, 6, 4, raddr + 8, rkey)));
    flush();
    EXPECT_EQ(105u, *t64);
    EXPECT_EQ(106u, *t32);
    EXPECT_FALSE(UCS_STATUS_IS_ERR(ucp_atomic_post(p.ep[1], UCP_ATOMIC_POST_OP_AND, 0x0F, 8, raddr, rkey)));
    EXPECT_FALSE(
        UCS_STATUS_IS_ERR(ucp_atomic_post(p.ep[1], UCP_ATOMIC_POST_OP_OR, 0x100, 4, raddr + 8, rkey)));
    flush();
    EXPECT_FALSE(UCS_STATUS_IS_ERR(ucp_atomic_post(p.ep[1], UCP_ATOMIC_POST_OP_XOR, 0xFF, 8, raddr, rkey)));
    flush();
    EXPECT_EQ((105u & 0x0Fu) ^ 0xFFu, *t64);
    EXPECT_EQ(106u | 0x100u, *t32);
    EXPECT_EQ(0xdeadbeefu, t32[1]);
    auto fetch = [&](ucp_atomic_fetch_op_t op, std::uint64_t value, void* result, size_t size,
                     std::uint64_t addr) {
        ucs_status_ptr_t r = ucp_atomic_fetch_nb(p.ep[1], op, value, result, size, addr, rkey, send_cb);
        if (UCS_PTR_IS_PTR(r)) take_request(r);
        return p.wait(r);
    };
    std::uint64_t r64 = 0;
    std::uint32_t r32 = 0;
    *t64 = 50;
    *t32 = 60;
    EXPECT_EQ(UCS_OK, fetch(UCP_ATOMIC_FETCH_OP_FADD, 3, &r64, 8, raddr));
    EXPECT_EQ(50u, r64);
    EXPECT_EQ(UCS_OK, fetch(UCP_ATOMIC_FETCH_OP_FADD, 3, &r32, 4, raddr + 8));
    EXPECT_EQ(60u, r32);
    EXPECT_EQ(UCS_OK, fetch(UCP_ATOMIC_FETCH_OP_SWAP, 9, &r64, 8, raddr));
    EXPECT_EQ(53u, r64);
    EXPECT_EQ(9u, *t64);
    EXPECT_EQ(UCS_OK, fetch(UCP_ATOMIC_FETCH_OP_FAND, 8, &r64, 8, raddr));
    EXPECT_EQ(9u, r64);
    EXPECT_EQ(UCS_OK, fetch(UCP_ATOMIC_FETCH_OP_FOR, 3, &r64, 8, raddr));
    EXPECT_EQ(8u, r64);
    EXPECT_EQ(UCS_OK, fetch(UCP_ATOMIC_FETCH_OP_FXOR, 1, &r64, 8, raddr));
    EXPECT_EQ(11u, r64);
    EXPECT_EQ(10u, *t64);
    // CSWAP (UCX 1.x): value is the value to compare with; result holds the value to swap in
    // on input and the previous value on output (Open MPI's opal_common_ucx_atomic_cswap).
    r64 = 500;
    EXPECT_EQ(UCS_OK, fetch(UCP_ATOMIC_FETCH_OP_CSWAP, 10, &r64, 8, raddr));
    EXPECT_EQ(10u, r64);
    EXPECT_EQ(500u, *t64);
    r64 = 600;
    EXPECT_EQ(UCS_OK, fetch(UCP_ATOMIC_FETCH_OP_CSWAP, 10, &r64, 8, raddr));
    EXPECT_EQ(500u, r64);
    EXPECT_EQ(500u, *t64) << "no swap when the compare fails";
    r32 = 7;
    EXPECT_EQ(UCS_OK, fetch(UCP_ATOMIC_FETCH_OP_CSWAP, 63, &r32, 4, raddr + 8));
    EXPECT_EQ(63u, r32);
    EXPECT_EQ(7u, *t32);
    EXPECT_EQ(0xdeadbeefu, t32[1]);
    // Bad sizes and opcodes: a status and a log line, nothing sent.
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_atomic_post(p.ep[1], UCP_ATOMIC_POST_OP_ADD, 1, 2, raddr, rkey));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              ucp_atomic_post(p.ep[1], static_cast<ucp_atomic_post_op_t>(99), 1, 8, raddr, rkey));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, status_of(ucp_atomic_fetch_nb(p.ep[1], UCP_ATOMIC_FETCH_OP_FADD, 1, &r64,
                                                                   16, raddr, rkey, nullptr)));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              status_of(ucp_atomic_fetch_nb(p.ep[1], static_cast<ucp_atomic_fetch_op_t>(99), 1, &r64, 8,
                                            raddr, rkey, nullptr)));
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(4, layer_log_lines(err)) << err;
    EXPECT_EQ(7u, *t32);
}

INSTANTIATE_TEST_SUITE_P(Tls, RmaTest, testing::ValuesIn(kLocalTls), tls_name);

}  // namespace
}  // namespace ucx_compat
