/**
 * Fuzz target: a peer's worker address. The bytes go through the protocol layer's
 * unpacking (Worker::unpack_address: header, version, lengths, every transport entry),
 * and every entry that unpacks is offered to each iface of a real worker over self, shm
 * and tcp (is_reachable: the transports' own device and iface address checks), the path
 * an address takes in loom_ep_create.
 */
#include "fuzz_common.h"

#include "ucp/api/handles.h"
#include "ucp/core/worker.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

loom::fuzz::Stack& stack() {
    static auto* s = new loom::fuzz::Stack("self,shm,tcp", LOOM_FEATURE_TAG);
    return *s;
}

}  // namespace

/**
 * With FUZZ_WRITE_SEED=FILE, writes this worker's real address (self, shm, tcp entries)
 * to FILE: the seed checked in under test/fuzz/corpus/fuzz_address.
 */
extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)stack();
    if (const char* path = std::getenv("FUZZ_WRITE_SEED")) {
        void* addr;
        size_t len;
        if (loom_worker_get_address(stack().worker, &addr, &len) == LOOM_OK) {
            if (std::FILE* f = std::fopen(path, "wb")) {
                std::fwrite(addr, 1, len, f);
                std::fclose(f);
            }
            loom_worker_release_address(stack().worker, addr);
        }
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto address = loom::ucp::Worker::unpack_address(data, size);
    if (!address) return 0;
    loom::ucp::Worker* worker = stack().worker->impl.get();
    for (const loom::ucp::RemoteIface& remote : address->ifaces) {
        for (const loom::ucp::WorkerIface& wi : worker->ifaces) {
            if (wi.iface->resource().tl_name != remote.tl_name) continue;
            std::string reason;
            (void)wi.iface->is_reachable(remote.dev_addr.data(), remote.dev_addr.size(),
                                         remote.iface_addr.data(), remote.iface_addr.size(), &reason);
        }
    }
    return 0;
}
