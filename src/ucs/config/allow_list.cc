#include "ucs/config/allow_list.h"

#include <strings.h>
#include <algorithm>

namespace loom::ucs::config {

namespace {

bool same_name(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

AllowList::AllowList(Mode mode, std::vector<std::string> names) : mode_(mode) {
    for (std::string& name : names) {
        bool seen = std::any_of(names_.begin(), names_.end(),
                                [&](const std::string& kept) { return same_name(kept, name); });
        if (!seen) names_.push_back(std::move(name));
    }
}

bool AllowList::allows(std::string_view name) const noexcept {
    if (mode_ == Mode::all) return true;
    bool listed = std::any_of(names_.begin(), names_.end(),
                              [&](const std::string& entry) { return same_name(entry, name); });
    return mode_ == Mode::only ? listed : !listed;
}

std::string AllowList::to_string() const {
    if (mode_ == Mode::all) return "all";
    std::string text = mode_ == Mode::all_except ? "^" : "";
    for (std::size_t i = 0; i < names_.size(); ++i) {
        if (i > 0) text += ',';
        text += names_[i];
    }
    return text;
}

}  // namespace loom::ucs::config
