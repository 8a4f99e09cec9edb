/** The "ucp" log component, shared by the files of the protocol layer. */
#pragma once

#include "ucs/debug/log.h"

namespace loom::ucp {

/** Log component of the protocol layer (LOOM_LOG_LEVEL=...,ucp=debug). */
extern log::Component g_log;

}  // namespace loom::ucp

#undef LOOM_LOG_COMPONENT
#define LOOM_LOG_COMPONENT ::loom::ucp::g_log
