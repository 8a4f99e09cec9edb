#include "uct_peer.h"

#include <cstring>

namespace loom::uct::test {

namespace {

void put_blob(std::vector<std::uint8_t>& out, const std::vector<std::uint8_t>& blob) {
    auto n = static_cast<std::uint32_t>(blob.size());
    out.insert(out.end(), reinterpret_cast<std::uint8_t*>(&n), reinterpret_cast<std::uint8_t*>(&n) + 4);
    out.insert(out.end(), blob.begin(), blob.end());
}

bool get_blob(const std::vector<std::uint8_t>& in, std::size_t& pos, std::vector<std::uint8_t>& blob) {
    std::uint32_t n;
    if (in.size() - pos < 4) return false;
    std::memcpy(&n, in.data() + pos, 4);
    pos += 4;
    if (in.size() - pos < n) return false;
    blob.assign(in.begin() + static_cast<std::ptrdiff_t>(pos), in.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
    return true;
}

}  // namespace

std::vector<std::uint8_t> PeerInfo::pack() const {
    std::vector<std::uint8_t> out;
    put_blob(out, dev_addr);
    put_blob(out, iface_addr);
    put_blob(out, ep_addr);
    put_blob(out, rkey);
    for (std::uint64_t v : {buffer, buffer_size}) {
        out.insert(out.end(), reinterpret_cast<const std::uint8_t*>(&v), reinterpret_cast<const std::uint8_t*>(&v) + 8);
    }
    return out;
}

bool PeerInfo::unpack(const std::vector<std::uint8_t>& blob) {
    std::size_t pos = 0;
    if (!get_blob(blob, pos, dev_addr) || !get_blob(blob, pos, iface_addr) || !get_blob(blob, pos, ep_addr) ||
        !get_blob(blob, pos, rkey)) {
        return false;
    }
    if (blob.size() - pos != 16) return false;
    std::memcpy(&buffer, blob.data() + pos, 8);
    std::memcpy(&buffer_size, blob.data() + pos + 8, 8);
    return true;
}

std::vector<std::uint8_t> test_pattern(std::size_t length, std::uint32_t seed) {
    std::vector<std::uint8_t> data(length);
    std::uint32_t x = seed * 2654435761u + 1;
    for (std::size_t i = 0; i < length; ++i) {
        x = x * 1103515245u + 12345u;
        data[i] = static_cast<std::uint8_t>(x >> 16);
    }
    return data;
}

ProcSide::ProcSide(const Resource& resource, std::size_t buffer_size, unsigned access)
    : entity_(std::make_unique<Entity>(resource)), buffer_size_(buffer_size) {
    if (entity_->md_attr().flags & MdAttr::kAlloc) {
        auto mem = entity_->md().mem_alloc(buffer_size, access);
        if (!mem) throw std::runtime_error("mem_alloc failed: " + std::string(to_string(mem.status())));
        buffer_ = static_cast<std::uint8_t*>(mem->first);
        memh_ = mem->second;
        allocated_ = true;
        std::memset(buffer_, 0, buffer_size_);
        return;
    }
    owned_.assign(buffer_size, 0);
    buffer_ = owned_.data();
    if (entity_->md_attr().flags & MdAttr::kReg) {
        auto reg = entity_->md().mem_reg(buffer_, buffer_size_, access);
        if (!reg) throw std::runtime_error("mem_reg failed: " + std::string(to_string(reg.status())));
        memh_ = *reg;
    }
}

ProcSide::~ProcSide() {
    destroy_ep();
    if (have_rkey_) entity_->md().component().rkey_release(peer_rkey_);
    if (memh_ != kMemHNull) {
        (void)(allocated_ ? entity_->md().mem_free(memh_) : entity_->md().mem_dereg(memh_));
    }
    entity_.reset();
}

void ProcSide::destroy_ep() {
    if (ep_ != nullptr) {
        entity_->destroy_ep(ep_);
        ep_ = nullptr;
    }
}

PeerInfo ProcSide::info() const {
    PeerInfo info;
    info.dev_addr = entity_->device_address();
    info.iface_addr = entity_->iface_address();
    if (ep_ != nullptr && connects_to_ep()) {
        info.ep_addr.resize(entity_->attr().ep_addr_len);
        if (entity_->iface().ep_get_address(ep_, info.ep_addr.data()) != Status::ok) {
            throw std::runtime_error("ep_get_address failed");
        }
    }
    info.rkey.resize(entity_->md_attr().rkey_packed_size);
    if (memh_ != kMemHNull && !info.rkey.empty() && entity_->md().mkey_pack(memh_, info.rkey.data()) != Status::ok) {
        throw std::runtime_error("mkey_pack failed");
    }
    info.buffer = reinterpret_cast<std::uint64_t>(buffer_);
    info.buffer_size = buffer_size_;
    return info;
}

bool ProcSide::connects_to_ep() const {
    const IfaceAttr& attr = entity_->attr();
    return !(attr.cap_flags & kCapConnectToIface) && (attr.cap_flags & kCapConnectToEp);
}

void ProcSide::forward_error(void* arg, Ep* ep, Status status) {
    auto* self = static_cast<ProcSide*>(arg);
    if (self->on_error_ != nullptr) self->on_error_(self->on_error_arg_, ep, status);
}

bool ProcSide::exchange(loom::test::ForkedPeer::Channel& ch) {
    if (connects_to_ep() && ep_ == nullptr) {
        EpParams params;
        params.on_error = forward_error;
        params.on_error_arg = this;
        auto ep = entity_->iface().ep_create(params);
        if (!ep) return false;
        ep_ = *ep;
    }
    if (!ch.send(info().pack())) return false;
    auto blob = ch.recv(std::chrono::seconds(20));
    if (!blob || !peer_.unpack(*blob)) return false;
    if (connects_to_ep()) {
        return entity_->iface().ep_connect_to_ep(ep_, peer_.dev_addr.data(), peer_.dev_addr.size(),
                                                 peer_.ep_addr.data(), peer_.ep_addr.size()) == Status::ok;
    }
    return true;
}

Status ProcSide::connect(void (*on_error)(void*, Ep*, Status), void* arg) {
    on_error_ = on_error;
    on_error_arg_ = arg;
    if (connects_to_ep()) {
        if (ep_ == nullptr) return Status::invalid_param;  // exchange() makes it
    } else if (Status s = create_ep_to_peer(); s != Status::ok) {
        return s;
    }
    auto rkey = entity_->md().component().rkey_unpack(peer_.rkey.data(), peer_.rkey.size());
    if (!rkey) return rkey.status();
    peer_rkey_ = *rkey;
    have_rkey_ = true;
    return Status::ok;
}

Status ProcSide::create_ep_to_peer() {
    EpParams params;
    params.dev_addr = peer_.dev_addr.data();
    params.dev_addr_len = peer_.dev_addr.size();
    params.iface_addr = peer_.iface_addr.data();
    params.iface_addr_len = peer_.iface_addr.size();
    params.on_error = forward_error;
    params.on_error_arg = this;
    auto ep = entity_->iface().ep_create(params);
    if (!ep) return ep.status();
    ep_ = *ep;
    return Status::ok;
}

Status ProcSide::finish(Status status, CountingCompletion& comp) {
    if (status != Status::in_progress) return status;
    if (!progress_until([&] { return comp.fired > 0; })) return Status::timed_out;
    return comp.status;
}

}  // namespace loom::uct::test
