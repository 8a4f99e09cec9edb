// A module that loads: its static log component registers in the core library,
// which proves its constructors ran, and its init function succeeds.
#include "ucs/debug/log.h"

namespace {
loom::log::Component g_component("testmod_good");
int g_init_calls = 0;
}  // namespace

extern "C" int loom_module_init() {
    ++g_init_calls;
    return g_init_calls == 1 ? 0 : static_cast<int>(loom::Status::already_exists);
}
