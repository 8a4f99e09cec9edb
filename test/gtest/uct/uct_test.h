/**
 * The uct test matrix: every suite derived from UctTest runs once per transport
 * resource present on this machine (self, shm, tcp devices, verbs devices in the
 * RDMA VM). LOOMTEST_UCT_TLS=self,tcp restricts the list.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/base/uct_worker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace loom::uct::test {

/** One transport on one device, as found by discovery. */
struct Resource {
    const Component* component;
    std::string md_name;
    TlResource tl;

    /** "tcp_lo" style name, valid as a gtest parameter name. */
    std::string name() const;
};

/** Prints a resource by name in gtest messages. */
inline void PrintTo(const Resource& resource, std::ostream* os) { *os << resource.name(); }

/** Every resource of every registered component (modules loaded first), filtered by LOOMTEST_UCT_TLS. */
std::vector<Resource> all_resources();

/** The resource called @p name (Resource::name()); throws when there is none (peer roles). */
Resource find_resource(const std::string& name);

/** gtest printer for parameter names. */
std::string resource_name(const testing::TestParamInfo<Resource>& info);

/** A worker, a memory domain and an iface: one side of a test. */
class Entity {
public:
    explicit Entity(const Resource& resource);
    ~Entity();

    /**
     * Creates an endpoint to @p peer: connect-to-iface where the transport has it, else
     * endpoint to endpoint (an endpoint on @p peer too, owned by @p peer, the two connected
     * to each other's addresses). @p on_first_use: EpParams::connect_on_first_use.
     */
    Ep* connect_to(Entity& peer, bool on_first_use = false);

    /** Destroys an endpoint created by connect_to. */
    void destroy_ep(Ep* ep);

    Worker& worker() { return worker_; }
    Md& md() { return *md_; }
    Iface& iface() { return *iface_; }
    const IfaceAttr& attr() const { return attr_; }
    const MdAttr& md_attr() const { return md_attr_; }
    const std::vector<std::uint8_t>& device_address() const { return dev_addr_; }
    const std::vector<std::uint8_t>& iface_address() const { return iface_addr_; }

private:
    Worker worker_;
    std::unique_ptr<Md> md_;
    std::unique_ptr<Iface> iface_;
    IfaceAttr attr_;
    MdAttr md_attr_;
    std::vector<std::uint8_t> dev_addr_;
    std::vector<std::uint8_t> iface_addr_;
    std::vector<Ep*> eps_;
};

/** Base fixture: a sender and a receiver entity on the parameter's resource. */
class UctTest : public testing::TestWithParam<Resource> {
protected:
    void SetUp() override;
    void TearDown() override;

    /** Progresses both sides once; returns the events handled. */
    unsigned progress();

    /** Progresses until @p done() or @p timeout; returns whether done() became true. */
    template <typename Pred>
    bool wait_for(Pred done, std::chrono::seconds timeout = std::chrono::seconds(20)) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            progress();
        }
        return true;
    }

    /** True when the iface supports all @p caps. */
    bool has(std::uint64_t caps) const { return (sender_->attr().cap_flags & caps) == caps; }

    std::unique_ptr<Entity> sender_;
    std::unique_ptr<Entity> receiver_;
    Ep* ep_ = nullptr;  ///< sender -> receiver
};

/** A completion that counts how often it fired. */
struct CountingCompletion : Completion {
    int fired = 0;
    CountingCompletion() : Completion{[](Completion* c) { ++static_cast<CountingCompletion*>(c)->fired; }, 1, Status::ok} {}
};

}  // namespace loom::uct::test
