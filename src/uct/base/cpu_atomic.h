/**
 * The one CPU implementation of the transports' atomic operations. Every transport
 * whose target applies an atomic itself (shm on mapped memory and in its progress, tcp
 * in its progress, rc without NIC atomics in its progress) calls this, so atomics that
 * reach one word by different transports are atomic with respect to each other: they are
 * all the same sequentially consistent CPU instructions.
 */
#pragma once

#include "uct/api/uct_types.h"

namespace loom::uct {

/**
 * Applies @p op at @p addr (naturally aligned) and returns the previous value; for cswap,
 * @p value is the swap operand and @p compare the value compared with.
 */
template <typename T>
T cpu_atomic(AtomicOp op, T* addr, T value, T compare = 0) {
    switch (op) {
        case AtomicOp::add:
            return __atomic_fetch_add(addr, value, __ATOMIC_SEQ_CST);
        case AtomicOp::and_:
            return __atomic_fetch_and(addr, value, __ATOMIC_SEQ_CST);
        case AtomicOp::or_:
            return __atomic_fetch_or(addr, value, __ATOMIC_SEQ_CST);
        case AtomicOp::xor_:
            return __atomic_fetch_xor(addr, value, __ATOMIC_SEQ_CST);
        case AtomicOp::swap:
            return __atomic_exchange_n(addr, value, __ATOMIC_SEQ_CST);
        case AtomicOp::cswap:
            __atomic_compare_exchange_n(addr, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            return compare;  // the previous value, whether or not it was swapped
    }
    return 0;
}

}  // namespace loom::uct
