/**
 * Member-pointer helpers shared by the intrusive containers: going from an embedded
 * link back to the element that holds it (container_of) without macros.
 *
 * A container names its link with a pointer-to-member template argument, e.g.
 * `List<Request, &Request::link>`, so the compiler checks that the link really is a
 * member of the element type and no offsetof() string is needed at the use site.
 *
 * The member offset is read from the member pointer's representation. Every ABI Loom
 * builds for (the Itanium C++ ABI used by GCC and Clang on x86-64 and aarch64)
 * represents a data member pointer as the member's byte offset, which is checked
 * below by size and in assertion builds on every conversion. The value is a template
 * constant, so at -O2 the conversion folds to a single subtraction.
 */
#pragma once

#include "ucs/debug/assert.h"
#include "ucs/sys/compiler.h"

#include <bit>
#include <cstddef>
#include <cstdint>

namespace loom::ucs {

/** Splits a data member pointer constant into its class and member types. */
template <auto Member>
struct MemberTraits;

template <typename T, typename M, M T::*Member>
struct MemberTraits<Member> {
    using Class = T;
    using Type = M;
};

/** Byte offset of @p Member inside its class (see the file comment for the ABI note). */
template <auto Member>
LOOM_ALWAYS_INLINE std::ptrdiff_t member_offset() noexcept {
    static_assert(sizeof(Member) == sizeof(std::ptrdiff_t),
                  "data member pointers are expected to be plain offsets (Itanium C++ ABI)");
    return std::bit_cast<std::ptrdiff_t>(Member);
}

/**
 * The object whose @p Member is @p member. @p member must really be that member of a
 * live object; assertion builds check that the round trip gives the same address.
 */
template <auto Member>
LOOM_ALWAYS_INLINE typename MemberTraits<Member>::Class& container_of(
    typename MemberTraits<Member>::Type& member) noexcept {
    using Class = typename MemberTraits<Member>::Class;
    auto* bytes = reinterpret_cast<char*>(&member) - member_offset<Member>();
    auto& object = *reinterpret_cast<Class*>(bytes);
    LOOM_ASSERT(&(object.*Member) == &member);
    return object;
}

/** Const variant of container_of(). */
template <auto Member>
LOOM_ALWAYS_INLINE const typename MemberTraits<Member>::Class& container_of(
    const typename MemberTraits<Member>::Type& member) noexcept {
    return container_of<Member>(const_cast<typename MemberTraits<Member>::Type&>(member));
}

}  // namespace loom::ucs
