#include "perftest.h"

#include <cstdio>

namespace loom::perftest {

const char* test_name(TestKind kind) {
    switch (kind) {
    case TestKind::am_lat: return "am_lat";
    case TestKind::am_bw: return "am_bw";
    case TestKind::put_lat: return "put_lat";
    case TestKind::put_bw: return "put_bw";
    case TestKind::get_lat: return "get_lat";
    case TestKind::get_bw: return "get_bw";
    case TestKind::tag_lat: return "tag_lat";
    case TestKind::tag_sync_lat: return "tag_sync_lat";
    case TestKind::tag_bw: return "tag_bw";
    case TestKind::ucp_am_lat: return "ucp_am_lat";
    case TestKind::ucp_am_bw: return "ucp_am_bw";
    case TestKind::stream_lat: return "stream_lat";
    case TestKind::stream_bw: return "stream_bw";
    case TestKind::ucp_put_lat: return "ucp_put_lat";
    case TestKind::ucp_put_bw: return "ucp_put_bw";
    case TestKind::ucp_get: return "ucp_get";
    case TestKind::ucp_add: return "ucp_add";
    }
    return "?";
}

const char* layout_name(DataLayout layout) {
    switch (layout) {
    case DataLayout::short_: return "short";
    case DataLayout::bcopy: return "bcopy";
    case DataLayout::zcopy: return "zcopy";
    }
    return "?";
}

void print_header(const OutputOptions& out, const Params& params) {
    bool latency = is_latency_test(params.test);
    if (out.csv) {
        std::printf("iterations,%.1f%%ile,average,overall,bandwidth average (MB/s),bandwidth overall (MB/s),"
                    "message rate average (msg/s),message rate overall (msg/s)\n",
                    params.percentile);
        return;
    }
    const char* sep =
        "+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+";
    std::printf("+--------------+--------------+------------------------------+---------------------+"
                "-----------------------+\n");
    std::printf("|              |              |       %s       |   bandwidth (MB/s)  |  message rate (msg/s) |\n",
                latency ? " latency (usec)" : "overhead (usec)");
    std::printf("%s\n", sep);
    std::printf("|    Stage     | # iterations | %4.1f%%ile | average | overall |  average |  overall |  average  "
                "|  overall  |\n",
                params.percentile);
    std::printf("%s\n", sep);
    if (out.final_only && is_ucp_test(params.test)) {
        std::printf("# %s, %llu bytes\n", test_name(params.test), static_cast<unsigned long long>(params.size));
    } else if (out.final_only) {
        std::printf("# %s %s, %llu bytes\n", test_name(params.test), layout_name(params.layout),
                    static_cast<unsigned long long>(params.size));
    }
    std::fflush(stdout);
}

void print_report(const OutputOptions& out, const Report& r, bool final) {
    if (out.final_only && !final) return;
    if (out.csv) {
        std::printf("%llu,%.3f,%.3f,%.3f,%.2f,%.2f,%.0f,%.0f\n", static_cast<unsigned long long>(r.iters),
                    r.latency_percentile_us, r.latency_avg_us, r.latency_overall_us, r.bandwidth_avg_mbs,
                    r.bandwidth_overall_mbs, r.msgrate_avg, r.msgrate_overall);
    } else {
        std::printf("%-14s %13llu %10.3f %9.3f %9.3f %10.2f %10.2f %11.0f %11.0f\n", final ? "Final:" : "",
                    static_cast<unsigned long long>(r.iters), r.latency_percentile_us, r.latency_avg_us,
                    r.latency_overall_us, r.bandwidth_avg_mbs, r.bandwidth_overall_mbs, r.msgrate_avg,
                    r.msgrate_overall);
    }
    std::fflush(stdout);
}

}  // namespace loom::perftest
