/**
 * self endpoints: a pointer to the target iface, in this process. Every operation
 * completes in its call (self_ep.cc): an active message runs the target's handler
 * directly, put/get are memcpy, atomics are CPU atomics on local memory.
 */
#pragma once

#include "uct/api/uct.h"

#include <cstddef>

namespace loom::uct::self {

class SelfIface;

/** Largest am_bcopy and put_bcopy payload (and am_zcopy payload): each is copied to the stack. */
inline constexpr std::size_t kMaxBcopy = 8192;
/** Largest am_short and put_short payload. */
inline constexpr std::size_t kMaxShort = 4096;
/** Largest am_zcopy header. */
inline constexpr std::size_t kMaxZcopyHeader = 128;

/** An endpoint: the iface its active messages run on. */
struct SelfEp : Ep {
    SelfIface* target;
};
static_assert(sizeof(SelfEp) == 16, "self endpoints stay two pointers");

/** Operations of the self iface (self_ep.cc). */
extern const IfaceOps kSelfOps;

}  // namespace loom::uct::self
