/**
 * Helpers of the shm-specific tests: one side of a conversation (worker, md and iface
 * with configuration overrides), address blobs, and a look at /dev/shm.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/base/uct_worker.h"

#include <chrono>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom::uct::shmtest {

/** The shm component (throws when it is not registered). */
const Component& shm_component();

/** A worker, the shm md and an shm iface opened with @p overrides; endpoints it creates die with it. */
class ShmSide {
public:
    /** Opens everything; throws std::runtime_error with the status on failure. */
    explicit ShmSide(const ucs::config::Overrides& overrides);

    /** As above, with the overrides written inline: ShmSide side({{"SHM_FIFO_SIZE", "2k"}}). */
    ShmSide(std::initializer_list<std::pair<std::string, std::string>> overrides = {})
        : ShmSide(ucs::config::Overrides(overrides.begin(), overrides.end())) {}
    ~ShmSide();
    ShmSide(const ShmSide&) = delete;
    ShmSide& operator=(const ShmSide&) = delete;

    Worker& worker() { return worker_; }
    Md& md() { return *md_; }
    Iface& iface() { return *iface_; }
    const IfaceAttr& attr() const { return attr_; }
    const MdAttr& md_attr() const { return md_attr_; }

    /** Device address followed by iface address, as sent to a peer. */
    std::vector<std::uint8_t> address() const;

    /** Creates an endpoint to the peer whose address() is @p address; returns the status on failure. */
    Result<Ep*> connect(const std::vector<std::uint8_t>& address,
                        void (*on_error)(void*, Ep*, Status) = nullptr, void* on_error_arg = nullptr);

    /** As connect(), throwing on failure. */
    Ep* connect_or_throw(const std::vector<std::uint8_t>& address);

    /** Destroys an endpoint created by connect(). */
    void destroy(Ep* ep);

    /** One round of progress. */
    unsigned progress() { return worker_.progress(); }

    /** Progresses until @p done() or @p timeout; returns done(). */
    template <typename Pred>
    bool progress_until(Pred done, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            progress();
        }
        return true;
    }

    /** Registers @p length bytes at @p address and packs the key; the registration lives with the side. */
    std::vector<std::uint8_t> register_and_pack(void* address, std::size_t length, unsigned access);

    /** Packs the key of @p memh. */
    std::vector<std::uint8_t> pack(MemH memh);

private:
    Worker worker_;
    std::unique_ptr<Md> md_;
    std::unique_ptr<Iface> iface_;
    IfaceAttr attr_;
    MdAttr md_attr_;
    std::vector<Ep*> eps_;
    std::vector<MemH> regs_;
};

/** Splits an address() blob and creates nothing: is_reachable() of @p side for it. */
bool reachable(ShmSide& side, const std::vector<std::uint8_t>& address, std::string* reason);

/** Names in /dev/shm that start with "loom-". */
std::vector<std::string> loom_shm_names();

/** A deterministic byte pattern. */
std::vector<std::uint8_t> pattern(std::size_t length, unsigned seed);

/** Flushes @p ep, progressing @p side until done; returns the final status. */
Status flush_ep(ShmSide& side, Ep* ep);

/** Waits for an operation that returned @p status on @p comp (fired counts callbacks). */
struct TestCompletion : Completion {
    int fired = 0;
    TestCompletion()
        : Completion{[](Completion* c) { ++static_cast<TestCompletion*>(c)->fired; }, 1, Status::ok} {}
};

}  // namespace loom::uct::shmtest
