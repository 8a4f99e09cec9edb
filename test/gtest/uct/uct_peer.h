/**
 * Helpers for two-process transport tests: one side's entity with a registered
 * buffer, and the blob both sides exchange through test::ForkedPeer's channel (device
 * and iface addresses, the endpoint address for connect-to-ep transports, the packed
 * remote key and the buffer's address).
 */
#pragma once

#include "uct_test.h"

#include "common/forked_peer.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::uct::test {

/** What one side tells the other. */
struct PeerInfo {
    std::vector<std::uint8_t> dev_addr;
    std::vector<std::uint8_t> iface_addr;
    std::vector<std::uint8_t> ep_addr;  ///< connect-to-ep transports: the endpoint made for the peer
    std::vector<std::uint8_t> rkey;  ///< packed key of the side's buffer
    std::uint64_t buffer = 0;        ///< the buffer's address in that process
    std::uint64_t buffer_size = 0;

    std::vector<std::uint8_t> pack() const;
    /** Parses pack()'s output; false on a truncated or malformed blob. */
    bool unpack(const std::vector<std::uint8_t>& blob);
};

/** One side of a two-process test. Every wait is bounded. */
class ProcSide {
public:
    /**
     * Opens the entity and a buffer of @p buffer_size bytes with @p access: from
     * Md::mem_alloc where the md offers it (as a protocol layer allocates memory for
     * remote atomics), else registered with Md::mem_reg.
     */
    ProcSide(const Resource& resource, std::size_t buffer_size, unsigned access = kAccessAll);
    ~ProcSide();
    ProcSide(const ProcSide&) = delete;
    ProcSide& operator=(const ProcSide&) = delete;

    /** This side's addresses, key and buffer. */
    PeerInfo info() const;

    /** True when the transport connects endpoint to endpoint only (see exchange()). */
    bool connects_to_ep() const;

    /**
     * Sends info() over @p ch and receives the peer's; false when the channel fails. On a
     * transport that connects endpoint to endpoint only, both sides must call it: it creates
     * this side's endpoint first (its address travels in the blob) and connects it to the
     * peer's, so a side that never calls connect() still has the endpoint the peer's needs.
     */
    bool exchange(loom::test::ForkedPeer::Channel& ch);

    /**
     * Creates the endpoint to the peer (connect-to-iface) or adopts the one exchange()
     * made (connect-to-ep), sets the error callback, and unpacks the peer's key.
     */
    Status connect(void (*on_error)(void*, Ep*, Status) = nullptr, void* arg = nullptr);

    /** Progresses until @p done() or @p timeout; returns done(). */
    template <typename Pred>
    bool progress_until(Pred done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            entity_->worker().progress();
        }
        return true;
    }

    /** Retries @p op (returning Status or ssize_t) while it says no_resource, progressing; returns its result. */
    template <typename Op>
    auto retry(Op op, std::chrono::milliseconds timeout = std::chrono::seconds(10)) -> decltype(op()) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            auto result = op();
            if (static_cast<int>(result) != static_cast<int>(Status::no_resource)) return result;
            if (std::chrono::steady_clock::now() > deadline) return result;
            entity_->worker().progress();
        }
    }

    /** Waits for an operation's result: ok at once, in_progress until @p comp fired; returns the final status. */
    Status finish(Status status, CountingCompletion& comp);

    Entity& entity() { return *entity_; }
    Ep* ep() const { return ep_; }
    std::uint8_t* buffer() { return buffer_; }
    std::size_t buffer_size() const { return buffer_size_; }
    MemH memh() const { return memh_; }
    const PeerInfo& peer() const { return peer_; }
    std::uint64_t peer_rkey() const { return peer_rkey_.rkey; }
    /** Address @p offset bytes into the peer's buffer. */
    std::uint64_t peer_addr(std::size_t offset) const { return peer_.buffer + offset; }

    /** Destroys the endpoint now (before the entity). */
    void destroy_ep();

private:
    std::unique_ptr<Entity> entity_;
    std::vector<std::uint8_t> owned_;  ///< the buffer when the md cannot allocate
    std::uint8_t* buffer_ = nullptr;
    std::size_t buffer_size_ = 0;
    bool allocated_ = false;  ///< buffer_ came from Md::mem_alloc
    MemH memh_ = kMemHNull;
    PeerInfo peer_;
    Rkey peer_rkey_;
    bool have_rkey_ = false;
    Ep* ep_ = nullptr;
    void (*on_error_)(void*, Ep*, Status) = nullptr;  ///< the user's, called by forward_error
    void* on_error_arg_ = nullptr;

    static void forward_error(void* arg, Ep* ep, Status status);
    Status create_ep_to_peer();
};

/** Deterministic test bytes. */
std::vector<std::uint8_t> test_pattern(std::size_t length, std::uint32_t seed);

}  // namespace loom::uct::test
