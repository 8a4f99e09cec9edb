/**
 * loom_perftest: command-line compatible with ucx_perftest for the common options,
 * so the two binaries can be swapped in a benchmark script.
 *
 *   server:  loom_perftest [-p PORT] [-x TL -d DEV]
 *   client:  loom_perftest SERVER_HOST -t am_lat -x shm -d memory -s 8 -n 100000
 *   one process (loopback): loom_perftest -l -t am_lat -x self -d memory
 *   protocol layer (tag_lat, tag_sync_lat, tag_bw, ucp_am_lat, ucp_am_bw, stream_lat, stream_bw):
 *            LOOM_TLS=shm loom_perftest SERVER_HOST -t tag_lat
 *   protocol layer (tag_lat, tag_sync_lat, tag_bw, ucp_put_lat, ucp_put_bw, ucp_get, ucp_add):
 *       LOOM_TLS=shm loom_perftest SERVER_HOST -t tag_lat
 *   both started by MPI (rank 0 the client, rank 1 the server; mpi_oob.h):
 *       mpirun -np 2 -x LOOM_TLS=shm loom_perftest -t tag_lat
 *
 * The client sends its parameters to the server over an out-of-band channel (oob.h: a
 * TCP connection, or MPI under mpirun), which then carries addresses and barriers; both
 * open the transport, and the client prints the results in ucx_perftest's columns with
 * a final line starting "Final:".
 */
#pragma once

#include "oob.h"

#include "ucs/time/clock.h"
#include "ucs/type/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom::perftest {

/** The measured operation. */
enum class TestKind : std::uint8_t {
    am_lat, am_bw, put_lat, put_bw, get_lat, get_bw,  // uct level: one transport, -x and -d
    tag_lat, tag_sync_lat, tag_bw,                     // ucp level: the C API, LOOM_TLS
    ucp_am_lat, ucp_am_bw, stream_lat, stream_bw,      // ucp level: active messages, streams
    ucp_put_lat, ucp_put_bw, ucp_get, ucp_add,         // ucp level: RMA and atomics (ucp_rma_runner.cc)
};
inline constexpr std::uint8_t kLastTestKind = static_cast<std::uint8_t>(TestKind::ucp_add);
constexpr bool is_ucp_rma_test(TestKind kind) {
    return kind == TestKind::ucp_put_lat || kind == TestKind::ucp_put_bw || kind == TestKind::ucp_get ||
           kind == TestKind::ucp_add;
}

/** True for the protocol-layer tests (run by run_ucp_test). */
constexpr bool is_ucp_test(TestKind kind) {
    return kind == TestKind::tag_lat || kind == TestKind::tag_sync_lat || kind == TestKind::tag_bw ||
           kind == TestKind::ucp_am_lat || kind == TestKind::ucp_am_bw || kind == TestKind::stream_lat ||
           kind == TestKind::stream_bw || is_ucp_rma_test(kind);
}

/** True for ping-pong tests, which report one-way latency (round trip / 2). */
constexpr bool is_latency_test(TestKind kind) {
    return kind == TestKind::am_lat || kind == TestKind::put_lat || kind == TestKind::get_lat ||
           kind == TestKind::tag_lat || kind == TestKind::tag_sync_lat || kind == TestKind::ucp_am_lat ||
           kind == TestKind::stream_lat || kind == TestKind::ucp_put_lat;
}

/** How the sender hands data to the transport (-D). */
enum class DataLayout : std::uint8_t { short_, bcopy, zcopy };

/** Everything the client decides and sends to the server. */
struct Params {
    TestKind test = TestKind::am_lat;
    DataLayout layout = DataLayout::short_;
    std::string tl;              ///< -x
    std::string dev;             ///< -d
    std::uint64_t size = 8;      ///< -s: message size in bytes
    std::uint64_t iters = 1000000;   ///< -n
    std::uint64_t warmup = 10000;    ///< -w
    std::uint32_t outstanding = 0;   ///< -O: 0 = default window (tag_bw: 32, as ucx_perftest)
    std::uint32_t window = 127;      ///< -W: flow-control window for am_bw
    double percentile = 50.0;        ///< -R
    bool sleep = false;              ///< -E sleep: the uct-level initiator waits on events (not sent)
};

/** Output options (never sent to the server). */
struct OutputOptions {
    bool final_only = false;  ///< -f
    bool csv = false;         ///< -v
};

/** Names as ucx_perftest spells them: "am_lat", "put_bw", "get" ... */
const char* test_name(TestKind kind);
const char* layout_name(DataLayout layout);

/** Measured results, in ucx_perftest's units. */
struct Report {
    std::uint64_t iters = 0;
    double latency_percentile_us = 0;  ///< one-way, at the requested percentile
    double latency_avg_us = 0;         ///< of the last reporting period
    double latency_overall_us = 0;
    double bandwidth_avg_mbs = 0;      ///< MB/s (2^20 bytes), last period
    double bandwidth_overall_mbs = 0;
    double msgrate_avg = 0;            ///< messages per second, last period
    double msgrate_overall = 0;
};

/** Prints the table header (unless final-only or CSV). */
void print_header(const OutputOptions& out, const Params& params);

/** Prints one periodic line or the final one. */
void print_report(const OutputOptions& out, const Report& report, bool final);

/**
 * Collects per-iteration times and prints periodic (every second) and final reports.
 * sample() does not allocate: the latency samples are reserved up front.
 */
class Meter {
public:
    Meter(const Params& params, const OutputOptions& out, bool latency_test);

    /** Records iteration @p i that took @p ticks (round trip for latency tests). */
    void sample(std::uint64_t i, ucs::Ticks now, ucs::Ticks ticks) {
        if (latency_) samples_.push_back(ticks);
        if (now - last_ >= period_) {
            report(i + 1, now, false);
            last_ = now;
            last_iters_ = i + 1;
        }
    }

    void finish(std::uint64_t iters, Report& report_out) { report_out = report(iters, ucs::get_time(), true); }

private:
    Report report(std::uint64_t iters, ucs::Ticks now, bool final);

    const Params& params_;
    const OutputOptions& out_;
    bool latency_;
    std::vector<ucs::Ticks> samples_;
    ucs::Ticks start_, last_, period_;
    std::uint64_t last_iters_ = 0;
};

/** Role of this process in a run. */
enum class Role : std::uint8_t { server, client, loopback };

/** Runs a uct-level test; the client (or loopback) fills @p report. */
Status run_uct_test(const Params& params, Role role, Oob* oob, const OutputOptions& out, Report& report);

/**
 * Runs a protocol-layer test (tag_lat, tag_sync_lat, tag_bw, ucp_am_lat, ucp_am_bw,
 * stream_lat, stream_bw) through the public C API
 * (include/loom/ucp.h) only. Transports come from LOOM_TLS; a non-empty params.tl
 * (the client's -x) replaces it in both processes. Prints one line on stderr for any
 * failure (the caller need not add one); waits give up after 60 s without progress.
 */
Status run_ucp_test(const Params& params, Role role, Oob* oob, const OutputOptions& out, Report& report);

/**
 * Runs a protocol-layer RMA test (ucp_put_lat, ucp_put_bw, ucp_get, ucp_add; called by
 * run_ucp_test), with ucx_perftest's semantics and the data checked; failures as
 * run_ucp_test.
 */
Status run_ucp_rma_test(const Params& params, Role role, Oob* oob, const OutputOptions& out, Report& report);

}  // namespace loom::perftest
