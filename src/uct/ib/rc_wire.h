/**
 * What the rc transport puts on the wire and into addresses. Every address starts
 * with a version byte; all multi-byte fields are little-endian (peers of one
 * architecture family; a big-endian port would add byte swaps here). Fields are laid out
 * at their natural alignment, so the structs need no packing (their sizes are asserted).
 */
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::uct::ib {

/** Version byte of every rc address and of the rdma_cm private data. */
inline constexpr std::uint8_t kRcAddrVersion = 2;

/** Device address flags. */
enum DevAddrFlags : std::uint8_t {
    kDevAddrIwarp = 1u << 0,     ///< iWARP transport
    kDevAddrEthernet = 1u << 1,  ///< Ethernet link layer (RoCE, iWARP)
    kDevAddrIpv6 = 1u << 2,      ///< ip holds an IPv6 address (else IPv4 in its first 4 bytes)
    kDevAddrHasIp = 1u << 3,     ///< ip is valid
};

/** The device address: how to reach the port (GID, LID) and its IP address for rdma_cm. */
struct RcDeviceAddress {
    std::uint8_t version;
    std::uint8_t flags;
    std::uint16_t lid;     ///< InfiniBand only
    std::uint8_t gid[16];  ///< the GID the iface uses (RoCE: chosen by LOOM_IB_GID_INDEX)
    std::uint8_t ip[16];
};
static_assert(sizeof(RcDeviceAddress) == 36);

/** The iface address: how endpoints are connected, and the rdma_cm port where that applies. */
struct RcIfaceAddress {
    std::uint8_t version;
    std::uint8_t cm;         ///< CmMode::verbs or CmMode::rdmacm
    std::uint16_t port;      ///< rdma_cm listening port (host order), 0 for verbs
    std::uint32_t seg_size;  ///< receive buffer payload size: peers must agree
};
static_assert(sizeof(RcIfaceAddress) == 8);

/** The endpoint address of a connect-to-ep endpoint. */
struct RcEpAddress {
    std::uint8_t version;
    std::uint8_t mtu;      ///< ibv_mtu of the sender's port
    std::uint16_t window;  ///< active messages the sender of this address can receive (peer's credits)
    std::uint32_t qpn;
    std::uint32_t psn;  ///< first packet sequence number of the sender's send queue
    std::uint32_t seg_size;
};
static_assert(sizeof(RcEpAddress) == 16);

/**
 * rdma_cm private data, in the connect request and in the accept. The flush word is a
 * remotely readable word of the sender's iface: on iWARP a flush reads it, because only
 * a read response proves that earlier writes were placed, and a read must name a valid
 * STag (siw fails a zero-length read of STag 0 now and then and resets the connection).
 */
struct RcCmPrivate {
    std::uint8_t version;
    std::uint8_t user_len;  ///< bytes of the user's private data after this struct (client/server)
    std::uint16_t window;
    std::uint32_t seg_size;
    std::uint64_t flush_addr;
    std::uint32_t flush_rkey;
    std::uint32_t reserved2;
};
static_assert(sizeof(RcCmPrivate) == 24);

/**
 * Most user private data in a request, an accept or a reject: what rdma_cm carries on
 * InfiniBand and RoCE in a connect request (56 bytes) minus Loom's header. iWARP
 * carries more, but one limit for all keeps applications portable.
 */
inline constexpr std::size_t kRcMaxUserPriv = 56 - sizeof(RcCmPrivate);

/** Flags of an active message header. */
enum AmHdrFlags : std::uint8_t {
    kAmHdrGrant = 1u << 0,        ///< credit grant only: no message for a handler
    kAmHdrAtomicReq = 1u << 1,    ///< an RcAtomicRequest for the target's CPU (LOOM_IB_ATOMICS=cpu)
    kAmHdrAtomicReply = 1u << 2,  ///< an RcAtomicReply
};

/**
 * Header of every send: 4 bytes, so a receive buffer posted 4 bytes before an 8-byte
 * boundary delivers the payload 8-byte aligned to the handler.
 */
struct RcAmHdr {
    std::uint8_t am_id;
    std::uint8_t flags;
    std::uint16_t credits;  ///< active-message credits returned to the receiver of this header
};
static_assert(sizeof(RcAmHdr) == 4);

/**
 * An atomic operation for the target's CPU (after an RcAmHdr with kAmHdrAtomicReq). It
 * uses a receive buffer and a credit like an active message; the target answers every
 * request, posted or fetching, so that the initiator knows when it has been applied
 * (flush and fence wait for the answers).
 */
struct RcAtomicRequest {
    std::uint8_t op;    ///< AtomicOp
    std::uint8_t size;  ///< 4 or 8
    std::uint16_t reserved;
    std::uint32_t rkey;
    std::uint64_t sn;  ///< the request's sequence number at the initiator, echoed in the reply
    std::uint64_t remote_addr;
    std::uint64_t value;    ///< the operand (cswap: the swap value)
    std::uint64_t compare;  ///< cswap only
};
static_assert(sizeof(RcAtomicRequest) == 40);

/** The answer to an RcAtomicRequest (after an RcAmHdr with kAmHdrAtomicReply). */
struct RcAtomicReply {
    std::uint64_t sn;
    std::uint64_t old;   ///< the previous value (4-byte operations: the low bytes)
    std::int8_t status;  ///< Status: ok, or why the target refused (access_denied, invalid_param)
    std::uint8_t reserved[7];
};
static_assert(sizeof(RcAtomicReply) == 24);

}  // namespace loom::uct::ib
