#include "ucp/dt/datatype.h"

#include "ucs/debug/log.h"

#include <algorithm>

namespace loom::ucp {

Status dt_check(Datatype dt) {
    switch (dt & kDtClassMask) {
    case kDtContig:
        if ((dt >> 3) == 0) {
            LOOM_LOG_ERROR("ucp: contiguous datatype with element size 0");
            return Status::invalid_param;
        }
        return Status::ok;
    case kDtIov: return Status::ok;
    case kDtGeneric:
        if (dt_generic(dt) == nullptr) {
            LOOM_LOG_ERROR("ucp: generic datatype without its operations");
            return Status::invalid_param;
        }
        return Status::ok;
    default: LOOM_LOG_ERROR("ucp: unknown datatype class {}", dt & kDtClassMask); return Status::invalid_param;
    }
}

Status dt_check_buffer(Datatype dt, void* buffer, std::size_t count) {
    if (Status s = dt_check(dt); s != Status::ok) return s;
    if ((dt & kDtClassMask) == kDtGeneric) return Status::ok;
    DtState st;
    return st.start_unpack(dt, buffer, count);  // contig and iov take nothing to release
}

Status DtState::null_buffer(bool packing) {
    LOOM_LOG_ERROR("ucp: {} with a NULL buffer and a nonzero count", packing ? "send" : "receive");
    return Status::invalid_param;
}

Status DtState::start_slow(bool packing) {
    generic_state = nullptr;
    iov_index = 0;
    iov_offset = 0;
    const char* what = packing ? "send" : "receive";
    switch (dt & kDtClassMask) {
    case kDtContig: {
        const std::size_t elem = dt >> 3;
        if (elem == 0 || (count != 0 && elem > SIZE_MAX / count)) {
            LOOM_LOG_ERROR("ucp: {} of {} elements of {} bytes: the length overflows", what, count, elem);
            return Status::invalid_param;
        }
        if (buffer == nullptr && count != 0) return null_buffer(packing);
        length = elem * count;
        return Status::ok;
    }
    case kDtIov: {
        const auto* iov = static_cast<const DtIov*>(buffer);
        if (iov == nullptr && count != 0) {
            LOOM_LOG_ERROR("ucp: {} of an iov of {} entries at NULL", what, count);
            return Status::invalid_param;
        }
        length = 0;
        for (std::size_t i = 0; i < count; ++i) {
            if (iov[i].buffer == nullptr && iov[i].length != 0) {
                LOOM_LOG_ERROR("ucp: {} of an iov whose entry {} is NULL with a length of {}", what, i,
                               iov[i].length);
                return Status::invalid_param;
            }
            if (iov[i].length > SIZE_MAX - length) {
                LOOM_LOG_ERROR("ucp: {} of an iov of {} entries whose lengths overflow size_t at entry {}",
                               what, count, i);
                return Status::invalid_param;
            }
            length += iov[i].length;
        }
        return Status::ok;
    }
    case kDtGeneric: {
        GenericDt* g = dt_generic(dt);
        if (g == nullptr) return Status::invalid_param;
        generic_state = packing ? g->ops.start_pack(g->context, buffer, count)
                                : g->ops.start_unpack(g->context, buffer, count);
        if (generic_state == nullptr) return Status::no_memory;
        length = g->ops.packed_size(generic_state);
        return Status::ok;
    }
    default: return Status::invalid_param;
    }
}

void DtState::iov_seek(std::size_t offset) {
    const auto* iov = static_cast<const DtIov*>(buffer);
    if (offset < iov_offset) {
        iov_index = 0;
        iov_offset = 0;
    }
    while (iov_index < count && offset >= iov_offset + iov[iov_index].length) {
        iov_offset += iov[iov_index].length;
        ++iov_index;
    }
}

std::size_t DtState::pack_slow(std::size_t offset, void* dest, std::size_t max) {
    max = std::min(max, length - offset);
    if ((dt & kDtClassMask) == kDtContig) {
        std::memcpy(dest, static_cast<const char*>(buffer) + offset, max);
        return max;
    }
    if ((dt & kDtClassMask) == kDtGeneric) {
        GenericDt* g = dt_generic(dt);
        return g->ops.pack(generic_state, offset, dest, max);
    }
    const auto* iov = static_cast<const DtIov*>(buffer);
    std::size_t done = 0;
    iov_seek(offset);
    while (done < max && iov_index < count) {
        const std::size_t in_entry = offset + done - iov_offset;
        const std::size_t n = std::min(max - done, iov[iov_index].length - in_entry);
        // An empty entry may have a NULL buffer: no memcpy from it (undefined even for 0 bytes).
        if (n != 0) std::memcpy(static_cast<char*>(dest) + done, static_cast<const char*>(iov[iov_index].buffer) + in_entry, n);
        done += n;
        if (in_entry + n == iov[iov_index].length) {
            iov_offset += iov[iov_index].length;
            ++iov_index;
        }
    }
    return done;
}

Status DtState::unpack_slow(std::size_t offset, const void* src, std::size_t len) {
    if ((dt & kDtClassMask) == kDtContig) {
        std::memcpy(static_cast<char*>(buffer) + offset, src, len);
        return Status::ok;
    }
    if ((dt & kDtClassMask) == kDtGeneric) {
        GenericDt* g = dt_generic(dt);
        int s = g->ops.unpack(generic_state, offset, src, len);
        return static_cast<Status>(s);
    }
    const auto* iov = static_cast<const DtIov*>(buffer);
    std::size_t done = 0;
    iov_seek(offset);
    while (done < len && iov_index < count) {
        const std::size_t in_entry = offset + done - iov_offset;
        const std::size_t n = std::min(len - done, iov[iov_index].length - in_entry);
        if (n != 0) std::memcpy(static_cast<char*>(iov[iov_index].buffer) + in_entry, static_cast<const char*>(src) + done, n);
        done += n;
        if (in_entry + n == iov[iov_index].length) {
            iov_offset += iov[iov_index].length;
            ++iov_index;
        }
    }
    return Status::ok;
}

void DtState::finish_slow() {
    GenericDt* g = dt_generic(dt);
    g->ops.finish(generic_state);
    generic_state = nullptr;
}

}  // namespace loom::ucp
