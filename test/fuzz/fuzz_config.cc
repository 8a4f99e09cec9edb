/**
 * Fuzz target: configuration values and files. The first byte picks a field of every
 * registered table (global, ucp, every transport's), the rest is the value's text, parsed
 * as the field's parser would (check_value). A value that parses must print back to a
 * canonical text that parses to the same canonical text: `loom_info -c` output is pasted
 * into configuration files. The whole input is also read as a configuration file
 * (ConfigFile::parse), and its keys looked up as a misspelt variable would be.
 */
#include "fuzz_common.h"

#include "ucs/config/config_file.h"
#include "ucs/config/registry.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

/** (table, field index) of every registered field, once the libraries are loaded. */
const std::vector<std::pair<const loom::ucs::config::TableBase*, std::size_t>>& fields() {
    static const auto* all = [] {
        loom::fuzz::quiet_log();
        // A context loads the transport modules, which register their tables.
        static loom::fuzz::Stack stack("self,shm,tcp", LOOM_FEATURE_TAG);
        auto* v = new std::vector<std::pair<const loom::ucs::config::TableBase*, std::size_t>>();
        for (const auto* table : loom::ucs::config::registered_tables()) {
            for (std::size_t i = 0; i < table->size(); ++i) v->emplace_back(table, i);
        }
        return v;
    }();
    return *all;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)fields();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const auto& all = fields();
    const auto& [table, index] = all[data[0] % all.size()];
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    std::string canonical, reason;
    if (table->check_value(index, text, canonical, reason) == loom::Status::ok) {
        std::string again, reason2;
        if (table->check_value(index, canonical, again, reason2) != loom::Status::ok || again != canonical) {
            std::fprintf(stderr, "fuzz_config: %s%s: '%.*s' printed as '%s', which parses as '%s' (%s)\n",
                         table->prefix().c_str(), table->field_info(index).name.c_str(),
                         static_cast<int>(text.size()), text.data(), canonical.c_str(), again.c_str(),
                         reason2.c_str());
            std::abort();
        }
    }
    loom::ucs::config::ConfigFile file;
    std::string error;
    const std::string_view whole(reinterpret_cast<const char*>(data), size);
    if (loom::ucs::config::ConfigFile::parse("fuzz.conf", whole, file, error) == loom::Status::ok) {
        // closest_variable is an edit distance to every variable: a few entries exercise it, and
        // files of hundreds of entries spent nearly all of a campaign there (265 inputs a second).
        std::size_t looked_up = 0;
        for (const auto& entry : file.entries()) {
            if (looked_up == 4) break;
            if (entry.name.size() <= 64) {
                (void)loom::ucs::config::closest_variable(entry.name);
                ++looked_up;
            }
        }
    }
    return 0;
}
