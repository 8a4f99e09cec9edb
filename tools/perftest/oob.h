/**
 * The out-of-band channel between the two processes of a loom_perftest run: it carries
 * the test parameters, the transports' or workers' addresses, remote keys, and the
 * barriers before and after the measurement. Control path only: no runner calls it
 * inside a measured loop.
 *
 * Implementations: TcpOob (a server and a client started by hand, tcp_oob.cc) and the
 * MPI one made by join_mpi_job() (both processes started by mpirun, mpi_oob.cc).
 * Exceptions: none; every call returns a Status and logs one line on failure.
 */
#pragma once

#include "ucs/type/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom::perftest {

class Oob {
public:
    Oob() = default;
    virtual ~Oob() = default;
    Oob(const Oob&) = delete;
    Oob& operator=(const Oob&) = delete;

    /** Sends @p blob (any size up to 64 MiB, empty included); the peer takes it with recv_blob(). */
    virtual Status send_blob(const std::vector<std::uint8_t>& blob) = 0;

    /** Receives the peer's next send_blob(). */
    virtual Status recv_blob(std::vector<std::uint8_t>& blob) = 0;

    /** Both sides call it: sends @p mine and receives the peer's into @p peer. */
    virtual Status exchange(const std::vector<std::uint8_t>& mine, std::vector<std::uint8_t>& peer) = 0;

    /** Both sides call it; returns when both arrived. */
    virtual Status barrier() = 0;

    /**
     * The run failed in this process (its reason is printed): make the peer stop too
     * rather than wait for it. TCP closes the connection, which the peer sees; MPI aborts
     * the job, which ends both processes (it does not return).
     */
    virtual void fail() noexcept = 0;
};

/** The out-of-band channel of a server and a client started by hand: one TCP connection. */
class TcpOob final : public Oob {
public:
    TcpOob() = default;
    ~TcpOob() override;

    /** Server: listens on @p port and accepts one client. */
    Status accept_one(std::uint16_t port);

    /** Client: connects to @p host:@p port, retrying for a few seconds while the server starts. */
    Status connect_to(const std::string& host, std::uint16_t port);

    Status send_blob(const std::vector<std::uint8_t>& blob) override;
    Status recv_blob(std::vector<std::uint8_t>& blob) override;
    /** Sends first: the blobs exchanged are small enough for the socket buffers. */
    Status exchange(const std::vector<std::uint8_t>& mine, std::vector<std::uint8_t>& peer) override;
    Status barrier() override;
    void fail() noexcept override;

private:
    Status send(const void* data, std::size_t length);
    Status recv(void* data, std::size_t length);

    int fd_ = -1;
};

}  // namespace loom::perftest
