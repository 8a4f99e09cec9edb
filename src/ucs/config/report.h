/**
 * Internal to the configuration area: the log component its messages go to, and the
 * once-per-process filter that keeps a repeated configuration problem (every table
 * read sees the same bad file, every loom_info run re-reads the environment) to one
 * log line. A configuration source file logs through the component with
 *
 *   #define LOOM_LOG_COMPONENT (::loom::ucs::config::detail::log_component())
 *
 * before its includes.
 */
#pragma once

#include "ucs/debug/log.h"

#include <string>

namespace loom::ucs::config::detail {

/** The "config" log component (LOOM_LOG_LEVEL=warn,config=debug). */
log::Component& log_component() noexcept;

/** True the first time this process reports @p message; false for every repeat. */
bool first_report(const std::string& message);

/** Forgets every message reported so far, so a test can watch a report again. */
void forget_reports();

}  // namespace loom::ucs::config::detail
