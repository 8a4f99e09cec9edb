/**
 * Active messages through the UCX API, two workers of one context in this process over
 * shm,self and tcp: the UCX 1.x calls MPICH uses (ucp_worker_set_am_handler,
 * ucp_am_send_nb, replies, data kept with UCS_INPROGRESS and ucp_am_data_release, large
 * messages delivered whole), and the newer ones (ucp_worker_set_am_recv_handler,
 * ucp_am_send_nbx with headers, rendezvous fetched with ucp_am_recv_data_nbx).
 */
#include "ucx_compat_test.h"

#include <deque>

namespace ucx_compat {
namespace {

class AmTest : public PairTest {};

/** What a UCX 1.x handler received. */
struct OldAm {
    struct Msg {
        std::vector<char> data;
        ucp_ep_h reply_ep;
        unsigned flags;
        void* kept;  ///< the data pointer, when the handler kept it
    };
    std::vector<Msg> msgs;
    bool keep = false;  ///< keep data that comes with UCP_CB_PARAM_FLAG_DATA (return UCS_INPROGRESS)
    /** Reply on the reply endpoint with this id (0: no reply). */
    std::uint16_t reply_id = 0;
    std::vector<ucs_status_ptr_t> replies;
};

ucs_status_t old_handler(void* arg, void* data, size_t length, ucp_ep_h reply_ep, unsigned flags) {
    auto* s = static_cast<OldAm*>(arg);
    const char* d = static_cast<const char*>(data);
    const bool keep = s->keep && (flags & UCP_CB_PARAM_FLAG_DATA);
    s->msgs.push_back({std::vector<char>(d, d + length), reply_ep, flags, keep ? data : nullptr});
    if (s->reply_id != 0 && reply_ep != nullptr) {
        // Reply from inside the handler, as MPICH's active-message protocols do.
        std::uint64_t n = s->msgs.size();
        s->replies.push_back(
            ucp_am_send_nb(reply_ep, s->reply_id, &n, sizeof(n), ucp_dt_make_contig(1), nullptr, 0));
    }
    return keep ? UCS_INPROGRESS : UCS_OK;
}

TEST_P(AmTest, UcxOneHandlerGetsWholeMessagesOfAnySizeInOrder) {
    OldAm st;
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_handler(p.w[1], 5, old_handler, &st, UCP_AM_FLAG_WHOLE_MSG));
    const std::size_t sizes[] = {0, 1, 8, 12000, 300000, 1 << 20, 4 << 20, 16};
    std::vector<std::vector<char>> sent;
    std::vector<ucs_status_ptr_t> reqs;
    for (std::size_t size : sizes) {
        sent.push_back(pattern(size, static_cast<unsigned>(size) + 1));
        ucs_status_ptr_t r =
            ucp_am_send_nb(p.ep[0], 5, sent.back().data(), size, ucp_dt_make_contig(1), send_cb, 0);
        ASSERT_FALSE(UCS_PTR_IS_ERR(r)) << ucs_status_string(UCS_PTR_STATUS(r));
        if (r != nullptr) take_request(r);
        reqs.push_back(r);
    }
    ASSERT_TRUE(p.progress_until([&] { return st.msgs.size() == std::size(sizes); }))
        << st.msgs.size() << " of " << std::size(sizes) << " messages arrived";
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
        SCOPED_TRACE(sizes[i]);
        EXPECT_EQ(sent[i], st.msgs[i].data) << "not the whole message, or out of order";
        EXPECT_EQ(nullptr, st.msgs[i].reply_ep) << "no reply endpoint without UCP_AM_SEND_REPLY";
    }
    for (ucs_status_ptr_t r : reqs) {
        if (r == nullptr) continue;
        ASSERT_TRUE(p.progress_until([&] { return static_cast<UserReq*>(r)->completed == 1; }));
        EXPECT_EQ(UCS_OK, static_cast<UserReq*>(r)->status);
        ucp_request_free(r);
    }
    // Wider elements: count is in elements.
    std::uint32_t words[4] = {1, 2, 3, 4};
    EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nb(p.ep[0], 5, words, 4, ucp_dt_make_contig(4), nullptr, 0)));
    ASSERT_TRUE(p.progress_until([&] { return st.msgs.size() == std::size(sizes) + 1; }));
    EXPECT_EQ(16u, st.msgs.back().data.size());
    // Removing the handler: its messages are dropped, nothing crashes; registering again works.
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_handler(p.w[1], 5, nullptr, nullptr, 0));
    char c = 'q';
    EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nb(p.ep[0], 5, &c, 1, ucp_dt_make_contig(1), nullptr, 0)));
    // A sync tagged message behind it on the same endpoint: once matched, the AM was processed.
    std::uint64_t v = 0;
    ucp_request_param_t np{};
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], &v, sizeof(v), 1, ~0ull, &np);
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_sync_nbx(p.ep[0], &v, sizeof(v), 1, &np)));
    EXPECT_EQ(UCS_OK, p.wait(rr));
    EXPECT_EQ(std::size(sizes) + 1, st.msgs.size()) << "a message reached a removed handler";
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_handler(p.w[1], 5, old_handler, &st, 0));
    c = 'r';
    EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nb(p.ep[0], 5, &c, 1, ucp_dt_make_contig(1), nullptr, 0)));
    ASSERT_TRUE(p.progress_until([&] { return st.msgs.size() >= std::size(sizes) + 2; }));
    progress_rounds({p.w[0], p.w[1]}, 100);
    ASSERT_EQ(std::size(sizes) + 2, st.msgs.size());
    EXPECT_EQ(std::vector<char>{'r'}, st.msgs.back().data);
}

TEST_P(AmTest, UcxOneReplyFromTheHandler) {
    OldAm server, client;
    server.reply_id = 7;
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_handler(p.w[1], 6, old_handler, &server, UCP_AM_FLAG_WHOLE_MSG));
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_handler(p.w[0], 7, old_handler, &client, UCP_AM_FLAG_WHOLE_MSG));
    for (std::size_t size : {8ul, 300000ul}) {
        auto data = pattern(size, 2);
        EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nb(p.ep[0], 6, data.data(), size, ucp_dt_make_contig(1), nullptr,
                                                UCP_AM_SEND_REPLY)));
    }
    ASSERT_TRUE(p.progress_until([&] { return client.msgs.size() == 2; }));
    ASSERT_EQ(2u, server.msgs.size());
    for (auto& m : server.msgs)
        EXPECT_NE(nullptr, m.reply_ep) << "UCP_AM_SEND_REPLY gives the handler a reply endpoint";
    std::uint64_t n = 0;
    std::memcpy(&n, client.msgs[1].data.data(), sizeof(n));
    EXPECT_EQ(2u, n);
    for (ucs_status_ptr_t r : server.replies) EXPECT_EQ(UCS_OK, p.wait(r));
}

/** Data kept by returning UCS_INPROGRESS (UCP_CB_PARAM_FLAG_DATA) stays valid until ucp_am_data_release. */
TEST_P(AmTest, UcxOneKeptDataUntilRelease) {
    OldAm st;
    st.keep = true;
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_handler(p.w[1], 8, old_handler, &st,
                                                UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA));
    std::vector<std::vector<char>> sent;
    for (std::size_t size : {64ul, 5000ul, 12000ul, 300000ul, 64ul}) {
        sent.push_back(pattern(size, static_cast<unsigned>(sent.size()) + 40));
        EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nb(p.ep[0], 8, sent.back().data(), size, ucp_dt_make_contig(1),
                                                nullptr, 0)));
    }
    ASSERT_TRUE(p.progress_until([&] { return st.msgs.size() == sent.size(); }));
    // More traffic on the same worker, so that anything not really kept would be overwritten.
    OldAm other;
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_handler(p.w[1], 9, old_handler, &other, 0));
    for (int i = 0; i < 200; ++i) {
        auto junk = pattern(4096, 1000 + i);
        EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nb(p.ep[0], 9, junk.data(), junk.size(), ucp_dt_make_contig(1),
                                                nullptr, 0)));
    }
    ASSERT_TRUE(p.progress_until([&] { return other.msgs.size() == 200; }));
    for (std::size_t i = 0; i < sent.size(); ++i) {
        SCOPED_TRACE(sent[i].size());
        ASSERT_NE(0u, st.msgs[i].flags & UCP_CB_PARAM_FLAG_DATA)
            << "persistent data comes with UCP_CB_PARAM_FLAG_DATA";
        ASSERT_NE(nullptr, st.msgs[i].kept);
        EXPECT_EQ(0, std::memcmp(st.msgs[i].kept, sent[i].data(), sent[i].size()))
            << "kept data changed before its release";
        ucp_am_data_release(p.w[1], st.msgs[i].kept);
    }
    ucp_am_data_release(nullptr, nullptr);  // ignored
}

/**
 * A rendezvous message (of a newer sender) cannot be handed whole to a UCX 1.x handler: dropped, logged, no
 * crash.
 */
TEST_P(AmTest, UcxOneHandlerGivenARendezvousDropsIt) {
    OldAm st;
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_handler(p.w[1], 10, old_handler, &st, UCP_AM_FLAG_WHOLE_MSG));
    auto data = pattern(1000, 3);
    Done sd;
    ucp_request_param_t sp = send_param(&sd, UCP_OP_ATTR_FIELD_FLAGS);
    sp.flags = UCP_AM_SEND_FLAG_RNDV;
    testing::internal::CaptureStderr();
    ucs_status_ptr_t r = ucp_am_send_nbx(p.ep[0], 10, nullptr, 0, data.data(), data.size(), &sp);
    const ucs_status_t s = p.wait(r);
    // Then an eager one: it still arrives.
    const ucs_status_t s2 =
        p.wait(ucp_am_send_nb(p.ep[0], 10, data.data(), 10, ucp_dt_make_contig(1), nullptr, 0));
    const bool arrived = p.progress_until([&] { return st.msgs.size() == 1; });
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(UCS_ERR_TIMED_OUT, s) << "the rendezvous sender hung";
    EXPECT_EQ(UCS_OK, s2);
    ASSERT_TRUE(arrived);
    EXPECT_EQ(10u, st.msgs[0].data.size());
    EXPECT_EQ(1, layer_log_lines(err)) << err;
}

// --- the newer API ------------------------------------------------------------------------------

/** What a ucp_worker_set_am_recv_handler handler received. */
struct NewAm {
    enum class Mode { copy, keep, fetch_now, fetch_now_return_ok, defer, drop, truncate };
    Mode mode = Mode::copy;
    ucp_worker_h worker = nullptr;
    struct Msg {
        std::vector<char> header;
        std::vector<char> data;  ///< copied (eager) or fetched (rendezvous)
        std::size_t length;
        std::uint64_t attr;
        ucp_ep_h reply_ep;
        void* desc;  ///< kept data or a deferred rendezvous descriptor
        Done fetch;  ///< the fetch's callback
        ucs_status_ptr_t fetch_req;
        bool fetched_at_once;
        std::size_t at_once_length;
    };
    std::deque<Msg> msgs;  ///< stable addresses: a fetch's callback writes into its Msg
};

ucs_status_t new_handler(void* arg, const void* header, size_t header_length, void* data, size_t length,
                         const ucp_am_recv_param_t* param) {
    auto* s = static_cast<NewAm*>(arg);
    s->msgs.emplace_back();
    NewAm::Msg& m = s->msgs.back();
    const char* h = static_cast<const char*>(header);
    m.header.assign(h, h + header_length);
    m.length = length;
    m.attr = param->recv_attr;
    m.reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
    m.desc = nullptr;
    m.fetch_req = nullptr;
    m.fetched_at_once = false;
    const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
    if (!rndv) {
        const char* d = static_cast<const char*>(data);
        m.data.assign(d, d + length);
        if (s->mode == NewAm::Mode::keep && (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)) {
            m.desc = data;
            return UCS_INPROGRESS;
        }
        return UCS_OK;
    }
    switch (s->mode) {
        case NewAm::Mode::fetch_now:
        case NewAm::Mode::fetch_now_return_ok:
        case NewAm::Mode::truncate: {
            const std::size_t room = s->mode == NewAm::Mode::truncate ? length / 2 : length;
            m.data.assign(room, 0);
            ucp_request_param_t rp{};
            rp.op_attr_mask =
                UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_RECV_INFO;
            rp.cb.recv_am = am_data_cb;
            rp.user_data = &m.fetch;
            rp.recv_info.length = &m.at_once_length;
            m.fetch_req = ucp_am_recv_data_nbx(s->worker, data, m.data.data(), room, &rp);
            m.fetched_at_once = !UCS_PTR_IS_PTR(m.fetch_req);
            return s->mode == NewAm::Mode::fetch_now_return_ok ? UCS_OK : UCS_INPROGRESS;
        }
        case NewAm::Mode::defer:
        case NewAm::Mode::drop:
            m.desc = data;
            return UCS_INPROGRESS;
        default:
            return UCS_OK;
    }
}

ucp_am_handler_param_t handler_param(unsigned id, NewAm* st, std::uint32_t flags = 0) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = id;
    hp.cb = new_handler;
    hp.arg = st;
    hp.flags = flags;
    return hp;
}

TEST_P(AmTest, NbxEagerWithHeaderReplyAndKeptData) {
    NewAm st;
    st.worker = p.w[1];
    st.mode = NewAm::Mode::keep;
    ucp_am_handler_param_t hp = handler_param(20, &st, UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA);
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_recv_handler(p.w[1], &hp));
    ucp_worker_attr_t wa{};
    wa.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    ASSERT_EQ(UCS_OK, ucp_worker_query(p.w[0], &wa));
    ASSERT_GE(wa.max_am_header, 64u);
    auto header = pattern(wa.max_am_header, 77);
    auto data = pattern(3000, 78);
    std::vector<std::pair<std::size_t, std::size_t>> shapes = {
        {0, 0}, {8, 0}, {0, 100}, {16, 3000}, {wa.max_am_header, 3000}};
    for (auto [hlen, dlen] : shapes) {
        Done sd;
        ucp_request_param_t sp = send_param(&sd, UCP_OP_ATTR_FIELD_FLAGS);
        sp.flags = UCP_AM_SEND_FLAG_REPLY;
        EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nbx(p.ep[0], 20, hlen ? header.data() : nullptr, hlen,
                                                 dlen ? data.data() : nullptr, dlen, &sp)));
    }
    ASSERT_TRUE(p.progress_until([&] { return st.msgs.size() == shapes.size(); }));
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        auto [hlen, dlen] = shapes[i];
        SCOPED_TRACE(testing::Message() << "header " << hlen << ", data " << dlen);
        const NewAm::Msg& m = st.msgs[i];
        EXPECT_TRUE(std::equal(m.header.begin(), m.header.end(), header.begin()));
        EXPECT_EQ(hlen, m.header.size());
        EXPECT_EQ(dlen, m.length);
        EXPECT_TRUE(std::equal(m.data.begin(), m.data.end(), data.begin()));
        EXPECT_EQ(0u, m.attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
        EXPECT_NE(nullptr, m.reply_ep);
        EXPECT_NE(0u, m.attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP);
        if (m.desc != nullptr) {
            EXPECT_EQ(0, std::memcmp(m.desc, data.data(), dlen)) << "kept data changed";
            ucp_am_data_release(p.w[1], m.desc);
        }
    }
    // A reply through the reply endpoint reaches the sender's worker.
    NewAm back;
    back.worker = p.w[0];
    ucp_am_handler_param_t bp = handler_param(21, &back);
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_recv_handler(p.w[0], &bp));
    ucp_request_param_t rp{};
    char c = 'r';
    EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nbx(st.msgs[0].reply_ep, 21, nullptr, 0, &c, 1, &rp)));
    ASSERT_TRUE(p.progress_until([&] { return back.msgs.size() == 1; }));
    EXPECT_EQ(std::vector<char>{'r'}, back.msgs[0].data);
    EXPECT_EQ(nullptr, back.msgs[0].reply_ep);
}

/**
 * Rendezvous: the handler gets a descriptor and fetches the data with ucp_am_recv_data_nbx (now, later), or
 * drops it.
 */
TEST_P(AmTest, NbxRendezvousFetchedWithRecvData) {
    NewAm st;
    st.worker = p.w[1];
    ucp_am_handler_param_t hp = handler_param(30, &st, UCP_AM_FLAG_WHOLE_MSG);
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_recv_handler(p.w[1], &hp));
    const char hdr[] = "rndv-header";
    for (NewAm::Mode mode : {NewAm::Mode::fetch_now, NewAm::Mode::fetch_now_return_ok, NewAm::Mode::defer,
                             NewAm::Mode::drop, NewAm::Mode::truncate}) {
        for (std::size_t size : {1000ul, 4ul << 20}) {
            SCOPED_TRACE(testing::Message() << "mode " << static_cast<int>(mode) << ", " << size << " bytes");
            st.mode = mode;
            st.msgs.clear();
            auto data = pattern(size, static_cast<unsigned>(size) + static_cast<unsigned>(mode));
            Done sd;
            ucp_request_param_t sp = send_param(&sd, UCP_OP_ATTR_FIELD_FLAGS);
            sp.flags = size < 4096 ? UCP_AM_SEND_FLAG_RNDV : 0;  // small: forced; large: by size
            ucs_status_ptr_t sr = ucp_am_send_nbx(p.ep[0], 30, hdr, sizeof(hdr), data.data(), size, &sp);
            ASSERT_FALSE(UCS_PTR_IS_ERR(sr));
            ASSERT_TRUE(p.progress_until([&] { return st.msgs.size() == 1; }));
            NewAm::Msg& m = st.msgs[0];
            ASSERT_NE(0u, m.attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
            EXPECT_EQ(size, m.length);
            EXPECT_EQ(std::string(hdr), std::string(m.header.data()));
            if (mode == NewAm::Mode::defer) {
                ASSERT_NE(nullptr, m.desc);
                m.data.assign(size, 0);
                ucp_request_param_t rp{};
                rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
                rp.cb.recv_am = am_data_cb;
                rp.user_data = &m.fetch;
                m.fetch_req = ucp_am_recv_data_nbx(p.w[1], m.desc, m.data.data(), size, &rp);
                m.fetched_at_once = !UCS_PTR_IS_PTR(m.fetch_req);
            } else if (mode == NewAm::Mode::drop) {
                ASSERT_NE(nullptr, m.desc);
                ucp_am_data_release(p.w[1], m.desc);
            }
            if (mode != NewAm::Mode::drop) {
                const ucs_status_t want = mode == NewAm::Mode::truncate ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK;
                if (m.fetched_at_once) {
                    EXPECT_EQ(want, status_of(m.fetch_req));
                    if (want == UCS_OK && mode != NewAm::Mode::defer) {
                        EXPECT_EQ(size, m.at_once_length) << "recv_info.length of a fetch done at once";
                    }
                } else {
                    ASSERT_TRUE(p.progress_until([&] { return m.fetch.calls == 1; }));
                    EXPECT_EQ(want, m.fetch.status) << ucs_status_string(m.fetch.status);
                    EXPECT_EQ(size, m.fetch.length) << "the callback gets the message's length";
                    EXPECT_EQ(m.fetch_req, m.fetch.request);
                    ucp_request_free(m.fetch_req);
                }
                if (want == UCS_OK) {
                    EXPECT_EQ(data, m.data);
                }
            }
            // The sender completes (OK; a truncating or dropping receiver does not fail it with a hang).
            const ucs_status_t ss = p.wait(sr);
            EXPECT_FALSE(ss == UCS_ERR_TIMED_OUT);
            if (mode != NewAm::Mode::truncate) {
                EXPECT_EQ(UCS_OK, ss) << ucs_status_string(ss);
            }
            if (sr != nullptr) {
                EXPECT_EQ(1, sd.calls);
            }
        }
    }
}

/** Large eager (UCP_AM_SEND_FLAG_EAGER) messages arrive whole at a newer handler too. */
TEST_P(AmTest, NbxForcedEagerLargeArrivesWhole) {
    NewAm st;
    st.worker = p.w[1];
    ucp_am_handler_param_t hp = handler_param(31, &st, UCP_AM_FLAG_WHOLE_MSG);
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_recv_handler(p.w[1], &hp));
    auto data = pattern(2 << 20, 31);
    ucp_request_param_t sp{};
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    sp.flags = UCP_AM_SEND_FLAG_EAGER;
    EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nbx(p.ep[0], 31, nullptr, 0, data.data(), data.size(), &sp)));
    ASSERT_TRUE(p.progress_until([&] { return st.msgs.size() == 1; }));
    EXPECT_EQ(0u, st.msgs[0].attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
    EXPECT_EQ(data, st.msgs[0].data);
    // Handler removal through the newer call.
    ucp_am_handler_param_t rm{};
    rm.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    rm.id = 31;
    rm.cb = nullptr;
    EXPECT_EQ(UCS_OK, ucp_worker_set_am_recv_handler(p.w[1], &rm));
    char c = 1;
    ucp_request_param_t np{};
    EXPECT_EQ(UCS_OK, p.wait(ucp_am_send_nbx(p.ep[0], 31, nullptr, 0, &c, 1, &np)));
    progress_rounds({p.w[0], p.w[1]}, 100);
    EXPECT_EQ(1u, st.msgs.size()) << "a removed handler ran";
}

TEST_P(AmTest, UnknownSendFlagsAreInvalid) {
    char c = 0;
    testing::internal::CaptureStderr();
    ucs_status_ptr_t r = ucp_am_send_nb(p.ep[0], 5, &c, 1, ucp_dt_make_contig(1), nullptr, 1u << 9);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, UCS_PTR_STATUS(r));
    EXPECT_EQ(1, layer_log_lines(err)) << err;
    ucp_request_param_t sp{};
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    sp.flags = UCP_AM_SEND_FLAG_REPLY | (1u << 12);
    testing::internal::CaptureStderr();
    r = ucp_am_send_nbx(p.ep[0], 5, nullptr, 0, &c, 1, &sp);
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, UCS_PTR_STATUS(r));
    EXPECT_EQ(1, layer_log_lines(err)) << err;
    // A handler parameter without an id or a callback field.
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID;
    hp.id = 1;
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_set_am_recv_handler(p.w[1], &hp));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_set_am_recv_handler(p.w[1], nullptr));
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(2, layer_log_lines(err)) << err;
}

INSTANTIATE_TEST_SUITE_P(Tls, AmTest, testing::ValuesIn(kLocalTls), tls_name);

}  // namespace
}  // namespace ucx_compat
