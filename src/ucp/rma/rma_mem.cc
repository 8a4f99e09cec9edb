/**
 * Memory mappings and remote keys.
 *
 * A mapping registers one region with every memory domain of the context that registers
 * memory (self, shm, tcp, one per verbs device), so whichever transport an endpoint uses
 * finds a registration. With LOOM_MEM_MAP_ALLOCATE the first domain that allocates
 * (shm: a shared segment peers on the host can map, which shm atomics need) provides the
 * memory and the others register it; without one, an anonymous mmap does.
 *
 * Packed remote key (little endian, no alignment):
 *
 *   u8 version (kRkeyVersion), u8 number of entries, u8 access (uct::MemAccess bits the
 *   owner granted), u8 reserved (0), u32 total length, u64 address, u64 length,
 *   then per memory domain: u8 component name length, component name,
 *                           u8 md name length, md name, u8 md index, u16 key length, key
 *
 * The peer picks the entry of the memory domain its endpoint's RMA lane reaches: the md
 * index the owner's worker address gave that lane's iface (Lane::remote_md), so two
 * verbs devices of the owner, or devices named differently on the two hosts, cannot be
 * confused. Its bytes go to that component's rkey_unpack, which validates them again.
 * The names are for log lines.
 */
#include "ucp/rma/rma.h"

#include "ucp/core/packed.h"
#include "ucp/core/ucp_log.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace loom::ucp {

namespace {

constexpr std::size_t kRkeyHeader = 24;

/** Frees memory mem_map allocated (not the registrations). */
void free_memory(Mem& mem) {
    if (!mem.allocated) return;
    if (mem.alloc_md != nullptr) {
        if (Status s = mem.alloc_md->mem_free(mem.memh_of(mem.alloc_md)); s != Status::ok) {
            LOOM_LOG_WARN("ucp: mem_unmap: {} could not free {} bytes at {}: {}", mem.alloc_md->name(),
                          mem.length, static_cast<void*>(mem.address), to_string(s));
        }
    } else {
        (void)::munmap(mem.address, mem.length);
    }
}

/** Releases every registration except the allocating md's (freed by free_memory). */
void deregister(Mem& mem) {
    for (MemReg& r : mem.regs) {
        if (r.md == mem.alloc_md || r.memh == uct::kMemHNull) continue;
        if (Status s = r.md->mem_dereg(r.memh); s != Status::ok) {
            LOOM_LOG_WARN("ucp: mem_unmap: {} could not release the registration of {}: {}", r.md->name(),
                          static_cast<void*>(mem.address), to_string(s));
        }
    }
}

}  // namespace

Result<Mem*> mem_map(Context& context, void* address, std::size_t length, bool allocate, unsigned access,
                     bool fixed) {
    auto mem = std::make_unique<Mem>();
    mem->context = &context;
    mem->length = length;
    mem->access = access;
    // The memory domains, once each, in the context's order.
    std::vector<const ContextResource*> mds;
    for (const ContextResource& rsc : context.resources()) {
        bool seen = false;
        for (const ContextResource* m : mds) seen = seen || m->md == rsc.md;
        if (!seen) mds.push_back(&rsc);
    }
    if (allocate) {
        for (const ContextResource* rsc : mds) {
            if (!(rsc->md_attr.flags & uct::MdAttr::kAlloc) || rsc->md_attr.max_alloc < length) continue;
            auto allocated = rsc->md->mem_alloc_at(length, access, fixed ? address : nullptr);
            if (!allocated && fixed && allocated.status() != Status::unsupported) return allocated.status();
            if (!allocated) {
                LOOM_LOG_DEBUG("ucp: mem_map: {} cannot allocate {} bytes ({}); trying the next way",
                               rsc->md->name(), length, to_string(allocated.status()));
                continue;
            }
            mem->address = static_cast<std::uint8_t*>(allocated->first);
            mem->alloc_md = rsc->md;
            mem->regs.push_back(MemReg{rsc->md, rsc, allocated->second});
            break;
        }
        if (mem->alloc_md == nullptr) {
            void* p = ::mmap(fixed ? address : nullptr, length, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | (fixed ? MAP_FIXED_NOREPLACE : 0), -1, 0);
            if (p != MAP_FAILED && fixed && p != address) {  // a kernel without MAP_FIXED_NOREPLACE
                (void)::munmap(p, length);
                p = MAP_FAILED;
                errno = EEXIST;
            }
            if (p == MAP_FAILED) {
                LOOM_LOG_ERROR("ucp: mem_map: cannot allocate {} bytes{}: {}", length,
                               fixed ? fmt::format(" at {}", address) : std::string(),
                               errno == EEXIST && fixed ? "something is mapped there already" : std::strerror(errno));
                return Status::no_memory;
            }
            mem->address = static_cast<std::uint8_t*>(p);
        }
        mem->allocated = true;
    } else {
        mem->address = static_cast<std::uint8_t*>(address);
    }
    for (const ContextResource* rsc : mds) {
        if (rsc->md == mem->alloc_md || !(rsc->md_attr.flags & uct::MdAttr::kReg)) continue;
        auto memh = rsc->md->mem_reg(mem->address, length, access);
        if (!memh) {
            LOOM_LOG_ERROR("ucp: mem_map: {} cannot register {} bytes at {}: {}", rsc->md->name(), length,
                           static_cast<void*>(mem->address), to_string(memh.status()));
            deregister(*mem);
            free_memory(*mem);
            return memh.status();
        }
        mem->regs.push_back(MemReg{rsc->md, rsc, *memh});
    }
    return mem.release();
}

Status mem_unmap(Context& context, Mem* mem) {
    if (mem->context != &context) {
        LOOM_LOG_ERROR("ucp: mem_unmap: mapping {} belongs to another context", static_cast<void*>(mem));
        return Status::invalid_param;
    }
    deregister(*mem);
    free_memory(*mem);
    delete mem;
    return Status::ok;
}

std::vector<std::uint8_t> rkey_pack(const Mem& mem) {
    std::vector<std::uint8_t> out;
    out.reserve(kRkeyHeader + 64 * mem.regs.size());
    out.push_back(kRkeyVersion);
    out.push_back(0);  // number of entries, set below
    out.push_back(static_cast<std::uint8_t>(
        mem.access & (uct::kAccessRemotePut | uct::kAccessRemoteGet | uct::kAccessRemoteAtomic)));
    out.push_back(0);
    pack_put<std::uint32_t>(out, 0);  // total length, set below
    pack_put<std::uint64_t>(out, reinterpret_cast<std::uintptr_t>(mem.address));
    pack_put<std::uint64_t>(out, mem.length);
    std::uint8_t entries = 0;
    std::vector<std::uint8_t> key;
    for (const MemReg& r : mem.regs) {
        const uct::MdAttr& attr = r.rsc->md_attr;
        if (entries == UINT8_MAX || attr.rkey_packed_size > UINT16_MAX) break;
        key.assign(attr.rkey_packed_size, 0);
        if (!key.empty()) {
            if (Status s = r.md->mkey_pack(r.memh, key.data()); s != Status::ok) {
                // That transport cannot reach the memory; the others still can.
                LOOM_LOG_WARN("ucp: rkey_pack: {} cannot pack its key: {}; left out", r.md->name(),
                              to_string(s));
                continue;
            }
        }
        pack_put_string(out, r.rsc->component->name());
        pack_put_string(out, r.md->name());
        pack_put<std::uint8_t>(out, r.rsc->md_index);
        pack_put<std::uint16_t>(out, static_cast<std::uint16_t>(key.size()));
        out.insert(out.end(), key.begin(), key.end());
        ++entries;
    }
    out[1] = entries;
    const auto total = static_cast<std::uint32_t>(out.size());
    std::memcpy(out.data() + 4, &total, sizeof(total));
    return out;
}

Result<RmaRkey*> rkey_unpack(Ep* ep, const void* data, std::size_t length) {
    Worker& w = *ep->worker;
    const std::uint64_t features = w.context.params().features;
    if (!(features & (kFeatureRma | kFeatureAmo32 | kFeatureAmo64))) {
        LOOM_LOG_ERROR("ucp: rkey_unpack: the context was created without LOOM_FEATURE_RMA, AMO32 or AMO64");
        return Status::unsupported;
    }
    PackedReader r{static_cast<const std::uint8_t*>(data), length};
    const auto version = r.get<std::uint8_t>();
    const auto entries = r.get<std::uint8_t>();
    const auto access = r.get<std::uint8_t>();
    (void)r.get<std::uint8_t>();
    const auto total = r.get<std::uint32_t>();
    const auto address = r.get<std::uint64_t>();
    const auto region_length = r.get<std::uint64_t>();
    if (!r.ok || total != length) {
        LOOM_LOG_ERROR("ucp: rkey_unpack: a packed key of {} bytes says it has {} (truncated or padded)",
                       length, r.ok ? total : 0);
        return Status::invalid_param;
    }
    if (version != kRkeyVersion) {
        LOOM_LOG_ERROR("ucp: rkey_unpack: packed key version {} (this Loom reads version {})", version,
                       kRkeyVersion);
        return Status::invalid_param;
    }
    constexpr unsigned kRemoteRights =
        uct::kAccessRemotePut | uct::kAccessRemoteGet | uct::kAccessRemoteAtomic;
    if ((access & ~kRemoteRights) != 0 || address + region_length < address) {
        LOOM_LOG_ERROR("ucp: rkey_unpack: malformed key (access {:#x}, region {:#x}+{})", access, address,
                       region_length);
        return Status::invalid_param;
    }
    const std::uint8_t lane = rma_lane(ep);
    const WorkerIface& wi = w.ifaces[ep->lanes[lane].iface];
    const std::string& component = wi.rsc->component->name();
    const std::uint8_t remote_md = ep->lanes[lane].remote_md;
    const std::uint8_t* key = nullptr;
    std::size_t key_length = 0;
    std::string other_mds;  // for the error line
    for (unsigned i = 0; i < entries; ++i) {
        const std::string_view comp = r.text();
        const std::string_view md = r.text();
        const auto md_index = r.get<std::uint8_t>();
        const auto n = r.get<std::uint16_t>();
        const std::uint8_t* bytes = r.bytes(n);
        if (!r.ok) break;
        if (comp != component) continue;
        if (md_index == remote_md && key == nullptr) {
            key = bytes;
            key_length = n;
        } else {
            other_mds += " " + std::string(md);
        }
    }
    if (!r.ok || r.left != 0) {
        LOOM_LOG_ERROR("ucp: rkey_unpack: malformed key (its {} entries do not fill its {} bytes)", entries,
                       total);
        return Status::invalid_param;
    }
    if (key == nullptr) {
        LOOM_LOG_ERROR("ucp: rkey_unpack: the key has no entry for the {} memory domain the endpoint's RMA lane "
                       "reaches (its {} entries:{})",
                       component, component, other_mds.empty() ? " none" : other_mds);
        return Status::unsupported;
    }
    auto unpacked = wi.rsc->component->rkey_unpack(key, key_length);
    if (!unpacked) {
        LOOM_LOG_ERROR("ucp: rkey_unpack: {} refused its key: {}", component, to_string(unpacked.status()));
        return unpacked.status() == Status::version_mismatch ? Status::invalid_param : unpacked.status();
    }
    auto* rkey = new (std::nothrow) RmaRkey{};
    if (rkey == nullptr) {
        wi.rsc->component->rkey_release(*unpacked);
        return Status::no_memory;
    }
    rkey->uct_rkey = unpacked->rkey;
    rkey->address = address;
    rkey->length = region_length;
    rkey->remote_uuid = ep->remote_uuid;
    rkey->iface = ep->lanes[lane].iface;
    rkey->access = access;
    // The put fast path (rma_put_immediate), read off the endpoint's protocol table: short
    // below its limit, then one bcopy where put bcopy serves.
    const std::size_t short_limit = ep->protos->fast_path_limit(ProtoOp::put);
    rkey->put_short = static_cast<std::uint32_t>(std::min<std::size_t>(short_limit != 0 ? short_limit - 1 : 0, UINT32_MAX));
    const ProtoRange* bcopy = ep->protos->select(ProtoOp::put, true, short_limit);
    rkey->put_bcopy = bcopy != nullptr && bcopy->proto == &kPutBcopy ? std::min(bcopy->last, wi.attr.put.max_bcopy) : 0;
    rkey->features = features;
    rkey->component = wi.rsc->component;
    rkey->handle = *unpacked;
    ep->rma_flags |= kRmaUsed;
    return rkey;
}

void rkey_destroy(RmaRkey* rkey) {
    rkey->component->rkey_release(rkey->handle);
    delete rkey;
}

}  // namespace loom::ucp
