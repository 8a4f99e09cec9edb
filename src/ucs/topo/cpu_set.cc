#define LOOM_LOG_COMPONENT (::loom::ucs::topo_log())

#include "ucs/topo/cpu_set.h"

#include "ucs/debug/log.h"
#include "ucs/topo/topo_log.h"

#include <algorithm>
#include <bit>
#include <charconv>

namespace loom::ucs {
namespace {

constexpr unsigned kBits = 64;

std::string_view trim_space(std::string_view text) {
    const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
    while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
    return text;
}

// A decimal CPU index below kMaxCpus, the whole of @p text.
std::optional<unsigned> parse_index(std::string_view text) {
    unsigned value = 0;
    if (text.empty()) return std::nullopt;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value >= CpuSet::kMaxCpus) {
        return std::nullopt;
    }
    return value;
}

}  // namespace

CpuSet CpuSet::range(unsigned first, unsigned last) {
    CpuSet set;
    for (unsigned cpu = first; cpu <= last && cpu < kMaxCpus; ++cpu) set.add(cpu);
    return set;
}

Result<CpuSet> CpuSet::parse(std::string_view list) {
    const std::string_view text = trim_space(list);
    CpuSet set;
    if (text.empty()) return set;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        std::size_t comma = text.find(',', pos);
        if (comma == std::string_view::npos) comma = text.size();
        const std::string_view item = text.substr(pos, comma - pos);
        const std::size_t dash = item.find('-');
        std::optional<unsigned> first = parse_index(item.substr(0, dash));
        std::optional<unsigned> last =
            dash == std::string_view::npos ? first : parse_index(item.substr(dash + 1));
        if (!first || !last || *first > *last) {
            LOOM_LOG_DIAG("invalid CPU list '{}': bad item '{}'", list, item);
            return Status::invalid_param;
        }
        for (unsigned cpu = *first; cpu <= *last; ++cpu) set.add(cpu);
        pos = comma + 1;
    }
    return set;
}

void CpuSet::add(unsigned cpu) {
    if (cpu >= kMaxCpus) return;
    const std::size_t word = cpu / kBits;
    if (words_.size() <= word) words_.resize(word + 1, 0);
    words_[word] |= std::uint64_t{1} << (cpu % kBits);
}

void CpuSet::remove(unsigned cpu) {
    const std::size_t word = cpu / kBits;
    if (word >= words_.size()) return;
    words_[word] &= ~(std::uint64_t{1} << (cpu % kBits));
    trim();
}

bool CpuSet::contains(unsigned cpu) const noexcept {
    const std::size_t word = cpu / kBits;
    return word < words_.size() && (words_[word] >> (cpu % kBits)) & 1;
}

unsigned CpuSet::count() const noexcept {
    unsigned total = 0;
    for (std::uint64_t word : words_) total += static_cast<unsigned>(std::popcount(word));
    return total;
}

std::optional<unsigned> CpuSet::first() const noexcept {
    for (std::size_t i = 0; i < words_.size(); ++i) {
        if (words_[i] != 0) return static_cast<unsigned>(i * kBits + std::countr_zero(words_[i]));
    }
    return std::nullopt;
}

std::vector<unsigned> CpuSet::to_vector() const {
    std::vector<unsigned> cpus;
    cpus.reserve(count());
    for (std::size_t i = 0; i < words_.size(); ++i) {
        for (std::uint64_t word = words_[i]; word != 0; word &= word - 1) {
            cpus.push_back(static_cast<unsigned>(i * kBits + std::countr_zero(word)));
        }
    }
    return cpus;
}

bool CpuSet::intersects(const CpuSet& other) const noexcept {
    const std::size_t n = std::min(words_.size(), other.words_.size());
    for (std::size_t i = 0; i < n; ++i) {
        if (words_[i] & other.words_[i]) return true;
    }
    return false;
}

bool CpuSet::is_subset_of(const CpuSet& other) const noexcept {
    for (std::size_t i = 0; i < words_.size(); ++i) {
        const std::uint64_t theirs = i < other.words_.size() ? other.words_[i] : 0;
        if (words_[i] & ~theirs) return false;
    }
    return true;
}

CpuSet CpuSet::operator&(const CpuSet& other) const {
    CpuSet result = *this;
    result &= other;
    return result;
}

CpuSet CpuSet::operator|(const CpuSet& other) const {
    CpuSet result = *this;
    result |= other;
    return result;
}

CpuSet& CpuSet::operator&=(const CpuSet& other) {
    if (words_.size() > other.words_.size()) words_.resize(other.words_.size());
    for (std::size_t i = 0; i < words_.size(); ++i) words_[i] &= other.words_[i];
    trim();
    return *this;
}

CpuSet& CpuSet::operator|=(const CpuSet& other) {
    if (words_.size() < other.words_.size()) words_.resize(other.words_.size(), 0);
    for (std::size_t i = 0; i < other.words_.size(); ++i) words_[i] |= other.words_[i];
    return *this;
}

std::string CpuSet::to_string() const {
    std::string text;
    const std::vector<unsigned> cpus = to_vector();
    for (std::size_t i = 0; i < cpus.size();) {
        std::size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
        if (!text.empty()) text += ',';
        text += std::to_string(cpus[i]);
        if (j > i) {
            text += '-';
            text += std::to_string(cpus[j]);
        }
        i = j + 1;
    }
    return text;
}

void CpuSet::trim() noexcept {
    while (!words_.empty() && words_.back() == 0) words_.pop_back();
}

}  // namespace loom::ucs
