/**
 * The C API's context and worker handles, shared by the files of the C API (ucp_api.cc,
 * rma_api.cc): one definition, so the two cannot drift apart.
 */
#pragma once

#include "ucp/core/context.h"
#include "ucp/core/worker.h"

#include <memory>

struct loom_context {
    std::unique_ptr<loom::ucp::Context> impl;
};
struct loom_worker {
    std::unique_ptr<loom::ucp::Worker> impl;
};
