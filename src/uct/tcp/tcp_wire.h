/**
 * tcp wire formats: addresses, remote keys, the connection handshake and the frames
 * that carry active messages and the emulated RMA operations.
 *
 * Everything is little-endian on the wire (written with memcpy from host order: Loom
 * runs on little-endian x86-64 and aarch64, checked below). Every packed blob that
 * leaves the process starts with a version byte; a peer's blob is validated field by
 * field before it is used.
 *
 * Frames (after the handshake):
 *
 *     [ FrameHeader 8 bytes ][ payload: FrameHeader::length bytes ]
 *
 * magic catches a stream that lost its framing; type says what follows; arg is the am
 * id (am), the atomic op (atomic request) or the status (replies); length is checked
 * against the per-type limit before anything is read into memory. A frame of the wrong
 * direction (a reply arriving at a target, a request at an initiator) is malformed.
 */
#pragma once

#include "uct/api/uct_types.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace loom::uct::tcp {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tcp wire formats are written in host order");

/** Version of the address, remote key and handshake formats. */
inline constexpr std::uint8_t kWireVersion = 2;

/** Frame magic: a desynchronized stream is detected at the next header. */
inline constexpr std::uint8_t kFrameMagic = 0xa7;

/** Frame types. Requests go from the connecting side (an endpoint) to the accepting side. */
enum class FrameType : std::uint8_t {
    am = 1,          ///< active message: arg = am id, payload = the message
    put = 2,         ///< PutHeader + data; flags kFlagAckReq asks for a put_ack
    get_req = 3,     ///< RmaHeader; answered by get_rep
    atomic_req = 4,  ///< AtomicHeader; arg = AtomicOp; answered by atomic_rep when kFlagFetch
    flush_req = 5,   ///< no payload; answered by flush_ack after every earlier request was executed
    // replies, from the accepting side back to the endpoint, in request order
    put_ack = 16,     ///< arg = status
    get_rep = 17,     ///< arg = status, payload = the data (none on error)
    atomic_rep = 18,  ///< arg = status, payload = the previous value (8 bytes)
    flush_ack = 19,   ///< arg = status
    nack = 20,        ///< arg = status, flags = the FrameType of a posted request that was rejected
};

/** FrameHeader::flags bits. */
enum FrameFlags : std::uint8_t {
    kFlagAckReq = 1u << 0,  ///< put: acknowledge with put_ack
    kFlagFetch = 1u << 1,   ///< atomic: answer with atomic_rep
    kFlag32 = 1u << 2,      ///< atomic: 32-bit operand (else 64-bit)
};

struct FrameHeader {
    std::uint8_t magic;
    FrameType type;
    std::uint8_t arg;
    std::uint8_t flags;
    std::uint32_t length;  ///< payload bytes after this header
};
static_assert(sizeof(FrameHeader) == 8);

/** Which memory a remote access names: the target validates all of it against its key table. */
struct RmaHeader {
    std::uint64_t remote_addr;
    std::uint64_t cookie;   ///< the key's secret: a forged or stale key does not match
    std::uint32_t key_id;   ///< slot in the target md's key table
    std::uint32_t length;   ///< get_req: bytes to read; put: unused (the frame length says)
};
static_assert(sizeof(RmaHeader) == 24);

struct AtomicHeader {
    RmaHeader rma;
    std::uint64_t value;    ///< operand (cswap: the new value)
    std::uint64_t compare;  ///< cswap only
};
static_assert(sizeof(AtomicHeader) == 40);

/** Status travels in one byte: Loom status codes fit in int8. */
inline std::uint8_t status_to_wire(Status s) { return static_cast<std::uint8_t>(static_cast<std::int8_t>(s)); }
inline Status status_from_wire(std::uint8_t b) { return static_cast<Status>(static_cast<std::int8_t>(b)); }

// --- handshake ---------------------------------------------------------------------------

inline constexpr std::uint32_t kHandshakeMagic = 0x4c4d5443;  // "CTML" little-endian: Loom tcp

/** First bytes on a new connection, from the connecting side. */
struct ConnRequest {
    std::uint32_t magic;
    std::uint8_t version;
    std::uint8_t reserved[3];
    std::uint64_t target_cookie;  ///< the cookie of the iface address connected to
    std::uint64_t source_cookie;  ///< the connecting iface's cookie, for logs
    std::uint32_t source_ip;      ///< the connecting iface's IPv4 address (network order), for logs
    std::uint16_t source_port;    ///< the connecting iface's listening port (network order), for logs
    std::uint16_t reserved2;
};
static_assert(sizeof(ConnRequest) == 32);

/** The accepting side's answer; a status other than ok is followed by a close. */
struct ConnReply {
    std::uint32_t magic;
    std::uint8_t version;
    std::uint8_t status;  ///< status_to_wire(): ok, version_mismatch or rejected
    std::uint8_t reserved[2];
    std::uint64_t source_cookie;  ///< echoes ConnRequest::source_cookie
};
static_assert(sizeof(ConnReply) == 16);

// --- addresses -------------------------------------------------------------------------

inline constexpr std::uint8_t kFamilyInet = 4;

/**
 * Device address: which host, as an IPv4 address, and which network stack (boot and
 * network namespace): 127.0.0.1 means a different machine in another namespace, so two
 * loopback devices reach each other only when their stacks are the same.
 */
struct [[gnu::packed]] DeviceAddress {
    std::uint8_t version;
    std::uint8_t family;     ///< kFamilyInet
    std::uint32_t ip;        ///< network order
    std::uint64_t net_stack; ///< net_stack_id() of the sender
};
static_assert(sizeof(DeviceAddress) == 14);

/** Iface address: which listening socket on that host, and a random cookie naming the iface. */
struct [[gnu::packed]] IfaceAddress {
    std::uint8_t version;
    std::uint16_t port;      ///< network order
    std::uint64_t cookie;
};
static_assert(sizeof(IfaceAddress) == 11);

}  // namespace loom::uct::tcp
