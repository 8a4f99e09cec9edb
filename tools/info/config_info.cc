#include "info.h"

#include <cstdio>

namespace loom::info {

int print_config(bool /*with_docs*/) {
    std::fprintf(stderr, "loom_info: -c is not implemented yet\n");
    return 1;
}

}  // namespace loom::info
