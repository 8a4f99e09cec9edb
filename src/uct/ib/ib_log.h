/**
 * The "ib" log component, shared by every file of the verbs module
 * (LOOM_LOG_LEVEL=info,ib=debug). Include this instead of ucs/debug/log.h.
 */
#pragma once

#include "ucs/debug/log.h"

namespace loom::uct::ib {

/** Log component of the verbs transports. */
extern log::Component g_log;

}  // namespace loom::uct::ib

#undef LOOM_LOG_COMPONENT
#define LOOM_LOG_COMPONENT ::loom::uct::ib::g_log
