/**
 * Fuzz target: remote keys, forged, and the accesses made with them. A region is mapped
 * (loom_mem_map) between two canary pages and two inaccessible guard pages; its genuine
 * packed key is the starting point. Each input says which side, which operation (put,
 * get, a fetching add), where (an offset from the region's start, inside or far outside
 * it), how many bytes, and how to forge the key (bytes XORed into the genuine key, and its
 * length cut or grown), so most inputs are near-genuine keys: the shape that reaches the
 * checks. Whatever unpacks is used: nothing outside the region may be touched (a guard
 * page faults, a canary changed aborts).
 *
 * The sides: self, shm and tcp within this process (the region is ours; tcp's target side
 * checks each access against its key table), and shm to a child process that owns the
 * region, once with CMA (the kernel copies; Loom checks the child's published registrations
 * first) and once with CMA off (the child's progress checks and copies). The child's
 * canaries are read back with process_vm_readv after every input.
 */
#include "fuzz_common.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

/** Guard, canary, region (2 pages), canary, guard: mapped in the process that owns the region. */
struct Area {
    std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::uint8_t* base = nullptr;

    Area() {
        void* p = ::mmap(nullptr, 6 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) std::abort();
        base = static_cast<std::uint8_t*>(p);
        ::mprotect(base, page, PROT_NONE);
        ::mprotect(base + 5 * page, page, PROT_NONE);
        std::memset(base + page, 0xc5, page);
        std::memset(base + 4 * page, 0xc5, page);
    }
    ~Area() { ::munmap(base, 6 * page); }
    Area(const Area&) = delete;
    Area& operator=(const Area&) = delete;

    std::uint8_t* region() const { return base + 2 * page; }
};

/** Maps the region of @p area in @p stack's context and packs its key; aborts on failure. */
std::vector<std::uint8_t> map_and_pack(const loom::fuzz::Stack& stack, const Area& area, loom_mem_h* memh) {
    loom_mem_map_params_t mp{};
    mp.field_mask = LOOM_MEM_MAP_PARAM_FIELD_ADDRESS | LOOM_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = area.region();
    mp.length = 2 * area.page;
    void* packed;
    size_t length;
    if (loom_mem_map(stack.ctx, &mp, memh) != LOOM_OK ||
        loom_rkey_pack(stack.ctx, *memh, &packed, &length) != LOOM_OK) {
        std::abort();
    }
    std::vector<std::uint8_t> key(static_cast<std::uint8_t*>(packed),
                                  static_cast<std::uint8_t*>(packed) + length);
    loom_rkey_buffer_release(packed);
    return key;
}

/** Whether both canary pages (@p low, @p high) are intact; reports which one is not. */
bool canaries_intact(const std::uint8_t* low, const std::uint8_t* high, std::size_t page) {
    for (std::size_t i = 0; i < page; ++i) {
        if (low[i] != 0xc5 || high[i] != 0xc5) {
            std::fprintf(stderr, "fuzz_rkey: a forged key wrote outside its region (%s)\n",
                         low[i] != 0xc5 ? "below" : "above");
            return false;
        }
    }
    return true;
}

void write_blob(int fd, const void* data, std::uint32_t length) {
    if (::write(fd, &length, sizeof(length)) != sizeof(length) ||
        ::write(fd, data, length) != static_cast<ssize_t>(length)) {
        std::_Exit(3);
    }
}

std::vector<std::uint8_t> read_blob(int fd) {
    std::uint32_t length = 0;
    std::vector<std::uint8_t> data;
    if (::read(fd, &length, sizeof(length)) == sizeof(length)) {
        data.resize(length);
        std::size_t got = 0;
        while (got < length) {
            ssize_t n = ::read(fd, data.data() + got, length - got);
            if (n <= 0) break;
            got += static_cast<std::size_t>(n);
        }
        if (got == length) return data;
    }
    std::fprintf(stderr, "fuzz_rkey: the child owning the region did not start\n");
    std::abort();
}

/**
 * The child: owns a region, hands its worker address, key and region address to the
 * parent, then serves (progress, sleeping on the worker's event fd) until the parent's end
 * of @p from_parent closes.
 */
[[noreturn]] void serve_region(int to_parent, int from_parent) {
    loom::fuzz::Stack stack("shm", LOOM_FEATURE_RMA | LOOM_FEATURE_AMO64 | LOOM_FEATURE_WAKEUP);
    Area area;
    loom_mem_h memh;
    auto key = map_and_pack(stack, area, &memh);
    void* address;
    size_t address_length;
    int efd;
    if (loom_worker_get_address(stack.worker, &address, &address_length) != LOOM_OK ||
        loom_worker_get_efd(stack.worker, &efd) != LOOM_OK) {
        std::_Exit(2);
    }
    write_blob(to_parent, address, static_cast<std::uint32_t>(address_length));
    write_blob(to_parent, key.data(), static_cast<std::uint32_t>(key.size()));
    const std::uint64_t where = reinterpret_cast<std::uint64_t>(area.base);
    write_blob(to_parent, &where, sizeof(where));
    for (;;) {
        while (loom_worker_progress(stack.worker) != 0) {
        }
        if (loom_worker_arm(stack.worker) == LOOM_ERR_BUSY) continue;
        pollfd fds[2] = {{efd, POLLIN, 0}, {from_parent, POLLIN, 0}};
        if (::poll(fds, 2, -1) > 0 && (fds[1].revents & (POLLIN | POLLHUP)) != 0) break;
    }
    std::_Exit(0);  // the parent is gone: nothing to clean up for anyone
}

/** A child process owning a region; started before anything else of Loom in this process. */
struct Child {
    pid_t pid = 0;
    int to_child = -1;
    std::vector<std::uint8_t> worker_address, key;
    std::uint64_t area = 0;  ///< the child's Area::base

    void start() {
        int up[2], down[2];
        if (::pipe(up) != 0 || ::pipe(down) != 0) std::abort();
        pid = ::fork();
        if (pid < 0) std::abort();
        if (pid == 0) {
            ::close(up[0]);
            ::close(down[1]);
            serve_region(up[1], down[0]);
        }
        ::close(up[1]);
        ::close(down[0]);
        to_child = down[1];
        worker_address = read_blob(up[0]);
        key = read_blob(up[0]);
        auto where = read_blob(up[0]);
        ::close(up[0]);
        if (where.size() != sizeof(area)) std::abort();
        std::memcpy(&area, where.data(), sizeof(area));
    }

    /** Aborts when the child died (a crash there is a finding too). */
    void check_alive() const {
        int status;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
            std::fprintf(stderr, "fuzz_rkey: the child owning the region died (status %#x)\n", status);
            std::abort();
        }
    }

    void stop() {
        if (pid <= 0) return;
        ::close(to_child);
        int status;
        ::waitpid(pid, &status, 0);
        pid = 0;
    }
};

Child g_child;

/** Sets LOOM_SHM_CMA for the next context; returns the transport name. */
const char* shm_with_cma(const char* cma) {
    setenv("LOOM_SHM_CMA", cma, 1);
    return "shm";
}

/** An endpoint over one transport to the owner of a region, and what checks around it. */
struct Side {
    loom::fuzz::Stack stack;
    loom_ep_h ep = nullptr;
    std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::unique_ptr<Area> local;  ///< the region is ours; else the child's
    loom_mem_h memh = nullptr;
    std::vector<std::uint8_t> key;
    std::uint64_t area = 0;  ///< the Area's base, in its owner

    /** The region in this process, reached over @p tls by an endpoint to our own worker. */
    explicit Side(const char* tls)
        : stack(tls, LOOM_FEATURE_RMA | LOOM_FEATURE_AMO64),
          ep(stack.self_ep()),
          local(std::make_unique<Area>()) {
        key = map_and_pack(stack, *local, &memh);
        area = reinterpret_cast<std::uint64_t>(local->base);
    }

    /** The child's region, over shm with LOOM_SHM_CMA=@p cma. */
    Side(const Child& child, const char* cma)
        : stack(shm_with_cma(cma), LOOM_FEATURE_RMA | LOOM_FEATURE_AMO64) {
        loom_ep_params_t p{};
        p.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
        p.address = child.worker_address.data();
        if (loom_ep_create(stack.worker, &p, &ep) != LOOM_OK) std::abort();
        key = child.key;
        area = child.area;
    }

    ~Side() {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
        wait(loom_ep_close_nbx(ep, &p));
        if (memh != nullptr) (void)loom_mem_unmap(stack.ctx, memh);
    }

    std::uint64_t region() const { return area + 2 * page; }

    /** Aborts when a byte around the region changed (read from the child when it owns it). */
    void check_canaries() const {
        if (local != nullptr) {
            if (!canaries_intact(local->base + page, local->base + 4 * page, page)) std::abort();
            return;
        }
        g_child.check_alive();
        std::vector<std::uint8_t> low(page), high(page);
        iovec mine[2] = {{low.data(), page}, {high.data(), page}};
        iovec theirs[2] = {{reinterpret_cast<void*>(area + page), page},
                           {reinterpret_cast<void*>(area + 4 * page), page}};
        if (::process_vm_readv(g_child.pid, mine, 2, theirs, 2, 0) != static_cast<ssize_t>(2 * page)) {
            std::perror("fuzz_rkey: reading the child's canaries");
            std::abort();
        }
        if (!canaries_intact(low.data(), high.data(), page)) std::abort();
    }

    /** Waits for @p r (bounded: an emulated transfer needs the owner's progress). */
    void wait(void* r) const {
        if (!LOOM_PTR_IS_PTR(r)) return;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (loom_request_check_status(r) == LOOM_INPROGRESS &&
               std::chrono::steady_clock::now() < deadline) {
            loom_worker_progress(stack.worker);
        }
        if (loom_request_check_status(r) == LOOM_INPROGRESS) {
            std::fprintf(stderr, "fuzz_rkey: an access never completed\n");
            std::abort();
        }
        loom_request_free(r);
    }
};

std::unique_ptr<Side> g_sides[5];

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    g_child.start();  // first: the child must not inherit any of our Loom state
    g_sides[0] = std::make_unique<Side>("self");
    g_sides[1] = std::make_unique<Side>("shm");
    g_sides[2] = std::make_unique<Side>(g_child, "yes");
    g_sides[3] = std::make_unique<Side>(g_child, "no");
    g_sides[4] = std::make_unique<Side>("tcp");
    // Registered after the leak checker's own exit handler, so it runs before it.
    std::atexit([] {
        for (auto& side : g_sides) side.reset();
        g_child.stop();
    });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto how = loom::fuzz::take<std::uint8_t>(data, size);
    // Bits 0, 6 and 7 pick the side: self, shm here, shm to the child by CMA, emulated, tcp.
    Side& side = *g_sides[((how & 1) | ((how >> 6) << 1)) % 5];
    const unsigned op = ((how & 0x3f) >> 1) % 3;
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
    const std::uint64_t address = side.region() + static_cast<std::uint64_t>(offset);
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
