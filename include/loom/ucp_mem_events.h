/**
 * @file loom/ucp_mem_events.h
 * Memory events: telling the registration caches about memory unmapped behind
 * Loom's back, and asking whether Loom sees unmaps by itself.
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_MEM_EVENTS_H
#define LOOM_UCP_MEM_EVENTS_H

#include <stddef.h>

#include "ucp_def.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Tells Loom that [@p address, @p address + @p length) was unmapped (or is about to be),
 * or had its pages replaced, so that no registration cache hands out a registration of
 * the old pages. Needed only for memory released in ways Loom cannot see (raw system
 * calls, another allocator) or with LOOM_MEM_EVENTS=user; any thread, any time, never
 * blocks, never allocates.
 */
void loom_mem_event_notify(const void* address, size_t length);

/**
 * LOOM_OK when Loom sees this process's munmap() calls by itself (its hooks are in the
 * process's global symbol scope: LOOM_MEM_EVENTS=hooks works), else LOOM_ERR_UNSUPPORTED
 * (then tell it with loom_mem_event_notify). The first call probes, once per process.
 */
loom_status_t loom_mem_events_check(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_MEM_EVENTS_H */
