#include "ucs/sys/module.h"

#include "ucs/config/global_options.h"
#include "ucs/debug/log.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

namespace loom::ucs {

namespace {

struct ModuleRegistry {
    std::mutex lock;
    std::map<std::string, std::vector<ModuleInfo>, std::less<>> by_framework;
};

ModuleRegistry& registry() {
    static ModuleRegistry* instance = new ModuleRegistry();  // modules stay loaded until exit
    return *instance;
}

/** Module names of @p framework in @p dir: libloom_<framework>_<name>.so -> name. */
std::vector<std::string> scan_dir(const std::string& dir, std::string_view framework) {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return names;
    std::string prefix = "libloom_" + std::string(framework) + "_";
    const std::string suffix = ".so";
    while (dirent* entry = ::readdir(d)) {
        std::string_view file(entry->d_name);
        if (file.size() > prefix.size() + suffix.size() && file.starts_with(prefix) && file.ends_with(suffix)) {
            names.emplace_back(file.substr(prefix.size(), file.size() - prefix.size() - suffix.size()));
        }
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

ModuleInfo load_one(std::string_view framework, const std::string& name, const std::string& path) {
    ModuleInfo info{std::string(framework), name, path, ModuleState::loaded, {}};
    ::dlerror();
    // RTLD_LOCAL: a module's dependencies (libibverbs) stay private to it.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* error = ::dlerror();
        info.state = ModuleState::failed;
        info.reason = error ? error : "dlopen failed";
        LOOM_LOG_DIAG("module {}/{} not loaded: {}", framework, name, info.reason);
        return info;
    }
    using InitFn = int (*)();
    if (auto init = reinterpret_cast<InitFn>(::dlsym(handle, "loom_module_init"))) {
        int status = init();
        if (status != 0) {
            info.state = ModuleState::failed;
            info.reason = "loom_module_init() returned " + std::string(status_string(status));
            LOOM_LOG_DIAG("module {}/{} not loaded: {}", framework, name, info.reason);
            ::dlclose(handle);
            return info;
        }
    }
    // The handle is kept open for the life of the process: registered objects live in it.
    LOOM_LOG_DEBUG("module {}/{} loaded from {}", framework, name, path);
    return info;
}

/** Directory holding the shared object that contains this function (libloom-ucs.so). */
std::string own_library_dir() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&own_library_dir), &info) == 0 || !info.dli_fname) return {};
    std::string path(info.dli_fname);
    std::size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

}  // namespace

std::string_view to_string(ModuleState state) noexcept {
    switch (state) {
    case ModuleState::loaded: return "loaded";
    case ModuleState::failed: return "failed";
    case ModuleState::disabled: return "disabled";
    }
    return "unknown";
}

std::vector<std::string> default_module_dirs() {
    std::vector<std::string> dirs;
    // Read now, not at load time: a test or a launcher may set it after libloom-ucs loaded.
    std::string configured = config::load_global_options().module_dir;
    if (!configured.empty()) {
        std::string_view list(configured);
        while (!list.empty()) {
            std::size_t colon = list.find(':');
            std::string_view dir = list.substr(0, colon);
            if (!dir.empty()) dirs.emplace_back(dir);
            if (colon == std::string_view::npos) break;
            list.remove_prefix(colon + 1);
        }
        return dirs;
    }
    if (std::string own = own_library_dir(); !own.empty()) dirs.push_back(own + "/loom");
#ifdef LOOM_MODULE_DIR
    if (std::find(dirs.begin(), dirs.end(), LOOM_MODULE_DIR) == dirs.end()) dirs.emplace_back(LOOM_MODULE_DIR);
#endif
    return dirs;
}

const std::vector<ModuleInfo>& load_modules(std::string_view framework, const ModuleLoadParams& params) {
    ModuleRegistry& reg = registry();
    std::lock_guard guard(reg.lock);
    if (auto it = reg.by_framework.find(framework); it != reg.by_framework.end()) return it->second;

    std::vector<ModuleInfo> result;
    std::set<std::string> seen;
    for (const std::string& dir : params.dirs) {
        for (const std::string& name : scan_dir(dir, framework)) {
            if (!seen.insert(name).second) continue;  // an earlier directory already provided it
            std::string path = dir + "/libloom_" + std::string(framework) + "_" + name + ".so";
            if (params.allowed && !params.allowed(name)) {
                result.push_back({std::string(framework), name, path, ModuleState::disabled,
                                  "not in LOOM_MODULES"});
                continue;
            }
            result.push_back(load_one(framework, name, path));
        }
    }
    return reg.by_framework.emplace(std::string(framework), std::move(result)).first->second;
}

const std::vector<ModuleInfo>& load_modules(std::string_view framework) {
    config::AllowList allowed = config::load_global_options().modules;
    return load_modules(framework, {default_module_dirs(), [allowed](std::string_view name) {
                                        return allowed.allows(name);
                                    }});
}

std::vector<ModuleInfo> module_report(std::string_view framework) {
    ModuleRegistry& reg = registry();
    std::lock_guard guard(reg.lock);
    auto it = reg.by_framework.find(framework);
    return it == reg.by_framework.end() ? std::vector<ModuleInfo>{} : it->second;
}

}  // namespace loom::ucs
