/**
 * @file loom/ucp_dt.h
 * Datatypes: contiguous, iov and generic (user pack/unpack) element types.
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_DT_H
#define LOOM_UCP_DT_H

#include <stddef.h>
#include <stdint.h>

#include "ucp_def.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * A datatype: contiguous elements, an iov list or a generic (user pack/unpack) type.
 * The low 3 bits say which; contiguous types keep their element size above them.
 */
typedef uint64_t loom_datatype_t;

enum {
    LOOM_DATATYPE_CONTIG = 0, /**< count elements of (dt >> 3) bytes each */
    LOOM_DATATYPE_IOV = 2,    /**< buffer is a loom_dt_iov_t array of count entries */
    LOOM_DATATYPE_GENERIC = 7, /**< made by loom_dt_create_generic */
    LOOM_DATATYPE_CLASS_MASK = 7
};

/** A contiguous datatype of @p elem_size bytes per element. */
#define loom_dt_make_contig(elem_size) (((loom_datatype_t)(elem_size) << 3) | LOOM_DATATYPE_CONTIG)
/** The iov datatype. */
#define loom_dt_make_iov() ((loom_datatype_t)LOOM_DATATYPE_IOV)

/** One entry of an iov datatype. */
typedef struct {
    void* buffer;
    size_t length;
} loom_dt_iov_t;

/**
 * Callbacks of a generic datatype. start_pack/start_unpack return a state that the
 * other calls get back; packed_size gives the packed bytes of that state; pack writes
 * up to max_length bytes at @p offset and returns how many; unpack consumes @p length
 * bytes at @p offset; finish releases the state.
 */
typedef struct {
    void* (*start_pack)(void* context, const void* buffer, size_t count);
    void* (*start_unpack)(void* context, void* buffer, size_t count);
    size_t (*packed_size)(void* state);
    size_t (*pack)(void* state, size_t offset, void* dest, size_t max_length);
    loom_status_t (*unpack)(void* state, size_t offset, const void* src, size_t length);
    void (*finish)(void* state);
} loom_generic_dt_ops_t;

/** Creates a generic datatype calling @p ops with @p context. */
loom_status_t loom_dt_create_generic(const loom_generic_dt_ops_t* ops, void* context, loom_datatype_t* datatype);

/** Destroys a generic datatype (no operation may still use it). */
void loom_dt_destroy(loom_datatype_t datatype);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_DT_H */
