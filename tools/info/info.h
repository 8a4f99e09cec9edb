/**
 * loom_info: each option's printer lives in its own file.
 */
#pragma once

#include <string>

namespace loom::info {

/** -v: version, build options and the libraries Loom was built against. */
int print_version();

/** -c: every configuration variable with its current value; with @p with_docs (-f) its documentation too. */
int print_config(bool with_docs);

/** -cm: every configuration variable's default and documentation as Markdown (docs/configuration.md). */
int print_config_markdown();

/** -T: the machine's topology (NUMA nodes, CPUs, PCI devices, NIC distances). */
int print_topology();

/**
 * -e: the protocols (size ranges, lanes) of an endpoint to a peer of @p kind: "self",
 * "shm" (same host), "net" (another host), or every kind when empty (-D).
 */
int print_endpoint_config(const std::string& kind);

/** -d: devices and transports with their capabilities and performance model. */
int print_devices();

}  // namespace loom::info
