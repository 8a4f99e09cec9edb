#include "info.h"

#include "ucs/sys/module.h"

#include <cstdio>
#include <string>

namespace loom::info {

int print_devices() {
    std::vector<std::string> dirs = ucs::default_module_dirs();
    std::string dir_list;
    for (const auto& dir : dirs) dir_list += (dir_list.empty() ? "" : ":") + dir;

    const auto& modules = ucs::load_modules("uct", {dirs, nullptr});
    std::printf("# Transport modules (searched in %s):\n", dir_list.c_str());
    if (modules.empty()) {
        std::printf("#   none found\n");
    }
    for (const auto& module : modules) {
        std::printf("#   %-10s %-8s %s%s%s\n", module.name.c_str(), std::string(ucs::to_string(module.state)).c_str(),
                    module.path.c_str(), module.reason.empty() ? "" : ": ", module.reason.c_str());
    }
    std::printf("#\n# Devices and transports: none built yet (the transport layer is not part of this build)\n");
    return 0;
}

}  // namespace loom::info
