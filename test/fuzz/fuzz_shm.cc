/**
 * Fuzz target: messages in an shm receive FIFO, as a peer on the host writes them. Each
 * input is one message, written into the FIFO of a real worker's shm iface the way a
 * producer does (reserve a run of cells, write the header and data, publish the seq
 * word), with the header's type (active message, padding, emulated put, get request and
 * reply, atomic request and reply), active-message id and data length taken from the
 * input, and the data after it; then the worker progresses. The run of cells always
 * matches what was reserved: a peer that scribbles on the ring's own bookkeeping can stop
 * it (it holds the same memory), but no message may make the receiver read or write
 * outside the ring, its registrations and its requests.
 */
#include "fuzz_common.h"

#include "ucp/api/handles.h"
#include "ucp/core/worker.h"
#include "uct/shm/shm_ep.h"
#include "uct/shm/shm_fifo.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

namespace shm = loom::uct::shm;

struct Target {
    loom::fuzz::Stack stack{"shm", LOOM_FEATURE_TAG | LOOM_FEATURE_AM | LOOM_FEATURE_STREAM | LOOM_FEATURE_RMA |
                                        LOOM_FEATURE_AMO64};
    loom::uct::Iface* iface = nullptr;
    shm::ShmEp* ep = nullptr;  ///< a uct endpoint of the iface to its own FIFO: the "peer"

    Target() {
        for (const loom::ucp::WorkerIface& wi : stack.worker->impl->ifaces) {
            if (wi.iface->resource().tl_name != "shm") continue;
            iface = wi.iface.get();
            std::vector<std::uint8_t> dev(wi.attr.device_addr_len), addr(wi.attr.iface_addr_len);
            if (iface->get_device_address(dev.data()) != loom::Status::ok ||
                iface->get_address(addr.data()) != loom::Status::ok) {
                break;
            }
            loom::uct::EpParams params;
            params.dev_addr = dev.data();
            params.dev_addr_len = dev.size();
            params.iface_addr = addr.data();
            params.iface_addr_len = addr.size();
            auto created = iface->ep_create(params);
            if (!created) break;
            ep = static_cast<shm::ShmEp*>(*created);
            return;
        }
        std::fprintf(stderr, "fuzz_shm: no shm iface or endpoint\n");
        std::abort();
    }
    ~Target() { iface->ep_destroy(ep); }
};

/**
 * Inputs per worker: messages the protocol keeps (unexpected ones, half-assembled ones)
 * piled up in one worker for the whole campaign, which slowed it to 1,600 inputs a
 * second and grew its memory; a fresh worker every 512 inputs keeps it at its start speed.
 */
constexpr int kInputsPerWorker = 512;

std::unique_ptr<Target> g_target;
int g_inputs = 0;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    g_target = std::make_unique<Target>();
    // Registered after the leak checker's own exit handler, so it runs before it.
    std::atexit([] { g_target.reset(); });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (++g_inputs > kInputsPerWorker) {
        g_inputs = 0;
        g_target.reset();
        g_target = std::make_unique<Target>();
    }
    Target& t = *g_target;
    const auto type = loom::fuzz::take<std::uint8_t>(data, size);
    const auto am_id = loom::fuzz::take<std::uint8_t>(data, size);
    const auto length_delta = loom::fuzz::take<std::int16_t>(data, size);
    shm::FifoCtl* fifo = t.ep->fifo;
    // The cells the data needs, at most a quarter of the ring.
    const std::uint64_t max_cells = (fifo->mask + 1) / 4;
    const std::size_t bytes = std::min<std::size_t>(size, max_cells * shm::kCellSize - sizeof(shm::MsgHeader));
    const std::uint64_t cells = (sizeof(shm::MsgHeader) + bytes + shm::kCellSize - 1) / shm::kCellSize;
    std::uint64_t pos = 0;
    for (int i = 0; !shm::fifo_reserve(fifo, &t.ep->cached_tail, cells, &pos); ++i) {
        if (i > 100000) {  // the consumer stopped moving: a hang
            const std::uint64_t tail = fifo->tail.load(), head = fifo->head.load();
            const shm::Cell* stuck = fifo->cells() + (tail & fifo->mask);
            std::fprintf(stderr,
                         "fuzz_shm: the ring stays full: head %lu tail %lu (%lu cells), message at the tail: seq %s, "
                         "type %u, cells %u, length %u\n",
                         static_cast<unsigned long>(head), static_cast<unsigned long>(tail),
                         static_cast<unsigned long>(fifo->mask + 1),
                         stuck->hdr.seq.load() == shm::seq_of(tail, fifo->salt) ? "published" : "not published",
                         static_cast<unsigned>(stuck->hdr.type), stuck->hdr.cells, stuck->hdr.length);
            std::abort();
        }
        loom_worker_progress(t.stack.worker);
    }
    shm::Cell* cell = fifo->cells() + (pos & fifo->mask);
    cell->hdr.length = static_cast<std::uint32_t>(static_cast<std::int64_t>(bytes) + length_delta);
    cell->hdr.cells = static_cast<std::uint16_t>(cells);
    cell->hdr.type = static_cast<shm::MsgType>(type % 9);
    cell->hdr.am_id = am_id % 40;
    if (bytes != 0) std::memcpy(cell->payload(), data, bytes);
    shm::publish(cell, pos, fifo->salt);
    // Every message published is consumed: a receiver that stops short of the head waits
    // for a header nobody will publish, and the ring is dead.
    for (int i = 0; fifo->tail.load() != fifo->head.load(); ++i) {
        if (i > 1000) {
            std::fprintf(stderr, "fuzz_shm: the receiver stopped at %lu, the ring's head is at %lu\n",
                         static_cast<unsigned long>(fifo->tail.load()), static_cast<unsigned long>(fifo->head.load()));
            std::abort();
        }
        loom_worker_progress(t.stack.worker);
    }
    return 0;
}
