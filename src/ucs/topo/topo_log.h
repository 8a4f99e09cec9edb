/**
 * The "topo" log component shared by the topology sources (not installed).
 * Sources define LOOM_LOG_COMPONENT as (::loom::ucs::topo_log()) before including
 * ucs/debug/log.h.
 */
#pragma once

#include "ucs/debug/log.h"

namespace loom::ucs {

/** The "topo" component; created on first use so static initialisers may log. */
log::Component& topo_log();

}  // namespace loom::ucs
