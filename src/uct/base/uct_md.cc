#include "uct/api/uct.h"

namespace loom::uct {

Md::~Md() = default;

Result<MemH> Md::mem_reg(void*, std::size_t, unsigned) { return Status::unsupported; }

Status Md::mem_dereg(MemH) { return Status::unsupported; }

Result<std::pair<void*, MemH>> Md::mem_alloc_at(std::size_t, unsigned, void*) { return Status::unsupported; }

Status Md::mem_free(MemH) { return Status::unsupported; }

Status Md::mkey_pack(MemH, std::uint8_t*) const { return Status::unsupported; }

std::string Md::describe() const { return {}; }

}  // namespace loom::uct
