/**
 * The "memory" log component, shared by the memory area's source files (not installed).
 * A file of the area includes this header before ucs/debug/log.h.
 */
#pragma once

#include "ucs/debug/log.h"

namespace loom::ucs {

/** Log component of the memory services (pools, pages, NUMA). */
log::Component& memory_log() noexcept;

}  // namespace loom::ucs

#undef LOOM_LOG_COMPONENT
#define LOOM_LOG_COMPONENT (::loom::ucs::memory_log())
