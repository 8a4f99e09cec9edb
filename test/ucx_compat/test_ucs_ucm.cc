/**
 * libucs and libucm: ucs_status_string for every UCX status, and the memory-event calls
 * Open MPI's common ucx code makes (ucm_set_external_event, ucm_test_events,
 * ucm_vm_munmap from its own munmap hooks, possibly inside free()).
 */
#include "ucx_compat_test.h"

#include <loom/ucp.h>

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <string>
#include <thread>

namespace ucx_compat {
namespace {

/** Every status UCX 1.13 names. */
const ucs_status_t kNamed[] = {
    UCS_OK,
    UCS_INPROGRESS,
    UCS_ERR_NO_MESSAGE,
    UCS_ERR_NO_RESOURCE,
    UCS_ERR_IO_ERROR,
    UCS_ERR_NO_MEMORY,
    UCS_ERR_INVALID_PARAM,
    UCS_ERR_UNREACHABLE,
    UCS_ERR_INVALID_ADDR,
    UCS_ERR_NOT_IMPLEMENTED,
    UCS_ERR_MESSAGE_TRUNCATED,
    UCS_ERR_NO_PROGRESS,
    UCS_ERR_BUFFER_TOO_SMALL,
    UCS_ERR_NO_ELEM,
    UCS_ERR_SOME_CONNECTS_FAILED,
    UCS_ERR_NO_DEVICE,
    UCS_ERR_BUSY,
    UCS_ERR_CANCELED,
    UCS_ERR_SHMEM_SEGMENT,
    UCS_ERR_ALREADY_EXISTS,
    UCS_ERR_OUT_OF_RANGE,
    UCS_ERR_TIMED_OUT,
    UCS_ERR_EXCEEDS_LIMIT,
    UCS_ERR_UNSUPPORTED,
    UCS_ERR_REJECTED,
    UCS_ERR_NOT_CONNECTED,
    UCS_ERR_CONNECTION_RESET,
    UCS_ERR_ENDPOINT_TIMEOUT,
};

TEST(UcsStatusString, EveryNamedStatusHasItsOwnText) {
    std::map<std::string, ucs_status_t> seen;
    for (ucs_status_t s : kNamed) {
        const char* text = ucs_status_string(s);
        ASSERT_NE(nullptr, text) << s;
        EXPECT_GT(std::strlen(text), 0u) << s;
        EXPECT_EQ(nullptr, std::strstr(text, "nknown")) << s << ": " << text;
        auto [it, fresh] = seen.emplace(text, s);
        EXPECT_TRUE(fresh) << "statuses " << it->second << " and " << s << " share the text \"" << text
                           << "\"";
    }
    EXPECT_STREQ("Success", ucs_status_string(UCS_OK));
}

TEST(UcsStatusString, FailureRangesAndUnknownCodes) {
    // Link and endpoint failure ranges: each code is a failure, never "unknown".
    for (int s = UCS_ERR_FIRST_LINK_FAILURE; s >= UCS_ERR_LAST_ENDPOINT_FAILURE; --s) {
        const char* text = ucs_status_string(static_cast<ucs_status_t>(s));
        ASSERT_NE(nullptr, text);
        EXPECT_GT(std::strlen(text), 0u) << s;
        EXPECT_EQ(nullptr, std::strstr(text, "nknown")) << s << ": " << text;
    }
    // Out of range or unassigned (ucs_status_t is one byte in UCX: -128 .. 127): an
    // "Unknown error" text naming the number.
    static_assert(sizeof(ucs_status_t) == 1);
    for (int s : {2, 100, 127, -26, -39, -90, -99, -100, -101, -128}) {
        const std::string text = ucs_status_string(static_cast<ucs_status_t>(s));
        EXPECT_NE(std::string::npos, text.find("nknown")) << s << ": " << text;
        EXPECT_NE(std::string::npos, text.find(std::to_string(s))) << s << ": " << text;
    }
    // The unknown texts of two threads do not overwrite each other.
    std::string other;
    std::thread t([&other] { other = ucs_status_string(static_cast<ucs_status_t>(-95)); });
    const std::string mine = ucs_status_string(static_cast<ucs_status_t>(-96));
    t.join();
    EXPECT_NE(std::string::npos, other.find("-95"));
    EXPECT_NE(std::string::npos, mine.find("-96"));
}

// --- ucm ------------------------------------------------------------------------------------

/** This binary links the layer at start-up, so Loom's munmap hooks are in the global scope. */
TEST(Ucm, TestEventsSaysWhetherLoomSeesUnmapsItself) {
    // Loom sees unmaps by itself only when libloom-ucs's hooks come before libc in the
    // symbol search order (a program linking it directly, or LD_PRELOAD); linked through
    // the layer, as here and in Open MPI's plugins, they do not, and the honest answer is
    // UCS_ERR_UNSUPPORTED (Open MPI then reports unmaps itself: ucm_vm_munmap).
    const ucs_status_t expected = loom_mem_events_check() == LOOM_OK ? UCS_OK : UCS_ERR_UNSUPPORTED;
    EXPECT_EQ(expected, ucm_test_events(UCM_EVENT_VM_UNMAPPED));
    EXPECT_EQ(expected, ucm_test_events(UCM_EVENT_MUNMAP | UCM_EVENT_VM_UNMAPPED));
    EXPECT_EQ(UCS_OK, ucm_test_events(0));
    EXPECT_EQ(UCS_OK, ucm_test_events(UCM_EVENT_VM_MAPPED));  // nothing to check for mappings
}

TEST(Ucm, ReportedUnmapsFeedLoomsCachesWhenTheUserSaidNothing) {
    // Open MPI declares the unmaps it will report (ucm_set_external_event) before ucp_init:
    // Loom's registration caches then take their events from those reports.
    const char* before = std::getenv("LOOM_MEM_EVENTS");
    const std::string saved = before ? before : "";
    unsetenv("LOOM_MEM_EVENTS");
    ucm_unset_external_event(UCM_EVENT_VM_UNMAPPED);
    { Context ctx("shm,self"); ASSERT_EQ(UCS_OK, ctx.status()); }
    EXPECT_EQ(nullptr, std::getenv("LOOM_MEM_EVENTS")) << "nothing declared: nothing changes";
    ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
    { Context ctx("shm,self"); ASSERT_EQ(UCS_OK, ctx.status()); }
    ASSERT_NE(nullptr, std::getenv("LOOM_MEM_EVENTS"));
    EXPECT_STREQ("user", std::getenv("LOOM_MEM_EVENTS"));
    // A value the user set wins.
    setenv("LOOM_MEM_EVENTS", "none", 1);
    { Context ctx("shm,self"); ASSERT_EQ(UCS_OK, ctx.status()); }
    EXPECT_STREQ("none", std::getenv("LOOM_MEM_EVENTS"));
    ucm_unset_external_event(UCM_EVENT_VM_UNMAPPED);
    if (before) {
        setenv("LOOM_MEM_EVENTS", saved.c_str(), 1);
    } else {
        unsetenv("LOOM_MEM_EVENTS");
    }
}

TEST(Ucm, ExternalEventsAsDeclared) {
    ucm_unset_external_event(UCM_EVENT_VM_UNMAPPED | UCM_EVENT_MUNMAP);
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, ucm_test_external_events(UCM_EVENT_VM_UNMAPPED));
    ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
    EXPECT_EQ(UCS_OK, ucm_test_external_events(UCM_EVENT_VM_UNMAPPED));
    // All of the events asked for must be external.
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, ucm_test_external_events(UCM_EVENT_VM_UNMAPPED | UCM_EVENT_MUNMAP));
    ucm_set_external_event(UCM_EVENT_MUNMAP);
    EXPECT_EQ(UCS_OK, ucm_test_external_events(UCM_EVENT_VM_UNMAPPED | UCM_EVENT_MUNMAP));
    ucm_unset_external_event(UCM_EVENT_VM_UNMAPPED);
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, ucm_test_external_events(UCM_EVENT_VM_UNMAPPED));
    EXPECT_EQ(UCS_OK, ucm_test_external_events(UCM_EVENT_MUNMAP));
    ucm_unset_external_event(UCM_EVENT_MUNMAP);
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, ucm_test_external_events(UCM_EVENT_MUNMAP));
}

/**
 * Open MPI calls ucm_vm_munmap from its own memory hooks, which run inside free() and
 * munmap(): it must neither allocate nor block, from any thread. A loop of calls on
 * registered memory (which the registration caches then drop) and on random ranges, from
 * this thread and another, with a context alive whose registrations they invalidate.
 */
TEST(Ucm, VmMunmapFromAnyThreadAnyRange) {
    Context ctx("shm,self");
    ASSERT_EQ(UCS_OK, ctx.status());
    ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
    std::vector<char> buf(1 << 20);
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = buf.data();
    mp.length = buf.size();
    ucp_mem_h memh = nullptr;
    ASSERT_EQ(UCS_OK, ucp_mem_map(ctx.get(), &mp, &memh));
    std::thread other([&buf] {
        for (int i = 0; i < 20000; ++i) ucm_vm_munmap(buf.data() + (i % 256) * 4096, 4096);
    });
    for (int i = 0; i < 20000; ++i) {
        ucm_vm_munmap(buf.data() + (i % 128) * 8192, 8192);
        ucm_vm_munmap(reinterpret_cast<void*>(static_cast<std::uintptr_t>(i) << 12), 1);
    }
    ucm_vm_munmap(nullptr, 0);
    other.join();
    // As Open MPI does around a real munmap: report, then unmap.
    void* m = ::mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, m);
    ucm_vm_munmap(m, 1 << 16);
    ASSERT_EQ(0, ::munmap(m, 1 << 16));
    EXPECT_EQ(UCS_OK, ucp_mem_unmap(ctx.get(), memh));
    ucm_unset_external_event(UCM_EVENT_VM_UNMAPPED);
}

}  // namespace
}  // namespace ucx_compat
