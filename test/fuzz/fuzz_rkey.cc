/**
 * Fuzz target: remote keys, forged, and the accesses made with them. A region of this
 * process is mapped (loom_mem_map) between two canary pages and two inaccessible guard
 * pages; its genuine packed key is the starting point. Each input says which transport
 * (self or shm: the software RMA paths of one process), which operation (put, get, a
 * fetching add), where (an offset from the region's start, inside or far outside it), how
 * many bytes, and how to forge the key (bytes XORed into the genuine key, and its length
 * cut or grown), so most inputs are near-genuine keys: the shape that reaches the checks.
 * Whatever unpacks is used: nothing outside the region may be touched (a guard page faults,
 * a canary changed aborts).
 *
 * shm runs with LOOM_SHM_CMA=no: its software-emulated put and get, checked by the target
 * against its registrations. With CMA the kernel performs the access wherever the key's
 * region says (docs/reliability.md, "Fuzzing": not checked against the target's table).
 */
#include "fuzz_common.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

/** The region, its canaries and guards, and a worker with an endpoint to itself over one transport. */
struct Side {
    loom::fuzz::Stack stack;
    loom_ep_h ep;
    std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::uint8_t* area = nullptr;  ///< guard, canary, region (2 pages), canary, guard
    loom_mem_h memh = nullptr;
    std::vector<std::uint8_t> key;

    explicit Side(const char* tls) : stack(tls, LOOM_FEATURE_RMA | LOOM_FEATURE_AMO64), ep(stack.self_ep()) {
        void* p = ::mmap(nullptr, 6 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) std::abort();
        area = static_cast<std::uint8_t*>(p);
        ::mprotect(area, page, PROT_NONE);
        ::mprotect(area + 5 * page, page, PROT_NONE);
        std::memset(area + page, 0xc5, page);
        std::memset(area + 4 * page, 0xc5, page);
        loom_mem_map_params_t mp{};
        mp.field_mask = LOOM_MEM_MAP_PARAM_FIELD_ADDRESS | LOOM_MEM_MAP_PARAM_FIELD_LENGTH;
        mp.address = region();
        mp.length = 2 * page;
        void* packed;
        size_t length;
        if (loom_mem_map(stack.ctx, &mp, &memh) != LOOM_OK ||
            loom_rkey_pack(stack.ctx, memh, &packed, &length) != LOOM_OK) {
            std::abort();
        }
        key.assign(static_cast<std::uint8_t*>(packed), static_cast<std::uint8_t*>(packed) + length);
        loom_rkey_buffer_release(packed);
    }

    ~Side() {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
        wait(loom_ep_close_nbx(ep, &p));
        (void)loom_mem_unmap(stack.ctx, memh);
        ::munmap(area, 6 * page);
    }

    std::uint8_t* region() const { return area + 2 * page; }

    /** Aborts when a byte around the region changed. */
    void check_canaries() const {
        for (std::size_t i = 0; i < page; ++i) {
            if (area[page + i] != 0xc5 || area[4 * page + i] != 0xc5) {
                std::fprintf(stderr, "fuzz_rkey: a forged key wrote outside its region (%s)\n",
                             area[page + i] != 0xc5 ? "below" : "above");
                std::abort();
            }
        }
    }

    /** Waits for @p r (bounded: an emulated transfer needs the worker's progress). */
    void wait(void* r) const {
        if (!LOOM_PTR_IS_PTR(r)) return;
        for (int i = 0; i < 100000 && loom_request_check_status(r) == LOOM_INPROGRESS; ++i) {
            loom_worker_progress(stack.worker);
        }
        if (loom_request_check_status(r) == LOOM_INPROGRESS) {
            std::fprintf(stderr, "fuzz_rkey: an access never completed\n");
            std::abort();
        }
        loom_request_free(r);
    }
};

std::unique_ptr<Side> g_sides[2];

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    g_sides[0] = std::make_unique<Side>("self");
    setenv("LOOM_SHM_CMA", "no", 1);
    g_sides[1] = std::make_unique<Side>("shm");
    // Registered after the leak checker's own exit handler, so it runs before it.
    std::atexit([] {
        g_sides[0].reset();
        g_sides[1].reset();
    });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto how = loom::fuzz::take<std::uint8_t>(data, size);
    Side& side = *g_sides[how & 1];
    const unsigned op = (how >> 1) % 3;
    const auto offset = loom::fuzz::take<std::int64_t>(data, size);
    const std::size_t length = loom::fuzz::take<std::uint16_t>(data, size) % (3 * side.page);
    const auto key_length_change = loom::fuzz::take<std::int8_t>(data, size);
    // The key: the genuine one, its bytes XORed with the rest of the input, cut or grown.
    std::vector<std::uint8_t> key = side.key;
    for (std::size_t i = 0; i < size && i < key.size(); ++i) key[i] ^= data[i];
    const long new_length = static_cast<long>(key.size()) + key_length_change;
    key.resize(new_length < 0 ? 0 : static_cast<std::size_t>(new_length), 0x5a);
    loom_rkey_h rkey = nullptr;
    if (loom_ep_rkey_unpack(side.ep, key.data(), key.size(), &rkey) != LOOM_OK) return 0;
    const std::uint64_t address =
        reinterpret_cast<std::uint64_t>(side.region()) + static_cast<std::uint64_t>(offset);
    std::vector<std::uint8_t> local(length + 8, 0x3c);
    if (op == 0) {
        side.wait(loom_put_nbx(side.ep, local.data(), length, address, rkey, nullptr));
    } else if (op == 1) {
        side.wait(loom_get_nbx(side.ep, local.data(), length, address, rkey, nullptr));
    } else {
        std::uint64_t one = 1, old = 0;
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE | LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
        p.datatype = loom_dt_make_contig(8);
        p.reply_buffer = &old;
        side.wait(loom_atomic_op_nbx(side.ep, LOOM_ATOMIC_OP_ADD, &one, 1, address, rkey, &p));
    }
    side.wait(loom_ep_flush_nbx(side.ep, nullptr));
    loom_rkey_destroy(rkey);
    side.check_canaries();
    return 0;
}
