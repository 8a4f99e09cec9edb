/**
 * Loadable modules: transports that depend on optional libraries (rdma-core) are
 * built as shared objects and dlopen'ed at run time, so the core library works on
 * a machine without those libraries and says why a module did not load.
 *
 * A module of framework F named N is the file libloom_F_N.so in a module directory.
 * Loading runs its static constructors (where transports register themselves) and,
 * when present, calls its `extern "C" int loom_module_init(void)` which returns a
 * loom::Status value (0 = ok).
 */
#pragma once

#include "ucs/type/status.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::ucs {

/** What happened to one module file. */
enum class ModuleState : std::uint8_t {
    loaded,    ///< dlopen and init succeeded
    failed,    ///< dlopen or init failed; reason says why
    disabled,  ///< filtered out by the allow-list (LOOM_MODULES)
};

/** One module found on disk, and its fate. */
struct ModuleInfo {
    std::string framework;  ///< e.g. "uct"
    std::string name;       ///< e.g. "ib"
    std::string path;       ///< full path of the .so
    ModuleState state;
    std::string reason;     ///< empty when loaded
};

/** Where to look and what to load. */
struct ModuleLoadParams {
    /** Directories searched in order; the first file found for a name wins. */
    std::vector<std::string> dirs;
    /** Decides by module name whether to load it; null means every module. */
    std::function<bool(std::string_view name)> allowed;
};

/** Name of a module state ("loaded", "failed", "disabled"). */
std::string_view to_string(ModuleState state) noexcept;

/**
 * The default module directories: those in LOOM_MODULE_DIR (colon-separated, read from
 * the environment and config file at the time of the call) when set,
 * else "<directory of libloom-ucs.so>/loom" (so a relocated install finds its modules),
 * then the configured install directory.
 */
std::vector<std::string> default_module_dirs();

/**
 * Loads every module of @p framework found in @p params.dirs, at most once per
 * framework and process (later calls return the first result). Thread-safe.
 * Returns the list of modules with their state; failures are logged at diag level
 * and never fatal.
 */
const std::vector<ModuleInfo>& load_modules(std::string_view framework, const ModuleLoadParams& params);

/** Loads @p framework's modules from default_module_dirs(), filtered by the LOOM_MODULES allow-list. */
const std::vector<ModuleInfo>& load_modules(std::string_view framework);

/** Modules of @p framework loaded so far (empty when load_modules was never called for it). */
std::vector<ModuleInfo> module_report(std::string_view framework);

}  // namespace loom::ucs
