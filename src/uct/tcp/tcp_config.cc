/**
 * The LOOM_TCP_* configuration table of the tcp transport.
 */
#include "uct/tcp/tcp_config.h"

#include <charconv>
#include <string_view>

namespace loom::uct::tcp {

namespace {

using namespace ucs::config;

/** "auto", "system", or what may name a kernel congestion control module (TCP_CA_NAME_MAX is 16 with the NUL). */
bool valid_congestion(std::string_view text) {
    if (text.empty() || text.size() > 15) return false;
    for (char c : text) {
        if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '_' && c != '-') return false;
    }
    return true;
}

bool valid_port_range(std::string_view text) {
    std::uint16_t min, max;
    return parse_port_range(std::string(text), min, max) == Status::ok;
}

const RegisteredTable<TcpConfig>& make_table() {
    // Never destroyed: ifaces may be opened from atexit handlers.
    static const auto* table = new RegisteredTable<TcpConfig>(
        "TCP_", "TCP transport",
        "Sockets over any IPv4 network interface that is up (including the loopback device lo). "
        "put, get and atomics are executed by the target's progress.",
        {
            field(
                "PORT_RANGE", "0",
                "Ports an iface may listen on: 0 for any port the system picks, or min-max (the first "
                "free port of the range is used).",
                &TcpConfig::port_range,
                StringParser("port range", "0, or min-max with 1 <= min <= max <= 65535", valid_port_range)),
            field("SNDBUF", "auto",
                  "Socket send buffer size; auto keeps the kernel's automatic tuning, which is usually best.",
                  &TcpConfig::sndbuf, SizeParser().allow_auto()),
            field("RCVBUF", "auto", "Socket receive buffer size; auto keeps the kernel's automatic tuning.",
                  &TcpConfig::rcvbuf, SizeParser().allow_auto()),
            field("NODELAY", "yes", "Disable Nagle's algorithm (TCP_NODELAY): small messages leave at once.",
                  &TcpConfig::nodelay, BoolParser()),
            field(
                "CONGESTION", "auto",
                "TCP congestion control of the connections (TCP_CONGESTION). auto: on the loopback device a "
                "connection that writes bulk data (frames of 128 KiB or more) uses reno, whose unpaced "
                "segments cost less CPU per byte there than a pacing default such as bbr, and returns to "
                "the system default after 1024 smaller frames in a row (bbr's pacing merges a stream of "
                "small messages into fewer segments); other devices keep the system default. system: "
                "always the system default. Any other value names the algorithm of every connection, one "
                "the kernel offers (net.ipv4.tcp_available_congestion_control; one outside "
                "net.ipv4.tcp_allowed_congestion_control needs CAP_NET_ADMIN).",
                &TcpConfig::congestion,
                StringParser("congestion control", "auto, system, or an algorithm name such as reno or cubic",
                             valid_congestion)),
            field("SEG_SIZE", "64k",
                  "Largest payload of a short or bcopy operation (am_short, am_bcopy, put_short, put_bcopy, "
                  "get_bcopy): such a frame passes through the connection's receive buffer, which holds one "
                  "segment and the frame's headers.",
                  &TcpConfig::seg_size, SizeParser()),
            field("MAX_AM_SIZE", "4m",
                  "Largest active message (header and payload of am_zcopy). Messages larger than "
                  "LOOM_TCP_SEG_SIZE are received straight into a buffer of their own, allocated when the "
                  "first one arrives and kept for the next.",
                  &TcpConfig::max_am, SizeParser()),
            field("CONN_RETRIES", "3",
                  "How often a refused connection attempt is retried before the endpoint fails.",
                  &TcpConfig::conn_retries, IntParser<unsigned>().range(0, 255)),
            field("CONN_RETRY_INTERVAL", "20ms", "Time between connection attempts.",
                  &TcpConfig::conn_retry_interval, TimeParser()),
            field("CONN_TIMEOUT", "10s",
                  "Time a connection may take to be established (connect and handshake) before it fails.",
                  &TcpConfig::conn_timeout, TimeParser().allow_inf()),
            field("BACKLOG", "256", "Listen backlog of an iface's socket.", &TcpConfig::backlog,
                  IntParser<unsigned>().range(1, 65535)),
            field("KEEPALIVE_IDLE", "10s",
                  "Idle time of a connection before TCP keepalive probes start, so a peer host that "
                  "vanished without closing its connections (power loss, network partition) fails its "
                  "endpoints instead of leaving operations waiting forever; inf disables the probes.",
                  &TcpConfig::keepalive_idle, TimeParser().allow_inf()),
            field("KEEPALIVE_INTERVAL", "2s", "Time between keepalive probes.",
                  &TcpConfig::keepalive_interval, TimeParser()),
            field("KEEPALIVE_COUNT", "5",
                  "Unanswered keepalive probes after which the connection fails with peer_timeout. "
                  "A connection whose sent data stays unacknowledged for as long (KEEPALIVE_IDLE + "
                  "KEEPALIVE_INTERVAL x KEEPALIVE_COUNT, TCP_USER_TIMEOUT) fails the same way. The "
                  "protocol layer sets the three from LOOM_KEEPALIVE_INTERVAL and LOOM_KEEPALIVE_COUNT "
                  "unless they are set themselves.",
                  &TcpConfig::keepalive_count, IntParser<unsigned>().range(1, 127)),
        });
    return *table;
}

const RegisteredTable<TcpConfig>& g_table = make_table();

}  // namespace

const ucs::config::Table<TcpConfig>& tcp_config_table() { return g_table; }

Status parse_port_range(const std::string& text, std::uint16_t& min, std::uint16_t& max) {
    auto parse = [](std::string_view s, unsigned& v) {
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        return ec == std::errc() && p == s.data() + s.size() && !s.empty();
    };
    if (text == "0") {
        min = max = 0;
        return Status::ok;
    }
    auto dash = text.find('-');
    unsigned lo, hi;
    if (dash == std::string::npos || !parse(std::string_view(text).substr(0, dash), lo) ||
        !parse(std::string_view(text).substr(dash + 1), hi) || lo < 1 || lo > hi || hi > 65535) {
        return Status::invalid_config;
    }
    min = static_cast<std::uint16_t>(lo);
    max = static_cast<std::uint16_t>(hi);
    return Status::ok;
}

}  // namespace loom::uct::tcp
