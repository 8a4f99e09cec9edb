/**
 * LOOM_ASSERT: internal invariants, checked in debug/assertion builds and compiled
 * out otherwise (configure --enable-assertions). A failed assertion is fatal: it
 * logs the condition and a backtrace and aborts. Use Status returns, not
 * assertions, for anything a user or a peer can cause.
 */
#pragma once

#include "ucs/sys/build_options.h"
#include "ucs/debug/log.h"

#ifdef LOOM_ENABLE_ASSERT
#define LOOM_ASSERT(cond)                                                          \
    do {                                                                           \
        if (LOOM_UNLIKELY(!(cond))) {                                              \
            LOOM_FATAL("assertion failed: {}", #cond);                             \
        }                                                                          \
    } while (0)
#define LOOM_ASSERTV(cond, ...)                                                    \
    do {                                                                           \
        if (LOOM_UNLIKELY(!(cond))) {                                              \
            LOOM_FATAL("assertion failed: {}: {}", #cond, fmt::format(__VA_ARGS__)); \
        }                                                                          \
    } while (0)
#else
#define LOOM_ASSERT(cond)       do { (void)sizeof(cond); } while (0)
#define LOOM_ASSERTV(cond, ...) do { (void)sizeof(cond); } while (0)
#endif
