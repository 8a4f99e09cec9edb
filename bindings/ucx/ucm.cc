/**
 * libucm: the memory-event calls Open MPI's common ucx code makes, wired to Loom's
 * registration caches. With opal_common_ucx_opal_mem_hooks (Open MPI's default) Open MPI
 * watches munmap itself and reports each release with ucm_vm_munmap, after telling us
 * with ucm_set_external_event that it will; otherwise it asks ucm_test_events whether we
 * see unmaps by ourselves. Loom does only when libloom-ucs's hooks come before the C
 * library in the symbol search order (a program linked with it directly, or LD_PRELOAD);
 * reached through this layer, as from Open MPI's plugins, they do not, and
 * ucm_test_events says UCS_ERR_UNSUPPORTED.
 */
#include "compat.h"

#include <atomic>

using namespace loom::ucx;

namespace {
/** Events the application said it reports itself (ucm_set_external_event). */
std::atomic<int> g_external_events{0};
}  // namespace

extern "C" {

void ucm_set_external_event(int events) {
    g_external_events.fetch_or(events, std::memory_order_relaxed);
}

void ucm_unset_external_event(int events) {
    g_external_events.fetch_and(~events, std::memory_order_relaxed);
}

/** UCS_OK when Loom itself sees the releases @p events name (unmaps), else UCS_ERR_UNSUPPORTED. */
ucs_status_t ucm_test_events(int events) {
    constexpr int kUnmapEvents = UCM_EVENT_MUNMAP | UCM_EVENT_VM_UNMAPPED | UCM_EVENT_MREMAP | UCM_EVENT_SHMDT |
                                 UCM_EVENT_SBRK | UCM_EVENT_MADVISE | UCM_EVENT_BRK;
    if ((events & ~kUnmapEvents & ~UCM_EVENT_VM_MAPPED & ~UCM_EVENT_MMAP) != 0) {
        log_debug("ucm_test_events", "events %#x: only memory release events are tracked", events);
    }
    if ((events & kUnmapEvents) == 0) return UCS_OK;
    ucs_status_t s = to_ucs(loom_mem_events_check());
    if (s != UCS_OK) log_debug("ucm_test_events", "Loom's hooks do not see this process's munmap calls");
    return s;
}

/** UCS_OK when @p events were all declared external (their reports then come through ucm_vm_munmap). */
ucs_status_t ucm_test_external_events(int events) {
    return (g_external_events.load(std::memory_order_relaxed) & events) == events ? UCS_OK : UCS_ERR_UNSUPPORTED;
}

/** The application released [@p addr, + @p length): registrations of those pages are dropped. */
void ucm_vm_munmap(void* addr, size_t length) {
    loom_mem_event_notify(addr, length);
}

}  // extern "C"
