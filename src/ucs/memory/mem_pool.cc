#include "ucs/memory/mem_pool.h"

#include "ucs/memory/aligned.h"
#include "ucs/memory/memory_log.h"

#include <algorithm>
#include <bit>
#include <new>

namespace loom::ucs {

/** Chunk bookkeeping, stored at the start of every chunk. */
struct MemPool::Chunk {
    Chunk* next;
    std::size_t length;  ///< bytes of the whole chunk
    std::size_t count;   ///< elements in it
    bool mapped;         ///< from map_pages(), else from alloc_aligned()
    bool huge;           ///< backed by huge pages
};

namespace {

/** Sizes above this are certainly mistakes; keeping them out makes the layout arithmetic overflow-free. */
constexpr std::size_t kMaxSize = std::size_t{1} << 40;

}  // namespace

MemPool::~MemPool() {
    release_chunks();
}

Status MemPool::init(MemPoolParams params) {
    const std::string& name = params.name;
    if (initialized()) {
        LOOM_LOG_ERROR("mempool '{}': already initialized", name_);
        return Status::invalid_param;
    }
    if (params.elem_size == 0 || params.elem_size > kMaxSize) {
        LOOM_LOG_ERROR("mempool '{}': invalid element size {}", name, params.elem_size);
        return Status::invalid_param;
    }
    if (params.header_size > kMaxSize) {
        LOOM_LOG_ERROR("mempool '{}': invalid header size {}", name, params.header_size);
        return Status::invalid_param;
    }
    if (!std::has_single_bit(params.alignment) || params.alignment > page_size()) {
        LOOM_LOG_ERROR("mempool '{}': alignment {} is not a power of two between 1 and the page size {}",
                       name, params.alignment, page_size());
        return Status::invalid_param;
    }
    if (params.elems_per_chunk == 0) {
        LOOM_LOG_ERROR("mempool '{}': elements per chunk must be positive", name);
        return Status::invalid_param;
    }
    if (params.max_elems == 0) {
        LOOM_LOG_ERROR("mempool '{}': maximal number of elements must be positive", name);
        return Status::invalid_param;
    }

    // The pool word needs 8-byte alignment, and so does the header in front of it.
    std::size_t alignment = std::max<std::size_t>(params.alignment, sizeof(ElemHeader));
    std::size_t header_room = align_up(params.header_size, sizeof(ElemHeader));
    std::size_t stride = align_up(header_room + sizeof(ElemHeader) + params.elem_size, alignment);
    std::size_t first_offset = align_up(sizeof(Chunk) + header_room + sizeof(ElemHeader), alignment);
    std::size_t chunk_bytes = 0;
    if (__builtin_mul_overflow(params.elems_per_chunk, stride, &chunk_bytes) ||
        __builtin_add_overflow(chunk_bytes, first_offset, &chunk_bytes) || chunk_bytes > kMaxSize) {
        LOOM_LOG_ERROR("mempool '{}': chunks of {} elements of {} bytes are too large", name,
                       params.elems_per_chunk, stride);
        return Status::invalid_param;
    }

    elem_size_ = params.elem_size;
    header_room_ = header_room;
    stride_ = stride;
    first_offset_ = first_offset;
    chunk_alignment_ = std::max(alignment, kCacheLineSize);
    elems_per_chunk_ = params.elems_per_chunk;
    max_elems_ = params.max_elems;
    huge_pages_ = params.huge_pages;
    name_ = std::move(params.name);
    obj_init_ = std::move(params.obj_init);
    obj_cleanup_ = std::move(params.obj_cleanup);
    chunk_init_ = std::move(params.chunk_init);
    chunk_cleanup_ = std::move(params.chunk_cleanup);
    tag_ = reinterpret_cast<std::uintptr_t>(this) | kTagBit;
    LOOM_LOG_DEBUG(
        "mempool '{}': element {} bytes, header {}, stride {}, {} per chunk, max {}, huge pages {}", name_,
        elem_size_, header_room_, stride_, elems_per_chunk_, max_elems_, to_string(huge_pages_));
    return Status::ok;
}

void* MemPool::get_slow() noexcept {
    if (!initialized()) {
        LOOM_LOG_ERROR("mempool: get() before init()");
        exhausted_status_ = Status::invalid_param;
        return nullptr;
    }
    Status status = grow();
    if (status != Status::ok) {
        exhausted_status_ = status;
        return nullptr;
    }
    return get();
}

Status MemPool::reserve(std::size_t count) noexcept {
    if (!initialized()) {
        LOOM_LOG_ERROR("mempool: reserve() before init()");
        return Status::invalid_param;
    }
    std::size_t target = std::min(count, max_elems_);
    while (num_elems_ < target) {
        Status status = grow();
        if (status != Status::ok) return status;
    }
    return Status::ok;
}

Status MemPool::grow() noexcept {
    if (num_elems_ >= max_elems_) {
        if (!limit_logged_) {
            LOOM_LOG_DEBUG("mempool '{}': all {} elements are in use", name_, max_elems_);
            limit_logged_ = true;
        }
        return Status::no_resource;
    }

    std::size_t count = std::min(elems_per_chunk_, max_elems_ - num_elems_);
    std::size_t bytes = first_offset_ + count * stride_;
    void* base = nullptr;
    std::size_t length = bytes;
    bool mapped = false;
    bool huge = false;
    if (huge_pages_ != HugePagePolicy::never) {
        PageMapping mapping;
        Status status = map_pages(bytes, huge_pages_, mapping);
        if (status != Status::ok) {
            LOOM_LOG_ERROR("mempool '{}': cannot allocate a chunk of {} bytes ({} huge pages): {}", name_,
                           bytes, to_string(huge_pages_), to_string(status));
            return status;
        }
        base = mapping.address;
        length = mapping.length;
        mapped = true;
        huge = mapping.huge;
        // Whole pages are mapped anyway: use the rounding for more elements.
        count = std::min((length - first_offset_) / stride_, max_elems_ - num_elems_);
        if (!huge && !huge_fallback_logged_) {
            LOOM_LOG_DIAG("mempool '{}': huge pages unavailable, chunks use normal pages", name_);
            huge_fallback_logged_ = true;
        }
    } else {
        Status status = alloc_aligned(bytes, chunk_alignment_, base);
        if (status != Status::ok) {
            LOOM_LOG_ERROR("mempool '{}': cannot allocate a chunk of {} bytes: {}", name_, bytes,
                           to_string(status));
            return status;
        }
    }

    if (chunk_init_) {
        Status status = chunk_init_(base, length);
        if (status != Status::ok) {
            LOOM_LOG_DEBUG("mempool '{}': chunk of {} bytes rejected by its init callback: {}", name_, length,
                           to_string(status));
            if (mapped) {
                PageMapping mapping{base, length, huge};
                unmap_pages(mapping);
            } else {
                free_aligned(base);
            }
            return status;
        }
    }
    auto* chunk = ::new (base) Chunk{chunks_, length, count, mapped, huge};
    chunks_ = chunk;
    ++num_chunks_;
    if (huge) ++num_huge_chunks_;

    // Link the new elements in address order, so consecutive get() calls walk memory forward.
    char* first = static_cast<char*>(base) + first_offset_;
    ElemHeader* head = nullptr;
    ElemHeader* prev = nullptr;
    for (std::size_t i = 0; i < count; ++i) {
        void* elem = first + i * stride_;
        auto* hdr = ::new (static_cast<ElemHeader*>(elem) - 1) ElemHeader{0};
        if (obj_init_) obj_init_(elem);
        poison(elem);
        if (prev != nullptr) {
            prev->word = reinterpret_cast<std::uintptr_t>(hdr);
        } else {
            head = hdr;
        }
        prev = hdr;
    }
    prev->word = reinterpret_cast<std::uintptr_t>(free_list_);
    free_list_ = head;
    num_elems_ += count;
    LOOM_LOG_DEBUG("mempool '{}': new chunk of {} bytes ({} pages) with {} elements, {} in total", name_,
                   length, huge ? "huge" : "normal", count, num_elems_);
    return Status::ok;
}

std::size_t MemPool::count_free() const noexcept {
    std::size_t n = 0;
    for (const ElemHeader* hdr = free_list_; hdr != nullptr;
         hdr = reinterpret_cast<const ElemHeader*>(hdr->word)) {
        ++n;
    }
    return n;
}

void MemPool::bad_put(void* elem) const noexcept {
    std::uintptr_t word = (static_cast<ElemHeader*>(elem) - 1)->word;
    if ((word & kTagBit) == 0) {
        LOOM_FATAL("mempool '{}': double put of element {} (it is already free)", name_, elem);
    }
    LOOM_FATAL("mempool '{}': put of element {} that belongs to pool {}", name_, elem,
               reinterpret_cast<const void*>(word & ~kTagBit));
}

void MemPool::release_chunks() noexcept {
    if (chunks_ == nullptr) return;
    std::size_t in_use = num_elems_ - count_free();
    if (in_use != 0) {
        LOOM_LOG_WARN("mempool '{}': destroyed with {} of {} elements still in use", name_, in_use,
                      num_elems_);
    }
    while (Chunk* chunk = chunks_) {
        chunks_ = chunk->next;
        PageMapping mapping{chunk, chunk->length, chunk->huge};
        bool mapped = chunk->mapped;
        detail::asan_poison(chunk, mapping.length, false);
        if (obj_cleanup_) {
            char* first = reinterpret_cast<char*>(chunk) + first_offset_;
            for (std::size_t i = 0; i < chunk->count; ++i) obj_cleanup_(first + i * stride_);
        }
        if (chunk_cleanup_) chunk_cleanup_(chunk, mapping.length);
        if (mapped) {
            unmap_pages(mapping);
        } else {
            free_aligned(chunk);
        }
    }
    free_list_ = nullptr;
    num_elems_ = num_chunks_ = num_huge_chunks_ = 0;
}

}  // namespace loom::ucs
