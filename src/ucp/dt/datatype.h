/**
 * Datatypes of the protocol layer: contiguous bytes, iov lists and generic types with
 * user pack/unpack callbacks (the C API's loom_datatype_t). A DtState walks one buffer
 * of one datatype: it packs consecutive pieces into transport buffers on the send
 * side and unpacks arriving pieces (at any offset) on the receive side.
 */
#pragma once

#include "ucs/sys/compiler.h"
#include "ucs/type/status.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace loom::ucp {

using Datatype = std::uint64_t;

inline constexpr Datatype kDtClassMask = 7;
inline constexpr Datatype kDtContig = 0;
inline constexpr Datatype kDtIov = 2;
inline constexpr Datatype kDtGeneric = 7;

/** A contiguous datatype of @p elem_size bytes per element. */
constexpr Datatype dt_make_contig(std::size_t elem_size) { return (Datatype{elem_size} << 3) | kDtContig; }

/** One entry of an iov datatype (layout of loom_dt_iov_t). */
struct DtIov {
    void* buffer;
    std::size_t length;
};

/** The callbacks of a generic datatype (layout of loom_generic_dt_ops_t). */
struct GenericDtOps {
    void* (*start_pack)(void* context, const void* buffer, std::size_t count);
    void* (*start_unpack)(void* context, void* buffer, std::size_t count);
    std::size_t (*packed_size)(void* state);
    std::size_t (*pack)(void* state, std::size_t offset, void* dest, std::size_t max_length);
    int (*unpack)(void* state, std::size_t offset, const void* src, std::size_t length);
    void (*finish)(void* state);
};

/** What a generic Datatype value points to (8-byte aligned, class bits or'ed in). */
struct GenericDt {
    GenericDtOps ops;
    void* context;
};

inline GenericDt* dt_generic(Datatype dt) { return reinterpret_cast<GenericDt*>(dt & ~kDtClassMask); }

/** Checks a datatype value from the application: invalid_param for an unknown class or a zero element size. */
Status dt_check(Datatype dt);

/**
 * Whether @p count elements of @p dt at @p buffer can be sent or received: the checks of
 * DtState's start (NULL buffers, iov entries, overflowing lengths), logged; generic
 * datatypes are their owner's to check. ok or invalid_param.
 */
Status dt_check_buffer(Datatype dt, void* buffer, std::size_t count);

/**
 * One buffer of one datatype being packed or unpacked. start() computes the length in
 * bytes; pack()/unpack() move bytes at a byte offset of the packed stream. Contiguous
 * data is the inline fast path; iov and generic are out of line.
 */
struct DtState {
    Datatype dt = 0;
    void* buffer = nullptr;
    std::size_t count = 0;
    std::size_t length = 0;       ///< packed bytes
    void* generic_state = nullptr;  ///< generic: from start_pack/start_unpack
    // iov: the entry and offset within it where the last access ended (sequential walks are O(1))
    std::size_t iov_index = 0;
    std::size_t iov_offset = 0;   ///< packed offset at the start of entry iov_index

    bool contig() const { return (dt & kDtClassMask) == kDtContig; }

    /** Starts a send of @p count elements at @p buf; ok or invalid_param. */
    LOOM_ALWAYS_INLINE Status start_pack(Datatype type, const void* buf, std::size_t cnt) {
        dt = type;
        buffer = const_cast<void*>(buf);
        count = cnt;
        generic_state = nullptr;
        if (LOOM_LIKELY(type == dt_make_contig(1))) {
            length = cnt;
            return LOOM_LIKELY(buf != nullptr || cnt == 0) ? Status::ok : null_buffer(true);
        }
        return start_slow(true);
    }

    /** Starts a receive into @p count elements at @p buf; ok or invalid_param. */
    LOOM_ALWAYS_INLINE Status start_unpack(Datatype type, void* buf, std::size_t cnt) {
        dt = type;
        buffer = buf;
        count = cnt;
        generic_state = nullptr;
        if (LOOM_LIKELY(type == dt_make_contig(1))) {
            length = cnt;
            return LOOM_LIKELY(buf != nullptr || cnt == 0) ? Status::ok : null_buffer(false);
        }
        return start_slow(false);
    }

    /** Copies up to @p max bytes from packed offset @p offset into @p dest; returns how many. */
    LOOM_ALWAYS_INLINE std::size_t pack(std::size_t offset, void* dest, std::size_t max) {
        if (LOOM_LIKELY(contig())) {
            std::size_t n = length - offset < max ? length - offset : max;
            // Zero bytes from a NULL buffer are a valid message; memcpy's arguments must not be NULL.
            if (LOOM_LIKELY(n != 0)) std::memcpy(dest, static_cast<const char*>(buffer) + offset, n);
            return n;
        }
        return pack_slow(offset, dest, max);
    }

    /**
     * Stores @p len bytes of the packed stream at @p offset. The caller never passes
     * more than length - offset bytes. Returns ok, or the generic unpack's error.
     */
    LOOM_ALWAYS_INLINE Status unpack(std::size_t offset, const void* src, std::size_t len) {
        if (LOOM_LIKELY(contig())) {
            if (LOOM_LIKELY(len != 0)) std::memcpy(static_cast<char*>(buffer) + offset, src, len);
            return Status::ok;
        }
        return unpack_slow(offset, src, len);
    }

    /** Releases what start_*() took (generic state). */
    LOOM_ALWAYS_INLINE void finish() {
        if (LOOM_UNLIKELY(generic_state != nullptr)) finish_slow();
    }

    /** A NULL buffer with a nonzero count: logged, invalid_param (the copy would fault). */
    LOOM_COLD static Status null_buffer(bool pack);

private:
    Status start_slow(bool pack);
    std::size_t pack_slow(std::size_t offset, void* dest, std::size_t max);
    Status unpack_slow(std::size_t offset, const void* src, std::size_t len);
    void finish_slow();
    /** iov: moves (iov_index, iov_offset) to the entry holding packed @p offset. */
    void iov_seek(std::size_t offset);
};

}  // namespace loom::ucp
