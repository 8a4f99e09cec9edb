#include "info.h"

#include "ucs/sys/module.h"
#include "uct/api/uct.h"
#include "uct/base/uct_worker.h"

#include <cstdio>
#include <string>

namespace loom::info {

namespace {

std::string size_text(std::size_t bytes) {
    if (bytes == SIZE_MAX || bytes >= (1ull << 62)) return "inf";
    if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + "G";
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "M";
    if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + "K";
    return std::to_string(bytes);
}

void print_limits(const char* op, const uct::OpLimits& l, std::uint64_t caps, std::uint64_t short_cap,
                  std::uint64_t bcopy_cap, std::uint64_t zcopy_cap) {
    std::string line;
    if (caps & short_cap) line += " short<=" + size_text(l.max_short);
    if (caps & bcopy_cap) line += " bcopy<=" + size_text(l.max_bcopy);
    if (caps & zcopy_cap) {
        line += " zcopy " + size_text(l.min_zcopy) + ".." + size_text(l.max_zcopy) + " iov<=" +
                std::to_string(l.max_iov);
        if (l.max_hdr) line += " hdr<=" + size_text(l.max_hdr);
    }
    if (!line.empty()) std::printf("#      %-6s%s\n", op, line.c_str());
}

std::string atomic_text(std::uint64_t ops) {
    static const char* names[] = {"add", "and", "or", "xor", "swap", "cswap"};
    std::string text;
    for (unsigned i = 0; i < 6; ++i) {
        if (ops & (1ull << i)) text += std::string(text.empty() ? "" : ",") + names[i];
    }
    return text.empty() ? "none" : text;
}

void print_iface(uct::Md& md, const uct::TlResource& tl) {
    uct::Worker worker;
    auto iface = md.iface_open(tl, &worker, {});
    std::printf("#   transport %s on device %s (%s)\n", tl.tl_name.c_str(), tl.dev_name.c_str(),
                uct::to_string(tl.dev_type));
    if (!iface) {
        std::printf("#      cannot open: %s\n", std::string(to_string(iface.status())).c_str());
        return;
    }
    uct::IfaceAttr attr;
    if ((*iface)->query(attr) != Status::ok) {
        std::printf("#      query failed\n");
        return;
    }
    std::uint64_t c = attr.cap_flags;
    print_limits("am", attr.am, c, uct::kCapAmShort, uct::kCapAmBcopy, uct::kCapAmZcopy);
    print_limits("put", attr.put, c, uct::kCapPutShort, uct::kCapPutBcopy, uct::kCapPutZcopy);
    print_limits("get", attr.get, c, uct::kCapGetShort, uct::kCapGetBcopy, uct::kCapGetZcopy);
    if (c & (uct::kCapAtomic32 | uct::kCapAtomic64)) {
        std::printf("#      atomics: 32-bit %s; 64-bit %s\n",
                    (c & uct::kCapAtomic32) ? atomic_text(attr.atomic32_ops).c_str() : "none",
                    (c & uct::kCapAtomic64) ? atomic_text(attr.atomic64_ops).c_str() : "none");
    }
    std::string client_server =
        (c & uct::kCapConnectToSockaddr) ? ", client/server (" + std::to_string(attr.max_conn_priv) + " B private data)"
                                         : "";
    std::printf("#      connect: %s%s%s%s   error handling: %s   pending queue: %s\n",
                (c & uct::kCapConnectToIface) ? "to iface" : "",
                (c & uct::kCapConnectToIface) && (c & uct::kCapConnectToEp) ? ", " : "",
                (c & uct::kCapConnectToEp) ? "to ep" : "", client_server.c_str(),
                (c & uct::kCapErrHandlingPeerFailure) ? "peer failure" : "none",
                (c & uct::kCapPending) ? "yes" : "no");
    std::printf("#      addresses: device %zu B, iface %zu B, ep %zu B; endpoint object %zu B\n",
                attr.device_addr_len, attr.iface_addr_len, attr.ep_addr_len, attr.ep_size);
    std::printf("#      model: overhead %.0f ns, latency %.0f ns + %.1f ns/ep, bandwidth %.0f MB/s%s\n",
                attr.overhead * 1e9, attr.latency.c * 1e9, attr.latency.m * 1e9, attr.bandwidth_dedicated / 1e6,
                attr.bandwidth_shared > 0 ? " (shared device)" : "");
}

}  // namespace

int print_devices() {
    std::vector<std::string> dirs = ucs::default_module_dirs();
    std::string dir_list;
    for (const auto& dir : dirs) dir_list += (dir_list.empty() ? "" : ":") + dir;

    const auto& modules = ucs::load_modules("uct");
    std::printf("# Transport modules (searched in %s):\n", dir_list.c_str());
    if (modules.empty()) std::printf("#   none found\n");
    for (const auto& module : modules) {
        std::printf("#   %-10s %-8s %s%s%s\n", module.name.c_str(), std::string(ucs::to_string(module.state)).c_str(),
                    module.path.c_str(), module.reason.empty() ? "" : ": ", module.reason.c_str());
    }

    for (const uct::Component* component : uct::components()) {
        std::printf("#\n# Component %s\n", component->name().c_str());
        auto mds = component->query_md_resources();
        if (mds.empty()) std::printf("#   no device found\n");
        for (const std::string& md_name : mds) {
            auto md = component->md_open(md_name);
            if (!md) {
                std::printf("#   memory domain %s: cannot open: %s\n", md_name.c_str(),
                            std::string(to_string(md.status())).c_str());
                continue;
            }
            uct::MdAttr md_attr;
            if ((*md)->query(md_attr) == Status::ok) {
                std::printf("#   memory domain %s: register %s, allocate %s, remote key %zu B\n", md_name.c_str(),
                            (md_attr.flags & uct::MdAttr::kReg) ? "yes" : "no",
                            (md_attr.flags & uct::MdAttr::kAlloc) ? "yes" : "no", md_attr.rkey_packed_size);
            }
            std::string text = (*md)->describe();
            for (std::size_t pos = 0; pos < text.size();) {
                std::size_t end = text.find('\n', pos);
                if (end == std::string::npos) end = text.size();
                std::printf("#     %s\n", text.substr(pos, end - pos).c_str());
                pos = end + 1;
            }
            for (const uct::TlResource& tl : (*md)->query_tl_resources()) print_iface(**md, tl);
        }
    }
    return 0;
}

}  // namespace loom::info
