/**
 * A registration backend for the registration cache tests: it records every
 * registration, can fail on demand, and "pins" the registered bytes by keeping a
 * checksum of them, so a test can see what a NIC would send from a stale
 * registration: the pages as they were when they were registered.
 */
#pragma once

#include "ucs/memory/rcache.h"
#include "ucs/type/status.h"

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace loom::ucs::rcache_test {

/** What a region's private area holds. */
struct BackendPrivate {
    std::uint64_t id;        ///< which registration
    std::uint64_t checksum;  ///< of the registered bytes at registration time (when snapshots are on)
};

/** One registration seen by the backend. */
struct BackendRecord {
    std::uintptr_t start;
    std::uintptr_t end;
    unsigned access;
    std::uint64_t id;
    bool live;
};

/** Checksum of [start, end); reads freed or redzone bytes on purpose, like a NIC. */
__attribute__((no_sanitize_address)) inline std::uint64_t checksum_of(std::uintptr_t start, std::uintptr_t end) {
    std::uint64_t hash = 1469598103934665603ull;
    for (std::uintptr_t p = start; p < end; p += sizeof(std::uint64_t)) {
        hash = (hash ^ *reinterpret_cast<const volatile std::uint64_t*>(p)) * 1099511628211ull;
    }
    return hash;
}

class TestBackend {
public:
    /** Returns a status for a registration request; ok lets it through. */
    using FailFn = std::function<Status(std::uintptr_t start, std::uintptr_t end, unsigned access)>;

    // Room reserved up front, so registering allocates nothing (tests that move the
    // program break must not let malloc grow the heap).
    TestBackend() { records_.reserve(1024); }

    /** Parameters for a cache on this backend, memory events from @p mode, no limits. */
    RcacheParams params(MemEventsMode mode = MemEventsMode::user) {
        RcacheParams p;
        p.name = "test";
        p.ops.register_mem = &TestBackend::register_mem;
        p.ops.deregister_mem = &TestBackend::deregister_mem;
        p.context = this;
        p.private_size = sizeof(BackendPrivate);
        p.limits = RcacheConfig{SIZE_MAX, SIZE_MAX};
        p.events = mode;
        return p;
    }

    /** Checksums the registered bytes at registration (off by default: it touches every page). */
    void set_snapshot(bool on) {
        std::lock_guard guard(lock_);
        snapshot_ = on;
    }

    void set_fail(FailFn fail) {
        std::lock_guard guard(lock_);
        fail_ = std::move(fail);
    }

    /** Fails registrations with no_memory while @p count registrations are live, like a full device. */
    void set_capacity(std::size_t count) {
        std::lock_guard guard(lock_);
        capacity_ = count;
    }

    /** Called inside register_mem, after the registration is recorded (for tests of races). */
    void set_on_register(std::function<void(std::uintptr_t, std::uintptr_t)> hook) {
        std::lock_guard guard(lock_);
        on_register_ = std::move(hook);
    }

    std::vector<BackendRecord> records() const {
        std::lock_guard guard(lock_);
        return records_;
    }

    std::size_t registrations() const {
        std::lock_guard guard(lock_);
        return records_.size();
    }

    std::size_t live() const {
        std::lock_guard guard(lock_);
        std::size_t n = 0;
        for (const BackendRecord& r : records_) n += r.live ? 1 : 0;
        return n;
    }

    bool is_live(std::uint64_t id) const {
        std::lock_guard guard(lock_);
        return id >= 1 && id <= records_.size() && records_[id - 1].live;
    }

    /** Problems seen: deregistering something twice or with the wrong bounds. */
    std::vector<std::string> errors() const {
        std::lock_guard guard(lock_);
        return errors_;
    }

    static std::uint64_t id_of(const RcacheRegion* region) {
        return static_cast<const BackendPrivate*>(region->private_data())->id;
    }

    /**
     * What a NIC would send from @p region: true when the registered bytes are still the
     * bytes at the region's addresses (always true without snapshots).
     */
    static bool sends_current_data(const RcacheRegion* region) {
        const auto* priv = static_cast<const BackendPrivate*>(region->private_data());
        return priv->checksum == 0 || priv->checksum == checksum_of(region->start(), region->end());
    }

private:
    static Status register_mem(void* context, void* addr, std::size_t length, unsigned access,
                               void* region_private) noexcept {
        auto* self = static_cast<TestBackend*>(context);
        const auto start = reinterpret_cast<std::uintptr_t>(addr);
        std::function<void(std::uintptr_t, std::uintptr_t)> on_register;
        {
            std::lock_guard guard(self->lock_);
            std::size_t live = 0;
            for (const BackendRecord& r : self->records_) live += r.live ? 1 : 0;
            if (live >= self->capacity_) return Status::no_memory;
            if (self->fail_) {
                Status status = self->fail_(start, start + length, access);
                if (status != Status::ok) return status;
            }
            auto* priv = static_cast<BackendPrivate*>(region_private);
            if (priv->id != 0 || priv->checksum != 0) self->errors_.push_back("private area not zeroed");
            self->records_.push_back({start, start + length, access, self->records_.size() + 1, true});
            priv->id = self->records_.size();
            priv->checksum = self->snapshot_ ? checksum_of(start, start + length) : 0;
            on_register = self->on_register_;
        }
        if (on_register) on_register(start, start + length);
        return Status::ok;
    }

    static void deregister_mem(void* context, void* addr, std::size_t length, void* region_private) noexcept {
        auto* self = static_cast<TestBackend*>(context);
        const auto start = reinterpret_cast<std::uintptr_t>(addr);
        const auto* priv = static_cast<const BackendPrivate*>(region_private);
        std::lock_guard guard(self->lock_);
        if (priv->id == 0 || priv->id > self->records_.size()) {
            self->errors_.push_back("deregistering an unknown registration");
            return;
        }
        BackendRecord& record = self->records_[priv->id - 1];
        if (!record.live) self->errors_.push_back("deregistering twice: id " + std::to_string(record.id));
        if (record.start != start || record.end != start + length) {
            self->errors_.push_back("deregistering with other bounds: id " + std::to_string(record.id));
        }
        record.live = false;
    }

    mutable std::mutex lock_;
    std::vector<BackendRecord> records_;
    std::vector<std::string> errors_;
    FailFn fail_;
    std::function<void(std::uintptr_t, std::uintptr_t)> on_register_;
    std::size_t capacity_ = SIZE_MAX;
    bool snapshot_ = false;
};

}  // namespace loom::ucs::rcache_test
