/**
 * Fuzz target: the byte stream a tcp peer sends. Each input is one connection, from a
 * plain socket, to the listening tcp iface of a real worker on lo: with its first byte
 * even, the rest is sent from the connection's first byte (the handshake, ConnRequest);
 * odd, a genuine ConnRequest naming the iface goes first and the rest is what follows it
 * (frames: active messages into the protocol's handlers, put, get, atomic and flush
 * requests with forged keys, replies in the wrong direction, lengths past every limit).
 * The worker progresses until it closes the connection or has read everything; the
 * socket is then reset (no TIME_WAIT), and the iface must drop the connection cleanly.
 * Every 2,000 inputs the worker is replaced, so that what forged messages left behind
 * (unexpected messages waiting for a receive) does not pile up.
 */
#include "fuzz_common.h"

#include "ucp/api/handles.h"
#include "ucp/core/worker.h"
#include "uct/tcp/tcp_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

namespace tcp = loom::uct::tcp;

struct Target {
    loom::fuzz::Stack stack{"tcp", LOOM_FEATURE_TAG | LOOM_FEATURE_AM | LOOM_FEATURE_STREAM | LOOM_FEATURE_RMA |
                                        LOOM_FEATURE_AMO64};
    sockaddr_in addr{};
    std::uint64_t cookie = 0;

    Target() {
        // The iface on lo: its listening port and cookie, from its own address.
        for (const loom::ucp::WorkerIface& wi : stack.worker->impl->ifaces) {
            if (wi.iface->resource().dev_name != "lo") continue;
            std::vector<std::uint8_t> raw(wi.attr.iface_addr_len);
            if (wi.iface->get_address(raw.data()) != loom::Status::ok || raw.size() != sizeof(tcp::IfaceAddress)) {
                break;
            }
            tcp::IfaceAddress ia;
            std::memcpy(&ia, raw.data(), sizeof(ia));
            addr.sin_family = AF_INET;
            addr.sin_port = ia.port;
            addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            cookie = ia.cookie;
            return;
        }
        std::fprintf(stderr, "fuzz_tcp: no tcp iface on lo\n");
        std::abort();
    }

    void progress(int times) {
        for (int i = 0; i < times; ++i) loom_worker_progress(stack.worker);
    }
};

Target* g_target;
int g_inputs = 0;
constexpr int kInputsPerWorker = 2000;

/** True once the peer closed or reset the connection (a read says so). */
bool closed_by_peer(int fd) {
    char buf[4096];
    for (;;) {
        ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) continue;  // replies: read and dropped
        return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    g_target = new Target();
    // Registered after the leak checker's own exit handler, so it runs before it.
    std::atexit([] { delete g_target; });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    if (++g_inputs % kInputsPerWorker == 0) {
        delete g_target;
        g_target = new Target();
    }
    Target& t = *g_target;
    std::vector<std::uint8_t> stream;
    if (data[0] & 1) {
        tcp::ConnRequest req{};
        req.magic = tcp::kHandshakeMagic;
        req.version = tcp::kWireVersion;
        req.target_cookie = t.cookie;
        req.source_cookie = 0x5eed;
        req.source_ip = htonl(INADDR_LOOPBACK);
        const auto* p = reinterpret_cast<const std::uint8_t*>(&req);
        stream.assign(p, p + sizeof(req));
    }
    stream.insert(stream.end(), data + 1, data + size);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) std::abort();
    const linger reset{1, 0};
    (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&t.addr), sizeof(t.addr)) != 0 && errno != EINPROGRESS) {
        std::abort();
    }
    std::size_t sent = 0;
    bool closed = false;
    for (int round = 0; round < 200 && !closed; ++round) {
        if (sent < stream.size()) {
            ssize_t n = ::send(fd, stream.data() + sent, stream.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) sent += static_cast<std::size_t>(n);
        }
        t.progress(4);
        closed = closed_by_peer(fd);
        if (sent == stream.size() && round > 8) break;
    }
    ::close(fd);  // a reset: the iface sees the connection fail
    t.progress(8);
    return 0;
}
