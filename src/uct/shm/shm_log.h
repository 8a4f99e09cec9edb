/**
 * The "shm" log component, shared by the files of the shm transport
 * (LOOM_LOG_LEVEL=info,shm=debug). Include this first, instead of ucs/debug/log.h, so
 * that inline code of the headers included after it logs to the component too.
 */
#pragma once

#include "ucs/debug/log.h"

namespace loom::uct::shm {

/**
 * The "shm" log component (shm_common.cc); created on first use, so static
 * initialisers may log, and never destroyed, so exit paths may too.
 */
log::Component& shm_log();

}  // namespace loom::uct::shm

#undef LOOM_LOG_COMPONENT
#define LOOM_LOG_COMPONENT (::loom::uct::shm::shm_log())
