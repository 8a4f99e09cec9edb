#include "info.h"

#include "config.h"

#include <spdlog/version.h>

#include <cstdio>

namespace loom::info {

int print_version() {
    std::printf("# Loom version %s\n", PACKAGE_VERSION);
    std::printf("# built with:   g++ %d.%d.%d, C++%ld\n", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__,
                __cplusplus / 100);
#ifdef LOOM_ENABLE_ASSERT
    std::printf("# assertions:   on\n");
#else
    std::printf("# assertions:   off\n");
#endif
    std::printf("# max log level compiled in: %d (0=fatal .. 7=trace_data)\n", LOOM_MAX_LOG_LEVEL);
#ifdef LOOM_SANITIZED
    std::printf("# sanitizers:   on\n");
#endif
#ifdef LOOM_HAVE_VERBS
    std::printf("# rdma-core:    found at build time (verbs transports possible)\n");
#else
    std::printf("# rdma-core:    not found at build time (no verbs transports)\n");
#endif
    std::printf("# spdlog:       %d.%d.%d\n", SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR, SPDLOG_VER_PATCH);
    std::printf("# configured:   %s\n", LOOM_CONFIGURE_ARGS);
    return 0;
}

}  // namespace loom::info
