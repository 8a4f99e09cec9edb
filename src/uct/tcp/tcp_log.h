/** The "tcp" log component, shared by the files of the tcp transport. */
#pragma once

#include "ucs/debug/log.h"

namespace loom::uct::tcp {

/** Log component of the tcp transport (LOOM_LOG_LEVEL=...,tcp=debug). */
extern log::Component g_log;

}  // namespace loom::uct::tcp

#undef LOOM_LOG_COMPONENT
#define LOOM_LOG_COMPONENT ::loom::uct::tcp::g_log
