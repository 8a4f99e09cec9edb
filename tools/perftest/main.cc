/**
 * loom_perftest entry point: option parsing (ucx_perftest-compatible for the common
 * options), the client/server/loopback roles (by host name, or by rank under an MPI
 * launcher) and the parameter exchange.
 */
#include "mpi_oob.h"
#include "perftest.h"

#include "ucs/config/registry.h"
#include "ucs/sys/module.h"

#include <getopt.h>
#include <sched.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

namespace {

using namespace loom::perftest;

constexpr std::uint16_t kDefaultPort = 13337;
constexpr std::uint32_t kParamsMagic = 0x4c4f4f4d;  // "LOOM"
constexpr std::uint16_t kParamsVersion = 1;

void usage(FILE* out) {
    const std::string mpi = mpi_library();
    std::fprintf(out,
                 "Usage: loom_perftest [server-hostname] [options]\n"
                 "       mpirun -np 2 loom_perftest [options]\n"
                 "Measures Loom's latency, bandwidth and message rate between two processes.\n"
                 "Start the server with no host name, then the client with the server's host name;\n"
                 "or start both with an MPI launcher: rank 0 is the client (it measures and prints the\n"
                 "results), rank 1 the server, and MPI carries only what the TCP connection would\n"
                 "(parameters, addresses, barriers), never inside the measurement.\n"
                 "MPI: %s\n"
                 "\n",
                 mpi.empty() ? "none in this build (configure --with-mpi): run a server and a client"
                             : (mpi + ", used when started by its launcher (mpirun -np 2)").c_str());
    std::fprintf(out,
                 "  -t <test>     transport level (one transport, -x and -d):\n"
                 "                  am_lat, am_bw, put_lat, put_bw, get (or get_lat), get_bw\n"
                 "                protocol level (the C API, transports from LOOM_TLS):\n"
                 "                  tag_lat, tag_sync_lat, tag_bw, ucp_am_lat, ucp_am_bw, stream_lat, stream_bw,\n"
                 "                  ucp_put_lat, ucp_put_bw, ucp_get, ucp_add\n"
                 "                  (ucp_am_*: no active-message header, as ucx_perftest's default -H 0)\n"
                 "  -x <tl>       transport (see loom_info -d), e.g. shm, tcp, self; for protocol-level tests\n"
                 "                optional: sets LOOM_TLS=<tl> in both processes\n"
                 "  -d <device>   device of the transport, e.g. memory, lo, eth0 (ignored at protocol level)\n"
                 "  -D <layout>   short (default), bcopy or zcopy (ignored at protocol level)\n"
                 "  -s <size>     message size in bytes (8); ucp_add: the atomic's size, 4 or 8\n"
                 "  -n <iters>    measured iterations (1000000)\n"
                 "  -w <iters>    warm-up iterations (10000)\n"
                 "  -O <count>    outstanding operations (window) for bandwidth tests (tag_bw, ucp_am_bw,\n"
                 "                stream_bw, ucp_put_bw: 32; ucp_get, ucp_add: 1)\n"
                 "  -W <count>    flow-control window of am_bw (127)\n"
                 "  -R <rank>     percentile reported in the first latency column (50.0)\n"
                 "  -E <mode>     how the initiator of a uct-level test waits: poll (default, busy-polls)\n"
                 "                or sleep (arms the iface and sleeps on its event fd when idle)\n"
                 "  -c <cpu>      pin this process to a CPU\n"
                 "  -p <port>     TCP port of the out-of-band connection (13337)\n"
                 "  -P <0|1>      MPI for the out-of-band exchange: 0 never, 1 even when no launcher is\n"
                 "                recognised (default: when OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set)\n"
                 "  -l            loopback: one process plays both sides (no host name)\n"
                 "  -f            print only the final line\n"
                 "  -v            CSV output\n"
                 "  -h            this help\n"
                 "\n"
                 "Protocol-level example (set LOOM_TLS the same way for both processes):\n"
                 "  LOOM_TLS=shm loom_perftest &  LOOM_TLS=shm loom_perftest localhost -t tag_lat -s 8\n"
                 "The same under Open MPI's mpirun (its -x exports a variable; after the program name,\n"
                 "-x is loom_perftest's transport):\n"
                 "  mpirun -np 2 -x LOOM_TLS=shm loom_perftest -t tag_lat -s 8\n"
                 "  mpirun -np 2 loom_perftest -t am_lat -x shm -d memory\n");
}

bool parse_u64(const char* text, std::uint64_t& out) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') return false;
    out = v;
    return true;
}

bool parse_test(const std::string& name, TestKind& kind) {
    static const std::pair<const char*, TestKind> kNames[] = {
        {"am_lat", TestKind::am_lat}, {"am_bw", TestKind::am_bw},   {"put_lat", TestKind::put_lat},
        {"put_bw", TestKind::put_bw}, {"get", TestKind::get_lat},   {"get_lat", TestKind::get_lat},
        {"get_bw", TestKind::get_bw}, {"tag_lat", TestKind::tag_lat}, {"tag_sync_lat", TestKind::tag_sync_lat},
        {"tag_bw", TestKind::tag_bw}, {"ucp_am_lat", TestKind::ucp_am_lat}, {"ucp_am_bw", TestKind::ucp_am_bw},
        {"stream_lat", TestKind::stream_lat}, {"stream_bw", TestKind::stream_bw},
        {"tag_bw", TestKind::tag_bw}, {"ucp_put_lat", TestKind::ucp_put_lat}, {"ucp_put_bw", TestKind::ucp_put_bw},
        {"ucp_get", TestKind::ucp_get}, {"ucp_add", TestKind::ucp_add},
    };
    for (const auto& [n, k] : kNames) {
        if (name == n) {
            kind = k;
            return true;
        }
    }
    return false;
}

/** Fixed-layout parameter message from client to server. */
struct [[gnu::packed]] WireParams {
    std::uint32_t magic;
    std::uint16_t version;
    std::uint8_t test;
    std::uint8_t layout;
    std::uint64_t size, iters, warmup;
    std::uint32_t outstanding, window;
    double percentile;
    char tl[32];
    char dev[64];
};

std::vector<std::uint8_t> pack_params(const Params& p) {
    WireParams w{};
    w.magic = kParamsMagic;
    w.version = kParamsVersion;
    w.test = static_cast<std::uint8_t>(p.test);
    w.layout = static_cast<std::uint8_t>(p.layout);
    w.size = p.size;
    w.iters = p.iters;
    w.warmup = p.warmup;
    w.outstanding = p.outstanding;
    w.window = p.window;
    w.percentile = p.percentile;
    std::snprintf(w.tl, sizeof(w.tl), "%s", p.tl.c_str());
    std::snprintf(w.dev, sizeof(w.dev), "%s", p.dev.c_str());
    auto* bytes = reinterpret_cast<std::uint8_t*>(&w);
    return {bytes, bytes + sizeof(w)};
}

bool unpack_params(const std::vector<std::uint8_t>& blob, Params& p) {
    WireParams w;
    if (blob.size() != sizeof(w)) return false;
    std::memcpy(&w, blob.data(), sizeof(w));
    if (w.magic != kParamsMagic || w.version != kParamsVersion || w.test > kLastTestKind || w.layout > 2) return false;
    w.tl[sizeof(w.tl) - 1] = w.dev[sizeof(w.dev) - 1] = '\0';
    p.test = static_cast<TestKind>(w.test);
    p.layout = static_cast<DataLayout>(w.layout);
    p.size = w.size;
    p.iters = w.iters;
    p.warmup = w.warmup;
    p.outstanding = w.outstanding;
    p.window = w.window;
    p.percentile = w.percentile;
    p.tl = w.tl;
    p.dev = w.dev;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    Params params;
    OutputOptions out;
    std::uint64_t port = kDefaultPort;
    bool loopback = false;
    bool test_given = false;
    int cpu = -1;
    int use_mpi = -1;  // -P: 0 never, 1 always, -1 when a launcher is recognised
    opterr = 0;
    int opt;
    auto bad = [&](const char* what) {
        std::fprintf(stderr, "loom_perftest: invalid %s '%s'\n", what, optarg);
        return 2;
    };
    while ((opt = getopt(argc, argv, "t:x:d:D:s:n:w:O:W:R:E:c:p:P:lfvhNH:")) != -1) {
        std::uint64_t value = 0;
        switch (opt) {
        case 't':
            if (!parse_test(optarg, params.test)) {
                std::fprintf(stderr, "loom_perftest: unknown test '%s'%s\n", optarg,
                             std::strncmp(optarg, "tag", 3) == 0 || std::strncmp(optarg, "ucp", 3) == 0 ||
                                     std::strncmp(optarg, "stream", 6) == 0
                                 ? " (of ucx_perftest's UCP tests, only tag_lat, tag_sync_lat, tag_bw, ucp_am_lat, "
                                   "ucp_am_bw, stream_lat, stream_bw, ucp_put_lat, ucp_put_bw, ucp_get and ucp_add "
                                   "exist here)"
                                 : " (see -h)");
                return 2;
            }
            test_given = true;
            break;
        case 'x': params.tl = optarg; break;
        case 'd': params.dev = optarg; break;
        case 'D':
            if (std::strcmp(optarg, "short") == 0) {
                params.layout = DataLayout::short_;
            } else if (std::strcmp(optarg, "bcopy") == 0) {
                params.layout = DataLayout::bcopy;
            } else if (std::strcmp(optarg, "zcopy") == 0) {
                params.layout = DataLayout::zcopy;
            } else {
                return bad("data layout (short, bcopy or zcopy)");
            }
            break;
        case 's':
            if (std::strchr(optarg, ',')) {
                std::fprintf(stderr, "loom_perftest: scatter-gather size lists are not supported; give one size\n");
                return 2;
            }
            if (!parse_u64(optarg, params.size)) return bad("size");
            break;
        case 'n':
            if (!parse_u64(optarg, params.iters) || params.iters == 0) return bad("iteration count");
            break;
        case 'w':
            if (!parse_u64(optarg, params.warmup)) return bad("warm-up count");
            break;
        case 'O':
            if (!parse_u64(optarg, value) || value == 0 || value > 1u << 20) return bad("outstanding count");
            params.outstanding = static_cast<std::uint32_t>(value);
            break;
        case 'W':
            if (!parse_u64(optarg, value) || value == 0 || value > 1u << 20) return bad("window");
            params.window = static_cast<std::uint32_t>(value);
            break;
        case 'R': {
            char* end = nullptr;
            params.percentile = std::strtod(optarg, &end);
            if (end == optarg || *end != '\0' || params.percentile <= 0 || params.percentile > 100) {
                return bad("percentile");
            }
            break;
        }
        case 'E':
            if (std::strcmp(optarg, "poll") == 0) {
                params.sleep = false;
            } else if (std::strcmp(optarg, "sleep") == 0) {
                params.sleep = true;
            } else {
                return bad("wait mode (poll or sleep)");
            }
            break;
        case 'c':
            if (!parse_u64(optarg, value) || value >= CPU_SETSIZE) return bad("CPU");
            cpu = static_cast<int>(value);
            break;
        case 'p':
            if (!parse_u64(optarg, port) || port == 0 || port > 65535) return bad("port");
            break;
        case 'P':
            if (std::strcmp(optarg, "0") != 0 && std::strcmp(optarg, "1") != 0) return bad("MPI mode (0 or 1)");
            use_mpi = optarg[0] - '0';
            break;
        case 'l': loopback = true; break;
        case 'f': out.final_only = true; break;
        case 'v': out.csv = true; break;
        case 'N': break;  // numeric formatting: accepted for compatibility
        case 'H':
            if (!parse_u64(optarg, value) || value != 8) {
                std::fprintf(stderr, "loom_perftest: only an 8-byte active-message header is supported\n");
                return 2;
            }
            break;
        case 'h':
            // Under mpirun, one copy of the help rather than one per rank.
            if (auto launcher = detect_launcher(); !launcher || launcher->rank <= 0) usage(stdout);
            return 0;
        default:
            std::fprintf(stderr, "loom_perftest: unknown option '-%c'\n", optopt ? optopt : '?');
            usage(stderr);
            return 2;
        }
    }
    const char* host = optind < argc ? argv[optind] : nullptr;
    if (optind + 1 < argc) {
        std::fprintf(stderr, "loom_perftest: unexpected argument '%s'\n", argv[optind + 1]);
        return 2;
    }
    if (loopback && host) {
        std::fprintf(stderr, "loom_perftest: -l (loopback) takes no server host name\n");
        return 2;
    }
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) {
            std::fprintf(stderr, "loom_perftest: cannot pin to CPU %d: %s\n", cpu, std::strerror(errno));
            return 1;
        }
    }
    // Who plays which side: -l, both; a host name, the client; otherwise the server,
    // unless an MPI launcher started this process: then rank 0 is the client and rank 1
    // the server, and MPI replaces the TCP connection.
    Role role = loopback ? Role::loopback : host ? Role::client : Role::server;
    std::unique_ptr<Oob> oob;
    if (role == Role::server && use_mpi != 0) {
        std::optional<Launcher> launcher = detect_launcher();
        if (!launcher && use_mpi == 1) {
            launcher = Launcher{"a launcher loom_perftest does not recognise (-P 1)", "", -1, -1};
        }
        if (launcher) {
            MpiJob job = join_mpi_job(*launcher, argc, argv);
            if (!job.oob) return job.exit_code;
            oob = std::move(job.oob);
            role = job.rank == 0 ? Role::client : Role::server;
        }
    }
    // Transport modules first: their tables (LOOM_IB_*) are known only once they are loaded.
    (void)loom::ucs::load_modules("uct");
    loom::ucs::config::warn_unknown_variables();

    Report report;
    loom::Status status = loom::Status::ok;
    if (role != Role::server) {
        const char* refusal = nullptr;
        if (!is_ucp_test(params.test) && (params.tl.empty() || params.dev.empty())) {
            refusal = "the client needs -x TRANSPORT and -d DEVICE (see loom_info -d)";
        } else if (!test_given) {
            refusal = "the client needs -t TEST";
        } else if (params.sleep && (loopback || is_ucp_test(params.test))) {
            refusal = "-E sleep is for uct-level tests between two processes";
        }
        if (refusal) {
            std::fprintf(stderr, "loom_perftest: %s\n", refusal);
            // Under MPI the server already waits for parameters: no parameters tell it to stop.
            if (oob) (void)oob->send_blob({});
            return 2;
        }
    }
    // ucp tests print their own line for a failure; everything else is reported below.
    bool reported = false;
    auto run_test = [&](Role role, Oob* oob) {
        reported = is_ucp_test(params.test);
        return reported ? run_ucp_test(params, role, oob, out, report) : run_uct_test(params, role, oob, out, report);
    };
    if (role == Role::loopback) {
        status = run_test(Role::loopback, nullptr);
    } else if (role == Role::client) {
        if (!oob) {
            auto tcp = std::make_unique<TcpOob>();
            status = tcp->connect_to(host, static_cast<std::uint16_t>(port));
            oob = std::move(tcp);
        }
        if (status == loom::Status::ok) status = oob->send_blob(pack_params(params));
        if (status == loom::Status::ok) status = run_test(Role::client, oob.get());
    } else {
        if (!oob) {
            auto tcp = std::make_unique<TcpOob>();
            status = tcp->accept_one(static_cast<std::uint16_t>(port));
            oob = std::move(tcp);
        }
        std::vector<std::uint8_t> blob;
        if (status == loom::Status::ok) status = oob->recv_blob(blob);
        // No parameters: the client refused its options and said why.
        if (status == loom::Status::ok && blob.empty()) return 1;
        if (status == loom::Status::ok && !unpack_params(blob, params)) {
            std::fprintf(stderr, "loom_perftest: the client sent parameters this server does not understand\n");
            return 1;
        }
        if (status == loom::Status::ok) status = run_test(Role::server, oob.get());
    }
    if (status != loom::Status::ok) {
        if (!reported) std::fprintf(stderr, "loom_perftest: failed: %s\n", std::string(loom::to_string(status)).c_str());
        // The peer must not wait for this process: TCP closes the connection, MPI aborts the job.
        if (oob) oob->fail();
        return 1;
    }
    return 0;
}
