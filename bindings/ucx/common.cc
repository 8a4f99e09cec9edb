/**
 * What every library of the UCX compatibility layer shares (compiled into each): the
 * status translation both ways and logging.
 */
#include "compat.h"

#include <cstdarg>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace loom::ucx {

namespace {

/** LOOM_UCX_LOG: 0 quiet, 1 errors (default), 2 ("debug") errors and debug lines. */
int log_level() {
    static const int level = [] {
        const char* v = std::getenv("LOOM_UCX_LOG");
        if (v == nullptr || *v == '\0') return 1;
        if (std::strcmp(v, "debug") == 0) return 2;
        return std::atoi(v) > 0 ? 1 : 0;
    }();
    return level;
}

void vlog(const char* kind, const char* call, const char* fmt, va_list ap) {
    char msg[512];
    std::vsnprintf(msg, sizeof(msg), fmt, ap);
    std::fprintf(stderr, "[loom-ucx %d] %s%s: %s\n", static_cast<int>(::getpid()), kind, call, msg);
}

}  // namespace

void log_error(const char* call, const char* fmt, ...) {
    if (log_level() < 1) return;
    va_list ap;
    va_start(ap, fmt);
    vlog("", call, fmt, ap);
    va_end(ap);
}

void log_debug(const char* call, const char* fmt, ...) {
    if (log_level() < 2) return;
    va_list ap;
    va_start(ap, fmt);
    vlog("debug: ", call, fmt, ap);
    va_end(ap);
}

ucs_status_t to_ucs(loom_status_t status) noexcept {
    switch (status) {
    case LOOM_OK: return UCS_OK;
    case LOOM_INPROGRESS: return UCS_INPROGRESS;
    case LOOM_ERR_NO_RESOURCE: return UCS_ERR_NO_RESOURCE;
    case LOOM_ERR_NO_MEMORY: return UCS_ERR_NO_MEMORY;
    case LOOM_ERR_INVALID_PARAM: return UCS_ERR_INVALID_PARAM;
    case LOOM_ERR_IO_ERROR: return UCS_ERR_IO_ERROR;
    case LOOM_ERR_BUSY: return UCS_ERR_BUSY;
    case LOOM_ERR_CANCELED: return UCS_ERR_CANCELED;
    case LOOM_ERR_TIMED_OUT: return UCS_ERR_TIMED_OUT;
    case LOOM_ERR_UNSUPPORTED: return UCS_ERR_UNSUPPORTED;
    case LOOM_ERR_NO_ELEM: return UCS_ERR_NO_ELEM;
    case LOOM_ERR_ALREADY_EXISTS: return UCS_ERR_ALREADY_EXISTS;
    case LOOM_ERR_OUT_OF_RANGE: return UCS_ERR_OUT_OF_RANGE;
    case LOOM_ERR_EXCEEDS_LIMIT: return UCS_ERR_EXCEEDS_LIMIT;
    case LOOM_ERR_NO_DEVICE: return UCS_ERR_NO_DEVICE;
    case LOOM_ERR_INVALID_CONFIG: return UCS_ERR_INVALID_PARAM;  // UCX has no configuration status
    case LOOM_ERR_UNREACHABLE: return UCS_ERR_UNREACHABLE;
    case LOOM_ERR_CONNECTION_REFUSED: return UCS_ERR_UNREACHABLE;  // as UCX reports a refused connect
    case LOOM_ERR_CONNECTION_RESET: return UCS_ERR_CONNECTION_RESET;
    case LOOM_ERR_ENDPOINT_FAILURE: return UCS_ERR_CONNECTION_RESET;
    case LOOM_ERR_NOT_CONNECTED: return UCS_ERR_NOT_CONNECTED;
    case LOOM_ERR_REJECTED: return UCS_ERR_REJECTED;
    case LOOM_ERR_PEER_TIMEOUT: return UCS_ERR_ENDPOINT_TIMEOUT;
    case LOOM_ERR_INVALID_ADDRESS: return UCS_ERR_INVALID_ADDR;
    case LOOM_ERR_MESSAGE_TRUNCATED: return UCS_ERR_MESSAGE_TRUNCATED;
    case LOOM_ERR_MALFORMED_PACKET: return UCS_ERR_IO_ERROR;
    case LOOM_ERR_VERSION_MISMATCH: return UCS_ERR_UNSUPPORTED;
    case LOOM_ERR_NO_MESSAGE: return UCS_ERR_NO_MESSAGE;
    case LOOM_ERR_ACCESS_DENIED: return UCS_ERR_INVALID_PARAM;  // UCX has no access status
    case LOOM_ERR_LAST: break;
    }
    return UCS_ERR_IO_ERROR;
}

loom_status_t to_loom(ucs_status_t status) noexcept {
    switch (status) {
    case UCS_OK: return LOOM_OK;
    case UCS_INPROGRESS: return LOOM_INPROGRESS;
    case UCS_ERR_NO_MESSAGE: return LOOM_ERR_NO_MESSAGE;
    case UCS_ERR_NO_RESOURCE: return LOOM_ERR_NO_RESOURCE;
    case UCS_ERR_IO_ERROR: return LOOM_ERR_IO_ERROR;
    case UCS_ERR_NO_MEMORY: return LOOM_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM: return LOOM_ERR_INVALID_PARAM;
    case UCS_ERR_UNREACHABLE: return LOOM_ERR_UNREACHABLE;
    case UCS_ERR_INVALID_ADDR: return LOOM_ERR_INVALID_ADDRESS;
    case UCS_ERR_NOT_IMPLEMENTED: return LOOM_ERR_UNSUPPORTED;
    case UCS_ERR_MESSAGE_TRUNCATED: return LOOM_ERR_MESSAGE_TRUNCATED;
    case UCS_ERR_NO_ELEM: return LOOM_ERR_NO_ELEM;
    case UCS_ERR_NO_DEVICE: return LOOM_ERR_NO_DEVICE;
    case UCS_ERR_BUSY: return LOOM_ERR_BUSY;
    case UCS_ERR_CANCELED: return LOOM_ERR_CANCELED;
    case UCS_ERR_ALREADY_EXISTS: return LOOM_ERR_ALREADY_EXISTS;
    case UCS_ERR_OUT_OF_RANGE: return LOOM_ERR_OUT_OF_RANGE;
    case UCS_ERR_TIMED_OUT: return LOOM_ERR_TIMED_OUT;
    case UCS_ERR_EXCEEDS_LIMIT: return LOOM_ERR_EXCEEDS_LIMIT;
    case UCS_ERR_UNSUPPORTED: return LOOM_ERR_UNSUPPORTED;
    case UCS_ERR_REJECTED: return LOOM_ERR_REJECTED;
    case UCS_ERR_NOT_CONNECTED: return LOOM_ERR_NOT_CONNECTED;
    case UCS_ERR_CONNECTION_RESET: return LOOM_ERR_CONNECTION_RESET;
    case UCS_ERR_ENDPOINT_TIMEOUT: return LOOM_ERR_PEER_TIMEOUT;
    default: break;
    }
    return LOOM_ERR_IO_ERROR;
}

}  // namespace loom::ucx
