#include "ucs/memory/memory_log.h"

namespace loom::ucs {

log::Component& memory_log() noexcept {
    // Built on first use: pools may be created from other static initializers.
    static log::Component component("memory");
    return component;
}

}  // namespace loom::ucs
