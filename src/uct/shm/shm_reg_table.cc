/**
 * The registration table published to peers (shm_reg_table.h): the owner's slots and the
 * peers' check of a mapped table.
 */
#include "uct/shm/shm_common.h"
#include "uct/shm/shm_log.h"  // first: inline code of the other headers logs to shm_log()

#include "uct/shm/shm_reg_table.h"

#include <new>

namespace loom::uct::shm {

namespace {

constexpr std::size_t kTableBytes = sizeof(RegTableHeader) + std::size_t{kSlotCount} * sizeof(RegSlot);

}  // namespace

const RegSlot* table_slot(const void* base, std::size_t size, std::uint32_t pid, std::uint64_t process_cookie,
                          std::uint64_t cookie, std::uint64_t slot, std::string* why) {
    const auto* header = static_cast<const RegTableHeader*>(base);
    if (size < sizeof(RegTableHeader) || header->magic != kRegTableMagic ||
        header->layout_version != kRegTableLayoutVersion || header->cookie != cookie) {
        *why = "the segment it names is not a registration table";
        return nullptr;
    }
    if (header->owner_pid != pid || header->process_cookie != process_cookie) {
        *why = "the registration table it names belongs to another process";
        return nullptr;
    }
    if (slot >= header->capacity || sizeof(RegTableHeader) + (slot + 1) * sizeof(RegSlot) > size) {
        *why = "its slot is outside the registration table";
        return nullptr;
    }
    return reinterpret_cast<const RegSlot*>(static_cast<const std::uint8_t*>(base) + sizeof(RegTableHeader)) +
           slot;
}

PublishedRegions::~PublishedRegions() {
    close();
}

bool PublishedRegions::owned_here() const {
    return segment_ != nullptr && owner_pid_ == static_cast<std::uint32_t>(this_process().pid);
}

RegSlot* PublishedRegions::slots() const {
    return reinterpret_cast<RegSlot*>(static_cast<std::uint8_t*>(segment_->address()) +
                                      sizeof(RegTableHeader));
}

bool PublishedRegions::create(SegmentMode mode) {
    const ProcessIdentity self = this_process();
    if (segment_ != nullptr && owner_pid_ != static_cast<std::uint32_t>(self.pid)) {
        // A child after fork: the mapping is shared with the parent, which still publishes in it.
        // Leave it to the parent (releasing would remove a posix name it still uses).
        (void)segment_.release();
        used_ = 0;
        free_.clear();
    }
    if (segment_ != nullptr) return true;
    if (create_failed_) return false;
    auto kind = resolve_segment_kind(mode);
    auto segment = kind ? Segment::create(kTableBytes, *kind) : Result<Segment>(kind.status());
    if (!segment) {
        create_failed_ = true;
        LOOM_LOG_WARN(
            "no registration table for peers ({}): they reach registered memory by emulated put/get",
            to_string(segment.status()));
        return false;
    }
    segment_ = std::make_unique<Segment>(std::move(*segment));
    owner_pid_ = static_cast<std::uint32_t>(self.pid);
    // The segment is zero-filled: every slot is free. The header goes in before any key names it.
    auto* header = static_cast<RegTableHeader*>(segment_->address());
    header->magic = kRegTableMagic;
    header->layout_version = kRegTableLayoutVersion;
    header->capacity = kSlotCount;
    header->cookie = segment_->id().cookie;
    header->process_cookie = self.cookie;
    header->owner_pid = owner_pid_;
    return true;
}

std::uint64_t PublishedRegions::publish(std::uint64_t nonce, const void* address, std::size_t length,
                                        unsigned access, SegmentMode mode) {
    const std::uint64_t unpublished = (nonce << kSlotBits) | kNoSlot;
    if (!create(mode)) return unpublished;
    std::uint32_t index;
    if (!free_.empty()) {
        index = free_.back();
        free_.pop_back();
    } else if (used_ < kSlotCount) {
        index = used_++;
    } else {
        if (!full_logged_) {
            full_logged_ = true;
            LOOM_LOG_WARN(
                "more than {} memory registrations at once: peers reach the others by emulated put/get",
                kSlotCount);
        }
        return unpublished;
    }
    const std::uint64_t key_id = (nonce << kSlotBits) | index;
    RegSlot& slot = slots()[index];
    // The slot is free (id 0): readers holding an older id already fail. The fields are
    // release stores, so a reader that sees one of them also sees the clear before it.
    slot.address.store(reinterpret_cast<std::uintptr_t>(address), std::memory_order_release);
    slot.length.store(length, std::memory_order_release);
    slot.access.store(access, std::memory_order_release);
    slot.key_id.store(key_id, std::memory_order_release);
    return key_id;
}

void PublishedRegions::withdraw(std::uint64_t key_id) {
    const std::uint64_t index = slot_of(key_id);
    if (index >= used_ || !owned_here()) return;  // never published, or the table was closed or inherited
    RegSlot& slot = slots()[index];
    if (slot.key_id.load(std::memory_order_relaxed) != key_id) return;
    slot.key_id.store(0, std::memory_order_relaxed);  // publish()'s release stores order it for readers
    free_.push_back(static_cast<std::uint32_t>(index));
}

const SegmentId* PublishedRegions::segment_id() const {
    return owned_here() ? &segment_->id() : nullptr;
}

void PublishedRegions::close() {
    if (segment_ == nullptr) return;
    if (owned_here()) {
        for (std::uint32_t i = 0; i < used_; ++i) slots()[i].key_id.store(0, std::memory_order_release);
        segment_.reset();
    } else {
        (void)segment_.release();  // a parent's table inherited by fork: not ours to remove
    }
    used_ = 0;
    free_.clear();
    create_failed_ = false;
    full_logged_ = false;
}

}  // namespace loom::uct::shm
