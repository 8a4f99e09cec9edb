#include "info.h"

#include <cstdio>

namespace loom::info {

int print_devices() {
    std::printf("# Devices and transports: none built yet (the transport layer is not part of this build)\n");
    return 0;
}

}  // namespace loom::info
