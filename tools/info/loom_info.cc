/**
 * loom_info: tells what Loom sees on this machine and how it is configured.
 */
#include "info.h"

#include <getopt.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

void usage(FILE* out) {
    std::fprintf(out,
                 "Usage: loom_info [options]\n"
                 "Shows what Loom sees on this machine and how it is configured.\n"
                 "\n"
                 "  -v    version, build options and dependencies\n"
                 "  -c    configuration: every LOOM_* variable and its current value\n"
                 "  -f    with -c: also each variable's documentation (-cf)\n"
                 "  -m    with -c: every variable's default and documentation as Markdown (-cm),\n"
                 "        the source of docs/configuration.md\n"
                 "  -T    topology: NUMA nodes, CPUs, PCI devices and NIC distances\n"
                 "  -d    devices and transports with capabilities and performance model\n"
                 "  -e    endpoint configuration: the protocols (size ranges, lanes) an endpoint\n"
                 "        would use to each kind of peer, for the current LOOM_TLS/LOOM_NET_DEVICES\n"
                 "  -D K  with -e: only peers of kind K: self, shm (same host) or net (another host)\n"
                 "  -h    this help\n"
                 "\n"
                 "Options combine: loom_info -v -d. Without options, -v is shown.\n");
}

}  // namespace

int main(int argc, char** argv) {
    bool version = false, config = false, docs = false, markdown = false, topology = false, devices = false;
    bool endpoint = false;
    std::string peer_kind;
    opterr = 0;  // we print our own message
    int opt;
    while ((opt = getopt(argc, argv, "vcfmTdeD:h")) != -1) {
        switch (opt) {
        case 'v': version = true; break;
        case 'c': config = true; break;
        case 'f': docs = true; break;
        case 'm': markdown = true; break;
        case 'T': topology = true; break;
        case 'd': devices = true; break;
        case 'e': endpoint = true; break;
        case 'D': peer_kind = optarg; break;
        case 'h': usage(stdout); return 0;
        default:
            std::fprintf(stderr, "loom_info: unknown option '-%c'\n", optopt ? optopt : '?');
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        std::fprintf(stderr, "loom_info: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (docs && !config) {
        std::fprintf(stderr, "loom_info: -f only goes with -c (use -cf)\n");
        return 2;
    }
    if (markdown && !config) {
        std::fprintf(stderr, "loom_info: -m only goes with -c (use -cm)\n");
        return 2;
    }
    if (!peer_kind.empty() && !endpoint) {
        std::fprintf(stderr, "loom_info: -D only goes with -e\n");
        return 2;
    }
    if (!config && !topology && !devices && !endpoint) version = true;

    int rc = 0;
    if (version && rc == 0) rc = loom::info::print_version();
    if (config && rc == 0) rc = markdown ? loom::info::print_config_markdown() : loom::info::print_config(docs);
    if (topology && rc == 0) rc = loom::info::print_topology();
    if (devices && rc == 0) rc = loom::info::print_devices();
    if (endpoint && rc == 0) rc = loom::info::print_endpoint_config(peer_kind);
    return rc;
}
