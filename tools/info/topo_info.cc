#include "info.h"

#include <cstdio>

namespace loom::info {

int print_topology() {
    std::fprintf(stderr, "loom_info: -T is not implemented yet\n");
    return 1;
}

}  // namespace loom::info
