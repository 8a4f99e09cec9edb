/**
 * @file loom/ucp_rma.h
 * Memory and RMA: mappings, remote keys, put, get, atomics and fence.
 *
 * One-sided access to a peer's memory: the owner maps it (loom_mem_map), packs a remote
 * key (loom_rkey_pack) and hands the bytes to the peer by any means; the peer unpacks the
 * key on its endpoint to the owner (loom_ep_rkey_unpack) and puts, gets and applies atomic
 * operations without the owner taking part. An operation completes when its local buffer
 * may be reused (put) or holds the data (get, fetching atomics); loom_ep_flush_nbx and
 * loom_worker_flush_nbx complete once every earlier operation is complete at the target.
 * See docs/protocols.md ("RMA and atomics").
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_RMA_H
#define LOOM_UCP_RMA_H

#include <stddef.h>
#include <stdint.h>

#include "ucp_def.h"
#include "ucp_request.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_mem* loom_mem_h;
typedef struct loom_rkey* loom_rkey_h;

enum {
    LOOM_MEM_MAP_PARAM_FIELD_ADDRESS = 1u << 0,
    LOOM_MEM_MAP_PARAM_FIELD_LENGTH = 1u << 1,
    LOOM_MEM_MAP_PARAM_FIELD_FLAGS = 1u << 2,
    LOOM_MEM_MAP_PARAM_FIELD_PROT = 1u << 3
};

/** loom_mem_map_params_t.flags */
enum {
    /** Loom allocates the memory (a shared-memory segment where a transport offers one, so
        that peers on the host can map it: shm atomics need such memory); address is ignored. */
    LOOM_MEM_MAP_ALLOCATE = 1u << 1,
    /** With LOOM_MEM_MAP_ALLOCATE: place the memory at exactly address (page aligned), never
        over an existing mapping (LOOM_ERR_NO_MEMORY then), as an OpenSHMEM symmetric heap needs. */
    LOOM_MEM_MAP_FIXED = 1u << 2
};

/** loom_mem_map_params_t.prot: who may access the memory; default: everything. */
enum {
    LOOM_MEM_MAP_PROT_LOCAL_READ = 1u << 0,
    LOOM_MEM_MAP_PROT_LOCAL_WRITE = 1u << 1,
    LOOM_MEM_MAP_PROT_REMOTE_READ = 1u << 8,   /**< peers may get */
    LOOM_MEM_MAP_PROT_REMOTE_WRITE = 1u << 9,  /**< peers may put */
    LOOM_MEM_MAP_PROT_REMOTE_ATOMIC = 1u << 10 /**< peers may apply atomic operations */
};

/** What to map. */
typedef struct {
    uint64_t field_mask;
    void* address;  /**< the memory to register (without LOOM_MEM_MAP_ALLOCATE), or where to place it (FIXED) */
    size_t length;  /**< bytes; required, nonzero */
    unsigned flags; /**< LOOM_MEM_MAP_* */
    unsigned prot;  /**< LOOM_MEM_MAP_PROT_* bits */
} loom_mem_map_params_t;

/**
 * Registers [address, address + length) with every memory domain of @p context (or
 * allocates length bytes with LOOM_MEM_MAP_ALLOCATE), so that local zero-copy transfers
 * and peers holding its remote key can reach it. LOOM_ERR_INVALID_PARAM (logged) for a
 * missing or zero length, a missing address, unknown flags or prot bits; the status of
 * the transport that refused the registration or allocation otherwise.
 */
loom_status_t loom_mem_map(loom_context_h context, const loom_mem_map_params_t* params, loom_mem_h* memh);

/**
 * Releases a mapping (and frees memory loom_mem_map allocated). Remote keys packed from
 * it stop working on transports that check accesses at the target (tcp); elsewhere the
 * memory must not be accessed afterwards: unmap only once the peers are done with it.
 */
loom_status_t loom_mem_unmap(loom_context_h context, loom_mem_h memh);

enum {
    LOOM_MEM_ATTR_FIELD_ADDRESS = 1u << 0,
    LOOM_MEM_ATTR_FIELD_LENGTH = 1u << 1
};

/** What loom_mem_query reports. */
typedef struct {
    uint64_t field_mask;
    void* address;
    size_t length;
} loom_mem_attr_t;

/** Fills the fields of @p attr that its field mask asks for (where allocated memory is, its length). */
loom_status_t loom_mem_query(loom_mem_h memh, loom_mem_attr_t* attr);

/**
 * Packs the remote key of @p memh into a new buffer (*rkey_buffer, *size bytes: a version,
 * the region and one key per memory domain), to be released with
 * loom_rkey_buffer_release. The bytes mean nothing outside Loom and may be sent anywhere.
 */
loom_status_t loom_rkey_pack(loom_context_h context, loom_mem_h memh, void** rkey_buffer, size_t* size);

/** Releases a buffer from loom_rkey_pack. */
void loom_rkey_buffer_release(void* rkey_buffer);

/**
 * Unpacks a peer's packed key for use on @p ep (an endpoint to the peer that packed it):
 * the key of the transport of the endpoint's RMA lane. Unlike UCX's, the call takes the
 * buffer's @p size, since the bytes come from another process: a truncated, padded,
 * foreign-version or otherwise malformed buffer is refused with LOOM_ERR_INVALID_PARAM
 * and one log line, never read past @p size. LOOM_ERR_UNSUPPORTED when the context has
 * none of the features RMA, AMO32, AMO64, or the key has no entry for the lane's transport.
 */
loom_status_t loom_ep_rkey_unpack(loom_ep_h ep, const void* rkey_buffer, size_t size, loom_rkey_h* rkey);

/** Releases an unpacked key; no operation may still use it. */
void loom_rkey_destroy(loom_rkey_h rkey);

/**
 * Direct load/store access to a peer's memory: stores in @p *address the local address of
 * @p remote_addr (in the owner's address space, inside the key's region) when the peer's
 * memory is mapped into this process: shm keys of memory the owner allocated with
 * LOOM_MEM_MAP_ALLOCATE or of this process itself. Loads, stores and CPU atomics there
 * reach the owner's memory (LOOM_ATOMIC_MODE=cpu keeps them atomic with Loom's atomics).
 * LOOM_ERR_UNREACHABLE when the key's memory is not mapped here (registered memory of
 * another process, tcp, rc): use put and get. LOOM_ERR_INVALID_PARAM for an address
 * outside the region. As ucp_rkey_ptr.
 */
loom_status_t loom_rkey_ptr(loom_rkey_h rkey, uint64_t remote_addr, void** address);

/**
 * Writes @p count elements of the param's datatype (bytes by default) from @p buffer to
 * @p remote_addr (in the owner's address space) through @p rkey, unpacked on @p ep.
 * Completes when @p buffer may be reused; the data is at the target after a flush.
 * Datatypes: contiguous (short, bcopy or zero-copy transfers by size) and iov (copied
 * in bcopy fragments); generic: LOOM_ERR_UNSUPPORTED. LOOM_ERR_ACCESS_DENIED (logged)
 * for a range outside the key's region or a right the owner did not grant;
 * LOOM_ERR_INVALID_PARAM for a key unpacked on another endpoint. With
 * LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL only a contiguous put of up to the lane's bcopy size
 * may complete; larger ones return LOOM_ERR_NO_RESOURCE.
 */
loom_status_ptr_t loom_put_nbx(loom_ep_h ep, const void* buffer, size_t count, uint64_t remote_addr,
                               loom_rkey_h rkey, const loom_request_param_t* param);

/**
 * Reads @p count elements (contiguous datatypes only; others: LOOM_ERR_UNSUPPORTED)
 * from @p remote_addr into @p buffer; completes when the data is in @p buffer. Errors
 * as loom_put_nbx.
 */
loom_status_ptr_t loom_get_nbx(loom_ep_h ep, void* buffer, size_t count, uint64_t remote_addr, loom_rkey_h rkey,
                               const loom_request_param_t* param);

/** Atomic operations of loom_atomic_op_nbx (UCX's order). */
typedef enum {
    LOOM_ATOMIC_OP_ADD,
    LOOM_ATOMIC_OP_SWAP,
    LOOM_ATOMIC_OP_CSWAP,
    LOOM_ATOMIC_OP_AND,
    LOOM_ATOMIC_OP_OR,
    LOOM_ATOMIC_OP_XOR,
    LOOM_ATOMIC_OP_LAST
} loom_atomic_op_t;

/**
 * Applies @p opcode with the operand at @p buffer to the 4- or 8-byte word at
 * @p remote_addr (naturally aligned). The size comes from the param's datatype, which is
 * required: loom_dt_make_contig(4) or (8), with @p count 1. Without
 * LOOM_OP_ATTR_FIELD_REPLY_BUFFER the operation is posted (ADD, AND, OR, XOR; it is at the
 * target after a flush); with it the previous value is fetched into param->reply_buffer
 * (every operation; SWAP and CSWAP require it). CSWAP compares the remote word with
 * @p buffer's value and, when they are equal, swaps in the value the reply buffer holds on
 * input (UCX's semantics: buffer X, reply Z, "Result = Y; if (X == Y) Y = Z"); both are read
 * in the call. LOOM_ERR_INVALID_PARAM (logged)
 * for a bad opcode, datatype, count or alignment; LOOM_ERR_UNSUPPORTED (logged) when the
 * context lacks LOOM_FEATURE_AMO32/AMO64 or the endpoint's RMA lane cannot do the
 * operation at that size (rc: 64-bit ADD and CSWAP only, none on iWARP).
 */
loom_status_ptr_t loom_atomic_op_nbx(loom_ep_h ep, loom_atomic_op_t opcode, const void* buffer, size_t count,
                                     uint64_t remote_addr, loom_rkey_h rkey, const loom_request_param_t* param);

/**
 * Orders the RMA and atomic operations of @p ep: those started after the fence are
 * performed at the target after those started before it (no completion is awaited).
 */
loom_status_t loom_ep_fence(loom_ep_h ep);

/** loom_ep_fence on every endpoint of @p worker. */
loom_status_t loom_worker_fence(loom_worker_h worker);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_RMA_H */
