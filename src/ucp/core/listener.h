/**
 * Client/server connection establishment of the protocol layer: a server listens on a
 * socket address; a client's endpoint connects to it. The two exchange their worker
 * addresses over a short-lived TCP connection (the "bootstrap"), after which each side
 * has an ordinary endpoint made from the other's address, on whatever transports reach
 * it (shm on the same host, tcp, rc), and the bootstrap socket is closed.
 *
 * On the wire, each direction sends one frame: CmHdr then the sender's packed worker
 * address (request: client to server; accept or reject: server to client). Every frame
 * is checked (magic, version, type, length) before use.
 *
 * The server side runs from the worker's progress (accepting, reading requests, calling
 * the application's handler); the client's loom_ep_create waits for the server's answer,
 * progressing its own worker meanwhile, for at most kConnectTimeout (docs/protocols.md).
 */
#pragma once

#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::ucp {

class Worker;
class Listener;

/** Header of a bootstrap frame. */
struct CmHdr {
    char magic[4];  ///< "LMCS"
    std::uint8_t version;
    std::uint8_t type;  ///< CmFrameType
    std::uint16_t reserved;
    std::uint32_t length;  ///< address bytes that follow
};

enum CmFrameType : std::uint8_t { kCmRequest = 1, kCmAccept = 2, kCmReject = 3 };

inline constexpr std::uint8_t kCmVersion = 1;
/** Largest address a frame may carry: a garbage length is refused, not allocated. */
inline constexpr std::uint32_t kCmMaxAddress = 64 * 1024;

/** A client's request, read by a listener and handed to the application. */
struct ConnRequest {
    Listener* listener = nullptr;
    int fd = -1;
    sockaddr_storage client{};
    std::vector<std::uint8_t> address;  ///< the client's packed worker address
};

/** Called from progress for each complete request; the application answers it later. */
using ConnHandler = void (*)(ConnRequest* request, void* arg);

class Listener {
public:
    /**
     * Listens on @p addr (port 0: any free port) for @p worker. Returns no_resource,
     * busy (address in use), invalid_param or io_error with one log line.
     */
    static Result<std::unique_ptr<Listener>> create(Worker& worker, const sockaddr* addr, socklen_t addr_len,
                                                    ConnHandler handler, void* arg);
    /** Closes the socket; requests not answered are rejected. */
    ~Listener();
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;

    /** The address listened on (with the port chosen when 0 was asked for). */
    sockaddr_storage address() const;

    /** Accepts connections and reads requests; returns how many events it handled. */
    unsigned progress();

    /** Answers @p request with this worker's address, then frees it; the status of the send. */
    static Status accept(ConnRequest* request, const std::vector<std::uint8_t>& server_address);
    /** Refuses @p request and frees it. */
    static void reject(ConnRequest* request);

    int fd() const { return fd_; }
    Worker& worker() { return worker_; }

private:
    /** A connection whose request is still being read. */
    struct Incoming {
        int fd;
        sockaddr_storage peer;
        std::vector<std::uint8_t> buffer;
    };

    Listener(Worker& worker, int fd, ConnHandler handler, void* arg)
        : worker_(worker), fd_(fd), handler_(handler), arg_(arg) {}
    /** Reads from @p in; true when it is finished with (handed over or dropped). */
    bool read_request(Incoming& in);

    Worker& worker_;
    int fd_;
    ConnHandler handler_;
    void* arg_;
    std::vector<Incoming> incoming_;
    std::vector<ConnRequest*> handed_out_;  ///< requests the application has not answered yet
    friend void forget_request(ConnRequest* request);
};

/**
 * Client side: connects to the listener at @p addr, sends @p own_address and waits for
 * the answer (progressing @p worker), at most @p timeout_ms. The server's packed address
 * on acceptance; rejected, connection_refused, unreachable, timed_out or
 * malformed_packet otherwise, with one log line.
 */
Result<std::vector<std::uint8_t>> cm_client_exchange(Worker& worker, const sockaddr* addr, socklen_t addr_len,
                                                     const std::vector<std::uint8_t>& own_address,
                                                     int timeout_ms);

/** "host:port" of @p addr, for log lines. */
std::string sockaddr_text(const sockaddr* addr);

}  // namespace loom::ucp
