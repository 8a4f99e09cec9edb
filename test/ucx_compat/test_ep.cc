/**
 * Endpoints and flushes through the UCX API, two workers in this process: the
 * non-blocking flushes of endpoints and workers in every form, every way of closing an
 * endpoint (ucp_ep_close_nb in both modes, ucp_ep_close_nbx with and without the force
 * flag, ucp_disconnect_nb, ucp_ep_destroy), and a worker destroyed with work
 * outstanding. The blocking flushes are in test_multiproc.cc (they progress only the
 * caller's worker).
 */
#include "ucx_compat_test.h"

namespace ucx_compat {
namespace {

class EpTest : public PairTest {};

TEST_P(EpTest, FlushEveryNonBlockingForm) {
    auto data = pattern(300000, 1);
    for (int form = 0; form < 5; ++form) {
        SCOPED_TRACE(form);
        // Something to flush: eager sends, and one rendezvous the receiver takes.
        std::vector<char> out(data.size());
        ucp_request_param_t rp{};
        ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], out.data(), out.size(), 2, ~0ull, &rp);
        std::vector<ucs_status_ptr_t> sends;
        for (int i = 0; i < 10; ++i) {
            ucp_request_param_t sp{};
            sends.push_back(ucp_tag_send_nbx(p.ep[0], data.data(), 100, 1, &sp));
        }
        ucp_request_param_t sp{};
        sends.push_back(ucp_tag_send_nbx(p.ep[0], data.data(), data.size(), 2, &sp));
        Done d;
        ucs_status_ptr_t f = nullptr;
        switch (form) {
            case 0: {
                ucp_request_param_t fp = send_param(&d);
                f = ucp_ep_flush_nbx(p.ep[0], &fp);
                break;
            }
            case 1: {
                ucp_request_param_t fp = send_param(&d, UCP_OP_ATTR_FLAG_NO_IMM_CMPL);
                f = ucp_ep_flush_nbx(p.ep[0], &fp);
                EXPECT_TRUE(UCS_PTR_IS_PTR(f)) << "NO_IMM_CMPL returns a request";
                EXPECT_EQ(0, d.calls) << "callback inside the call";
                break;
            }
            case 2:
                f = ucp_ep_flush_nb(p.ep[0], 0, send_cb);
                break;
            case 3: {
                ucp_request_param_t fp = send_param(&d);
                f = ucp_worker_flush_nbx(p.w[0], &fp);
                break;
            }
            case 4:
                f = ucp_worker_flush_nb(p.w[0], 0, send_cb);
                break;
        }
        ASSERT_FALSE(UCS_PTR_IS_ERR(f)) << ucs_status_string(status_of(f));
        if (UCS_PTR_IS_PTR(f) && (form == 2 || form == 4)) take_request(f);
        const ucs_status_ptr_t fr = f;
        EXPECT_EQ(UCS_OK, p.wait(f));
        if (fr != nullptr && (form == 0 || form == 1 || form == 3)) {
            EXPECT_EQ(1, d.calls);
            EXPECT_EQ(UCS_OK, d.status);
        }
        EXPECT_EQ(UCS_OK, p.wait(rr));
        EXPECT_EQ(data, out);
        for (ucs_status_ptr_t s : sends) EXPECT_EQ(UCS_OK, p.wait(s));
        // The eager messages are all there.
        for (int i = 0; i < 10; ++i) {
            char small[100];
            ucp_request_param_t srp{};
            EXPECT_EQ(UCS_OK, p.wait(ucp_tag_recv_nbx(p.w[1], small, sizeof(small), 1, ~0ull, &srp)));
        }
    }
    EXPECT_EQ(UCS_OK, ucp_worker_fence(p.w[0]));
}

/**
 * Every way of closing: messages sent before a flushing close arrive; a forced close cancels what is
 * outstanding.
 */
TEST(UcpEpClose, EveryForm) {
    for (const char* tls : kLocalTls) {
        for (int form = 0; form < 6; ++form) {
            SCOPED_TRACE(testing::Message() << tls << ", form " << form);
            Pair p;
            ASSERT_TRUE(p.open(tls));
            const bool force = form == 1 || form == 3;
            std::uint64_t v = 1234 + form;
            ucp_request_param_t sp{};
            EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 5, &sp)));
            // A rendezvous nobody receives: a forced close completes it with an error.
            auto big = pattern(2 << 20, 3);
            Done bd;
            ucp_request_param_t bp = send_param(&bd);
            ucs_status_ptr_t big_req =
                force ? ucp_tag_send_nbx(p.ep[0], big.data(), big.size(), 6, &bp) : nullptr;
            ucs_status_ptr_t c = nullptr;
            Done cd;
            switch (form) {
                case 0:
                    c = ucp_ep_close_nb(p.ep[0], UCP_EP_CLOSE_MODE_FLUSH);
                    break;
                case 1:
                    c = ucp_ep_close_nb(p.ep[0], UCP_EP_CLOSE_MODE_FORCE);
                    break;
                case 2: {
                    ucp_request_param_t cp = send_param(&cd);
                    c = ucp_ep_close_nbx(p.ep[0], &cp);
                    break;
                }
                case 3: {
                    ucp_request_param_t cp = send_param(&cd, UCP_OP_ATTR_FIELD_FLAGS);
                    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
                    c = ucp_ep_close_nbx(p.ep[0], &cp);
                    break;
                }
                case 4:
                    c = ucp_disconnect_nb(p.ep[0]);
                    break;
                case 5:
                    ucp_ep_destroy(p.ep[0]);
                    break;  // blocking
            }
            p.ep[0] = nullptr;  // gone, whatever the outcome
            ASSERT_FALSE(UCS_PTR_IS_ERR(c)) << ucs_status_string(status_of(c));
            const ucs_status_ptr_t creq = c;
            const ucs_status_t cs = p.wait(c);
            EXPECT_TRUE(cs == UCS_OK || (force && UCS_STATUS_IS_ERR(cs))) << ucs_status_string(cs);
            if (creq != nullptr && (form == 2 || form == 3)) {
                EXPECT_EQ(1, cd.calls);
            }
            if (big_req != nullptr) {
                ASSERT_TRUE(UCS_PTR_IS_PTR(big_req));
                ASSERT_TRUE(p.progress_until([&] { return bd.calls == 1; }))
                    << "a forced close left a send hanging";
                EXPECT_TRUE(UCS_STATUS_IS_ERR(bd.status)) << ucs_status_string(bd.status);
                ucp_request_free(big_req);
            }
            if (!force) {
                // What was sent before a flushing close arrives.
                std::uint64_t o = 0;
                ucp_request_param_t rp{};
                EXPECT_EQ(UCS_OK, p.wait(ucp_tag_recv_nbx(p.w[1], &o, sizeof(o), 5, ~0ull, &rp)));
                EXPECT_EQ(v, o);
            }
            // The worker can connect again.
            auto a1 = worker_address(p.w[1]);
            ASSERT_EQ(UCS_OK, connect(p.w[0], a1.data(), &p.ep[0]));
            std::uint64_t again = 99, o = 0;
            ucp_request_param_t rp{};
            ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], &o, sizeof(o), 7, ~0ull, &rp);
            EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &again, sizeof(again), 7, &sp)));
            EXPECT_EQ(UCS_OK, p.wait(rr));
            EXPECT_EQ(99u, o);
        }
    }
}

TEST_P(EpTest, PrintInfo) {
    char* text = nullptr;
    size_t size = 0;
    FILE* f = ::open_memstream(&text, &size);
    ASSERT_NE(nullptr, f);
    ucp_ep_print_info(p.ep[0], f);
    std::fclose(f);
    EXPECT_GT(size, 0u);
    std::free(text);
    ucp_ep_print_info(p.ep[0], nullptr);
}

/**
 * A worker destroyed with a receive outstanding: the receive's callback reports an error, nothing hangs or
 * crashes.
 */
TEST(UcpWorkerDestroy, WithOutstandingWorkCancelsIt) {
    for (const char* tls : kLocalTls) {
        SCOPED_TRACE(tls);
        Pair p;
        ASSERT_TRUE(p.open(tls));
        std::uint64_t o = 0;
        Done rd;
        ucp_request_param_t rp = recv_param(&rd);
        // The callback frees its request (a common UCX pattern): nothing is left when the worker goes.
        rp.cb.recv = [](void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                        void* user_data) {
            recv_nbx_cb(request, status, info, user_data);
            ucp_request_free(request);
        };
        ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], &o, sizeof(o), 1, ~0ull, &rp);
        ASSERT_TRUE(UCS_PTR_IS_PTR(rr));
        ucp_worker_destroy(p.w[1]);
        p.w[1] = nullptr;
        p.ep[1] = nullptr;  // closed by the destroy
        EXPECT_EQ(1, rd.calls);
        EXPECT_EQ(UCS_ERR_CANCELED, rd.status) << ucs_status_string(rd.status);
        // The other worker's endpoint to it: closed by force.
        close_force(p.ep[0], {p.w[0]});
        p.ep[0] = nullptr;
    }
}

INSTANTIATE_TEST_SUITE_P(Tls, EpTest, testing::ValuesIn(kLocalTls), tls_name);

}  // namespace
}  // namespace ucx_compat
