/**
 * A module for the configuration tests: dlopen'ed by test_config_registry.cc to show
 * that a module's table registers when it is loaded and unregisters when it is unloaded.
 */
#include "ucs/config/registry.h"

#include <cstddef>

namespace {

namespace config = loom::ucs::config;

struct ModuleConfig {
    std::size_t chunk = 0;
};

const config::RegisteredTable<ModuleConfig> g_module_table{
    "CFGMOD_",
    "Config test module",
    "Registered by a dlopen'ed module.",
    {config::field("CHUNK", "8k", "A size.", &ModuleConfig::chunk, config::SizeParser())}};

}  // namespace
