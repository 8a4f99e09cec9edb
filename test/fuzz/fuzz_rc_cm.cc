/**
 * Fuzz target: the rc transport's rdma_cm private data (uct/ib/rc_cm_data.h), the bytes a
 * peer puts in a connect request, an accept or a reject. rc_cm.cc hands every one of them
 * to parse_cm_data before it looks at a field; this drives that function and the log
 * line of each refusal. The rdma_cm events around it need a device: the RDMA VM's
 * suites exercise them (test/rdma), this target exercises what the peer controls.
 *
 * The first byte picks what the receiver expects: a reject's data (no segment size
 * check), a connection with the default LOOM_IB_SEG_SIZE, or one with the segment size in
 * the next four bytes; the rest is the private data. Whatever comes back must lie within
 * the input (libFuzzer's input is a heap block of exactly its size: ASan sees any read
 * past it) and agree with the header.
 */
#include "uct/ib/rc_cm_data.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using loom::uct::ib::RcCmData;
using loom::uct::ib::RcCmDataError;

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz_rc_cm: %s\n", what);
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    std::uint32_t seg_size = 0;
    std::size_t skip = 1;
    switch (data[0] % 3) {
        case 0:
            break;  // a reject: only the header and the user's part
        case 1:
            seg_size = 8192;
            break;  // LOOM_IB_SEG_SIZE's default
        default:
            if (size < 5) return 0;
            std::memcpy(&seg_size, data + 1, sizeof(seg_size));
            skip = 5;
    }
    // An exact copy, so that a read past the private data is a read past a heap block.
    std::vector<std::uint8_t> priv(data + skip, data + size);
    const void* p = priv.empty() ? nullptr : priv.data();
    RcCmData out;
    RcCmDataError error = loom::uct::ib::parse_cm_data(p, priv.size(), seg_size, out);
    std::string line = loom::uct::ib::describe_cm_data(error, out, priv.size(), seg_size);
    check(!line.empty(), "an empty log line");
    if (out.user != nullptr) {  // also after a refusal of the window or the segment size
        check(out.user_len == out.header.user_len, "the user's part is not the header's length");
        check(out.user == priv.data() + sizeof(loom::uct::ib::RcCmPrivate),
              "the user's part is not after the header");
        check(out.user + out.user_len <= priv.data() + priv.size(), "the user's part runs past the data");
    }
    if (error != RcCmDataError::none) return 0;
    check(out.user != nullptr, "accepted data without its user part");
    check(out.header.version == loom::uct::ib::kRcAddrVersion, "accepted another version");
    check(seg_size == 0 || (out.header.window != 0 && out.header.seg_size == seg_size),
          "accepted a connection whose window or segment size cannot work");
    // What the listener does with it: the user's part is copied for the application.
    std::vector<std::uint8_t> user(out.user, out.user + out.user_len);
    check(user.size() == out.user_len, "copy");
    return 0;
}
