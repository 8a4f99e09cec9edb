#include "perftest.h"

#include <algorithm>

namespace loom::perftest {

Meter::Meter(const Params& params, const OutputOptions& out, bool latency_test)
    : params_(params), out_(out), latency_(latency_test) {
    samples_.reserve(latency_test ? params.iters : 0);
    start_ = last_ = ucs::get_time();
    period_ = ucs::sec_to_ticks(1.0);
}

Report Meter::report(std::uint64_t iters, ucs::Ticks now, bool final) {
    Report r;
    r.iters = iters;
    double total = ucs::ticks_to_sec(now - start_);
    double period = ucs::ticks_to_sec(now - last_);
    std::uint64_t period_iters = final ? iters : iters - last_iters_;
    if (final) period = total, period_iters = iters;
    double divisor = latency_ ? 2.0 : 1.0;  // round trip -> one way
    r.latency_overall_us = iters ? total * 1e6 / static_cast<double>(iters) / divisor : 0;
    r.latency_avg_us = period_iters ? period * 1e6 / static_cast<double>(period_iters) / divisor : 0;
    if (latency_ && !samples_.empty()) {
        std::vector<ucs::Ticks> sorted(samples_.begin() + static_cast<long>(final ? 0 : last_iters_),
                                       samples_.end());
        if (sorted.empty()) sorted = samples_;
        auto k = static_cast<std::size_t>(params_.percentile / 100.0 * static_cast<double>(sorted.size() - 1));
        std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(k), sorted.end());
        r.latency_percentile_us = ucs::ticks_to_sec(sorted[k]) * 1e6 / divisor;
    } else {
        r.latency_percentile_us = r.latency_avg_us;
    }
    double bytes = static_cast<double>(params_.size);
    r.msgrate_overall = total > 0 ? static_cast<double>(iters) / total : 0;
    r.msgrate_avg = period > 0 ? static_cast<double>(period_iters) / period : 0;
    if (latency_) {  // ucx_perftest counts one message per iteration in latency tests
        r.msgrate_overall = r.latency_overall_us > 0 ? 1e6 / r.latency_overall_us : 0;
        r.msgrate_avg = r.latency_avg_us > 0 ? 1e6 / r.latency_avg_us : 0;
    }
    r.bandwidth_overall_mbs = r.msgrate_overall * bytes / (1 << 20);
    r.bandwidth_avg_mbs = r.msgrate_avg * bytes / (1 << 20);
    print_report(out_, r, final);
    return r;
}

}  // namespace loom::perftest
