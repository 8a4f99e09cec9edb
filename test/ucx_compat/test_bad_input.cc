/**
 * What a caller can get wrong: NULL parameters and handles, datatypes and memory types
 * the layer cannot honour (a status and one "[loom-ucx" line on stderr each), garbage
 * worker addresses. The process never aborts.
 */
#include "ucx_compat_test.h"

#include <algorithm>

namespace ucx_compat {
namespace {

class BadInputTest : public PairTest {};

/** A strided datatype (UCX declares the class; neither UCX 1.13 nor Loom implements it). */
constexpr ucp_datatype_t kStrided = (ucp_datatype_t{16} << UCP_DATATYPE_SHIFT) | UCP_DATATYPE_STRIDED;

/** Runs @p call with stderr captured; expects @p want and exactly one line on stderr, the layer's. */
template <typename F>
void expect_refused(const char* what, ucs_status_t want, F call) {
    SCOPED_TRACE(what);
    testing::internal::CaptureStderr();
    const ucs_status_t s = call();
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(want, s) << ucs_status_string(s);
    EXPECT_EQ(1, layer_log_lines(err)) << "stderr:\n" << err;
    EXPECT_EQ(1, std::count(err.begin(), err.end(), '\n')) << "one line, nothing else:\n" << err;
}

TEST_P(BadInputTest, StridedDatatypeIsUnsupportedEverywhere) {
    char buf[256] = {0};
    ucp_request_param_t dp{};
    dp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    dp.datatype = kStrided;
    expect_refused("ucp_tag_send_nbx", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_send_nbx(p.ep[0], buf, 4, 1, &dp)); });
    expect_refused("ucp_tag_send_sync_nbx", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_send_sync_nbx(p.ep[0], buf, 4, 1, &dp)); });
    expect_refused("ucp_tag_recv_nbx", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_recv_nbx(p.w[1], buf, 4, 1, ~0ull, &dp)); });
    expect_refused("ucp_tag_send_nb", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_send_nb(p.ep[0], buf, 4, kStrided, 1, send_cb)); });
    expect_refused("ucp_tag_send_sync_nb", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_send_sync_nb(p.ep[0], buf, 4, kStrided, 1, send_cb)); });
    expect_refused("ucp_tag_recv_nb", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_recv_nb(p.w[1], buf, 4, kStrided, 1, ~0ull, recv_cb)); });
    const std::size_t rs = p.context->request_size();
    std::vector<char> req(rs + 64);
    expect_refused("ucp_tag_send_nbr", UCS_ERR_UNSUPPORTED,
                   [&] { return ucp_tag_send_nbr(p.ep[0], buf, 4, kStrided, 1, req.data() + rs); });
    expect_refused("ucp_tag_recv_nbr", UCS_ERR_UNSUPPORTED,
                   [&] { return ucp_tag_recv_nbr(p.w[1], buf, 4, kStrided, 1, ~0ull, req.data() + rs); });
    expect_refused("ucp_am_send_nb", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_am_send_nb(p.ep[0], 1, buf, 4, kStrided, nullptr, 0)); });
    expect_refused("ucp_am_send_nbx", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_am_send_nbx(p.ep[0], 1, nullptr, 0, buf, 4, &dp)); });
    ucp_tag_recv_info_t info{};
    std::uint64_t v = 8;
    ucp_request_param_t sp{};
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 0x99, &sp)));
    ucp_tag_message_h m = nullptr;
    ASSERT_TRUE(
        p.progress_until([&] { return (m = ucp_tag_probe_nb(p.w[1], 0x99, ~0ull, 1, &info)) != nullptr; }));
    expect_refused("ucp_tag_msg_recv_nbx", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_msg_recv_nbx(p.w[1], buf, 4, m, &dp)); });
    expect_refused("ucp_tag_msg_recv_nb", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_msg_recv_nb(p.w[1], buf, 4, kStrided, m, recv_cb)); });
    // The message was not consumed by the refused calls.
    std::uint64_t o = 0;
    ucp_request_param_t mp{};
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_msg_recv_nbx(p.w[1], &o, sizeof(o), m, &mp)));
    EXPECT_EQ(8u, o);
    // The endpoint is unharmed.
    ucp_request_param_t rp{};
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], &o, sizeof(o), 2, ~0ull, &rp);
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 2, &sp)));
    EXPECT_EQ(UCS_OK, p.wait(rr));
}

TEST_P(BadInputTest, DeviceMemoryTypeIsUnsupported) {
    char buf[64] = {0};
    ucp_request_param_t dp{};
    dp.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    dp.memory_type = UCS_MEMORY_TYPE_CUDA;
    expect_refused("ucp_tag_send_nbx", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_send_nbx(p.ep[0], buf, 4, 1, &dp)); });
    expect_refused("ucp_tag_recv_nbx", UCS_ERR_UNSUPPORTED,
                   [&] { return status_of(ucp_tag_recv_nbx(p.w[1], buf, 4, 1, ~0ull, &dp)); });
    // Host (and unknown, which UCX takes as "detect") are fine.
    dp.memory_type = UCS_MEMORY_TYPE_HOST;
    ucp_request_param_t rp = dp;
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], buf + 32, 4, 3, ~0ull, &rp);
    dp.memory_type = UCS_MEMORY_TYPE_UNKNOWN;
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], buf, 4, 3, &dp)));
    EXPECT_EQ(UCS_OK, p.wait(rr));
}

TEST_P(BadInputTest, NullParametersAndHandles) {
    // Contexts.
    ucp_context_h ctx = nullptr;
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_init(nullptr, nullptr, &ctx));
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_init(&params, nullptr, nullptr));
    EXPECT_EQ(2, layer_log_lines(testing::internal::GetCapturedStderr()));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_context_query(nullptr, nullptr));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_context_query(p.ctx, nullptr));
    // Workers.
    ucp_worker_h w = nullptr;
    ucp_worker_params_t wp{};
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_create(nullptr, &wp, &w));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_create(p.ctx, &wp, nullptr));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_query(p.w[0], nullptr));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_query(nullptr, nullptr));
    size_t n = 0;
    ucp_address_t* a = nullptr;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_get_address(nullptr, &a, &n));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_set_am_handler(nullptr, 1, nullptr, nullptr, 0));
    // Endpoints.
    ucp_ep_h ep = nullptr;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_ep_create(p.w[0], nullptr, &ep));
    ucp_ep_params_t ep_params{};
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_ep_create(nullptr, &ep_params, &ep));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_ep_create(p.w[0], &ep_params, nullptr));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, status_of(ucp_ep_close_nbx(nullptr, nullptr)));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, status_of(ucp_ep_close_nb(nullptr, UCP_EP_CLOSE_MODE_FLUSH)));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, status_of(ucp_disconnect_nb(nullptr)));
    ucp_ep_destroy(nullptr);
    ucp_ep_print_info(nullptr, nullptr);
    // No address field: nothing to connect to.
    testing::internal::CaptureStderr();
    const ucs_status_t s = ucp_ep_create(p.w[0], &ep_params, &ep);
    (void)testing::internal::GetCapturedStderr();
    EXPECT_TRUE(UCS_STATUS_IS_ERR(s)) << ucs_status_string(s);
    // Datatypes.
    ucp_datatype_t dt = 0;
    ucp_generic_dt_ops_t ops{};
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_dt_create_generic(nullptr, nullptr, &dt));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_dt_create_generic(&ops, nullptr, nullptr));
    // Requests.
    ucp_request_free(nullptr);
    ucp_request_release(nullptr);
    ucp_request_cancel(nullptr, nullptr);
    ucp_request_cancel(p.w[0], nullptr);
    // Memory.
    ucp_mem_h memh = nullptr;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_mem_map(nullptr, nullptr, &memh));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_mem_map(p.ctx, nullptr, nullptr));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_mem_advise(nullptr, nullptr, nullptr));
    ucp_rkey_buffer_release(nullptr);
    // NULL parameters of the _nbx calls are the defaults (bytes, no callback).
    std::uint64_t v = 3, o = 0;
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], &o, sizeof(o), 1, ~0ull, nullptr);
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 1, nullptr)));
    EXPECT_EQ(UCS_OK, p.wait(rr));
    EXPECT_EQ(3u, o);
    EXPECT_EQ(UCS_OK, p.wait(ucp_ep_flush_nbx(p.ep[0], nullptr)));
    EXPECT_EQ(UCS_OK, p.wait(ucp_worker_flush_nbx(p.w[0], nullptr)));
}

/** ucp_ep_create reads an address the caller vouches for: garbage is refused with a status, never a crash. */
TEST_P(BadInputTest, GarbageWorkerAddresses) {
    auto good = worker_address(p.w[1]);
    ASSERT_GT(good.size(), 4u);
    auto attempt = [&](std::vector<std::uint8_t> addr, const char* what) {
        SCOPED_TRACE(what);
        addr.resize(64 * 1024, 0);
        ucp_ep_h ep = nullptr;
        testing::internal::CaptureStderr();
        const ucs_status_t s = connect(p.w[0], addr.data(), &ep);
        const std::string err = testing::internal::GetCapturedStderr();
        EXPECT_TRUE(UCS_STATUS_IS_ERR(s)) << ucs_status_string(s);
        EXPECT_EQ(nullptr, ep);
        EXPECT_GE(layer_log_lines(err), 1) << err;
        if (s == UCS_OK) close_force(ep, {p.w[0], p.w[1]});
    };
    attempt({}, "all zeros");
    attempt(std::vector<std::uint8_t>(1024, 0xff), "all ones");
    auto v = good;
    v[0] ^= 0x20;
    attempt(v, "wrong magic");
    v = good;
    v[1] += 1;
    attempt(v, "another version");
    v = good;
    v[2] = 0xff;
    attempt(v, "transport count");
    // Its stated length (bytes 4..7), shorter or longer than its entries: the UCX API passes
    // no length, so the stated one bounds the read (a huge one is the caller's overrun).
    std::uint32_t total = 0;
    std::memcpy(&total, good.data() + 4, 4);
    ASSERT_EQ(good.size(), total);
    for (std::uint32_t len : {0u, 3u, 16u, total - 1, total + 8}) {
        v = good;
        std::memcpy(v.data() + 4, &len, 4);
        attempt(v, ("stated length " + std::to_string(len)).c_str());
    }
}

INSTANTIATE_TEST_SUITE_P(Tls, BadInputTest, testing::ValuesIn(kLocalTls), tls_name);

}  // namespace
}  // namespace ucx_compat
