/**
 * The "self" log component, shared by the files of the self transport
 * (LOOM_LOG_LEVEL=info,self=debug). Include this instead of ucs/debug/log.h; the
 * component is defined in self_md.cc.
 */
#pragma once

#include "ucs/debug/log.h"

namespace loom::uct::self {

/** Log component of the self transport. */
extern log::Component g_log;

}  // namespace loom::uct::self

#undef LOOM_LOG_COMPONENT
#define LOOM_LOG_COMPONENT ::loom::uct::self::g_log
