/**
 * Active messages through the C API over self (one worker), shm and tcp (two workers in
 * this process), and between two real processes: every protocol by size with the data
 * checked, headers from 0 bytes to the limit, reply endpoints, kept data, rendezvous
 * receives (into user buffers, truncated, late, dropped), unknown ids, handler
 * replacement, many outstanding sends, ordering, bad parameters, and a receiver killed
 * in the middle of a rendezvous.
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp/core/ep.h"
#include "ucp_pair.h"
#include "ucp_side.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <sys/mman.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

using loom::test::TlSet;

std::vector<char> pattern(std::size_t n, unsigned seed) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 31 + seed * 7 + (i >> 8)) & 0xff);
    return v;
}

/** One message a handler saw. */
struct Message {
    std::vector<char> header;
    std::vector<char> data;       ///< eager data, or the rendezvous data once fetched
    std::size_t length = 0;       ///< what the handler was told
    std::uint64_t attr = 0;
    loom_ep_h reply_ep = nullptr;
    void* kept = nullptr;         ///< data pointer kept with LOOM_INPROGRESS
    void* desc = nullptr;         ///< rendezvous descriptor not fetched in the callback
    loom_status_t recv_status = LOOM_INPROGRESS;  ///< of the rendezvous fetch
    std::size_t recv_length = 0;
    bool fetched = false;
};

/**
 * What a test handler does: records the message, and with rendezvous data fetches it
 * (the default), keeps the descriptor, or drops it; with persistent data keeps it.
 */
struct Recorder {
    enum class Rndv { fetch, keep, drop, refuse } rndv = Rndv::fetch;
    bool keep_data = false;             ///< return LOOM_INPROGRESS for LOOM_AM_RECV_ATTR_FLAG_DATA
    std::size_t rndv_buffer = SIZE_MAX; ///< receive buffer size (default: the message's length)
    loom_worker_h worker = nullptr;
    std::deque<Message> messages;
    std::function<void(Message&)> on_message;  ///< runs inside the callback after recording

    static loom_status_t cb(void* arg, const void* header, size_t header_length, void* data, size_t length,
                            const loom_am_recv_param_t* param) {
        auto* self = static_cast<Recorder*>(arg);
        self->messages.emplace_back();
        Message& m = self->messages.back();
        if (header_length != 0) m.header.assign(static_cast<const char*>(header), static_cast<const char*>(header) + header_length);
        m.length = length;
        m.attr = param->recv_attr;
        if (param->recv_attr & LOOM_AM_RECV_ATTR_FIELD_REPLY_EP) m.reply_ep = param->reply_ep;
        loom_status_t ret = LOOM_OK;
        if (param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) {
            switch (self->rndv) {
            case Rndv::fetch: self->fetch(m, data); break;
            case Rndv::keep:
                m.desc = data;
                ret = LOOM_INPROGRESS;
                break;
            case Rndv::drop: ret = LOOM_OK; break;
            case Rndv::refuse: ret = LOOM_ERR_CANCELED; break;
            }
        } else {
            if (length != 0) m.data.assign(static_cast<char*>(data), static_cast<char*>(data) + length);
            m.fetched = true;
            if (self->keep_data && (param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_DATA)) {
                m.kept = data;
                ret = LOOM_INPROGRESS;
            }
        }
        if (self->on_message) self->on_message(m);
        return ret;
    }

    /** Starts fetching rendezvous data into m.data; completion fills recv_status. */
    void fetch(Message& m, void* desc) {
        m.data.assign(std::min(m.length, rndv_buffer) + 1, 0x5a);  // one guard byte
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA | LOOM_OP_ATTR_FIELD_RECV_INFO;
        p.cb.am = [](void* request, loom_status_t status, size_t length, void* user_data) {
            auto* msg = static_cast<Message*>(user_data);
            msg->recv_status = status;
            msg->recv_length = length;
            loom_request_free(request);
        };
        p.user_data = &m;
        p.recv_info.length = &m.recv_length;
        loom_status_ptr_t r = loom_am_recv_data_nbx(worker, desc, m.data.data(), m.data.size() - 1, &p);
        m.fetched = true;
        if (!LOOM_PTR_IS_PTR(r)) m.recv_status = LOOM_PTR_STATUS(r);
    }
};

class UcpAmTest : public loom::test::UcpPairTest {
protected:
    UcpAmTest() : UcpPairTest(LOOM_FEATURE_AM | LOOM_FEATURE_TAG) {}

    void on_init() override {
        rec_.worker = receiver_;
        back_.worker = sender_;
    }

    void on_teardown() override {
        rec_.messages.clear();
        back_.messages.clear();
    }

    loom_status_t set_handler(loom_worker_h w, unsigned id, Recorder* rec, std::uint32_t flags = 0) {
        loom_am_handler_param_t hp{};
        hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG |
                        LOOM_AM_HANDLER_PARAM_FIELD_FLAGS;
        hp.id = id;
        hp.flags = flags;
        hp.cb = rec ? Recorder::cb : nullptr;
        hp.arg = rec;
        return loom_worker_set_am_recv_handler(w, &hp);
    }

    loom_status_ptr_t send(loom_ep_h ep, unsigned id, const std::vector<char>& header, const std::vector<char>& data,
                           std::uint32_t flags = 0) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = flags;
        if (deadline_past_)
            p.op_attr_mask |= LOOM_OP_ATTR_FIELD_DEADLINE | LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE;
        return loom_am_send_nbx(ep, id, header.empty() ? nullptr : header.data(), header.size(),
                                data.empty() ? nullptr : data.data(), data.size(), &p);
    }

    bool deadline_past_ = false;  ///< send() gives every message a deadline already past

    /** Sends one message and checks what the handler got, byte for byte. */
    void send_check(std::size_t hlen, std::size_t size, std::uint32_t flags = 0) {
        auto header = pattern(hlen, 1000 + static_cast<unsigned>(hlen));
        auto data = pattern(size, static_cast<unsigned>(size));
        const std::size_t before = rec_.messages.size();
        loom_status_ptr_t s = send(ep_, 1, header, data, flags);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(s)) << loom_status_string(LOOM_PTR_STATUS(s)) << " size " << size;
        ASSERT_TRUE(progress_until([&] { return rec_.messages.size() > before; }, "the message"));
        Message& m = rec_.messages.back();
        if (m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) {
            ASSERT_TRUE(progress_until([&] { return m.recv_status != LOOM_INPROGRESS; }, "the rendezvous data"));
            ASSERT_EQ(LOOM_OK, m.recv_status) << size;
            EXPECT_EQ(size, m.recv_length);
            EXPECT_EQ(0x5a, m.data[size]) << "wrote past the receive buffer";
            m.data.resize(size);
        }
        EXPECT_EQ(LOOM_OK, wait(s)) << size;
        EXPECT_EQ(size, m.length);
        EXPECT_EQ(header, m.header) << "header of " << hlen << " bytes, data " << size;
        ASSERT_EQ(data.size(), m.data.size());
        EXPECT_TRUE(data == m.data) << "data of " << size << " bytes, header " << hlen;
        EXPECT_EQ(0u, m.attr & LOOM_AM_RECV_ATTR_FIELD_REPLY_EP) << "no reply endpoint was asked for";
    }

    Recorder rec_;   ///< handler on the receiver
    Recorder back_;  ///< handler on the sender (replies)
};

const std::vector<std::size_t> kSizes = {0,     1,     8,     100,   231,    232,    233,    1000,    4095,
                                         4096,  4097,  8100,  8191,  8192,   8193,   16383,  16384,   30000,
                                         32768, 65536, 100000, 262143, 262144, 300000, 1 << 20};

TEST_P(UcpAmTest, EverySizeAcrossThresholds) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    for (std::size_t hlen : {0, 8, 100}) {
        for (std::size_t size : kSizes) send_check(hlen, size);
    }
    // The protocols by size: small ones in place, the largest by rendezvous.
    bool saw_rndv = false, saw_eager = false;
    for (const Message& m : rec_.messages) {
        if (m.length == 8) {
            EXPECT_EQ(0u, m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV);
        }
        if (m.length == (1u << 20)) {
            EXPECT_NE(0u, m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV);
        }
        saw_rndv = saw_rndv || (m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV);
        saw_eager = saw_eager || !(m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV);
    }
    EXPECT_TRUE(saw_rndv && saw_eager);
}

TEST_P(UcpAmTest, ForcedProtocols) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    for (std::size_t size : {0, 1, 5000, 70000}) {
        send_check(16, size, LOOM_AM_SEND_FLAG_RNDV);
        EXPECT_NE(0u, rec_.messages.back().attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) << size;
    }
    for (std::size_t size : {300000, 1 << 20}) {
        send_check(16, size, LOOM_AM_SEND_FLAG_EAGER);
        EXPECT_EQ(0u, rec_.messages.back().attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) << size;
    }
}

TEST_P(UcpAmTest, AmPipelineAndGetRendezvous) {
    init({{"LOOM_RNDV_SCHEME", "am"}, {"LOOM_RNDV_THRESH", "4k"}});
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    for (std::size_t size : {4096, 10000, 70000, 1 << 20}) send_check(32, size);
    init({{"LOOM_RNDV_SCHEME", "get_zcopy"}, {"LOOM_RNDV_THRESH", "1"}});
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    for (std::size_t size : {1, 8, 5000, 70000}) send_check(32, size);
}

/** Active-message rendezvous shares the tag protocol's receive: the PUT schemes serve it too. */
TEST_P(UcpAmTest, PutAndSplitRendezvous) {
    for (const char* scheme : {"put_zcopy", "get_put"}) {
        SCOPED_TRACE(scheme);
        init({{"LOOM_RNDV_SCHEME", scheme}, {"LOOM_RNDV_THRESH", "4k"}});
        ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
        for (std::size_t size : {4096, 10000, 70000, 1 << 20, 3 << 20}) send_check(32, size);
    }
}

TEST_P(UcpAmTest, HeaderSizesUpToTheLimit) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    const std::size_t limit = loom_am_max_header(sender_);
    EXPECT_GE(limit, 7872u);  // every built-in transport takes 8 KiB messages
    for (std::size_t hlen : {std::size_t{1}, std::size_t{7}, std::size_t{9}, std::size_t{1000}, std::size_t{4000}, limit}) {
        for (std::size_t size : {0, 10, 9000, 1 << 20}) send_check(hlen, size);
    }
    std::vector<char> big(100000, 1), data(10, 2);
    loom_status_ptr_t refused = send(ep_, 1, big, data);
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, LOOM_PTR_STATUS(refused));
}

/**
 * Header plus data around the AM lane's bcopy size (tcp: 64 KiB): each message goes whole
 * in one bcopy or in fragments, never one byte over (the soak found a user header pushed
 * a one-bcopy message 1-8 bytes past the transport's segment).
 */
TEST_P(UcpAmTest, HeaderAndDataAroundTheBcopySize) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    auto* ep = reinterpret_cast<loom::ucp::Ep*>(ep_);
    const std::size_t max_bcopy = ep->max_bcopy;
    for (std::size_t hlen : {std::size_t{0}, std::size_t{8}, std::size_t{32}}) {
        for (std::size_t total = max_bcopy - 24; total <= max_bcopy + 8; ++total) {
            if (total < hlen) continue;
            send_check(hlen, total - hlen);
            send_check(hlen, total - hlen, LOOM_AM_SEND_FLAG_EAGER);
        }
    }
}

/**
 * An active message is matched when its handler runs, on arrival: a deadline cannot take
 * it back, so sends past theirs (eager and rendezvous) complete normally, data intact.
 */
TEST_P(UcpAmTest, DeadlineOfAnActiveMessageLetsItComplete) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    // Connected first: a send still queued for a lane that is connecting (rc) is withdrawn at
    // its deadline, unsent (docs/reliability.md), and the message would never come.
    send_check(0, 8);
    deadline_past_ = true;
    for (std::size_t size : {std::size_t{8}, std::size_t{9000}, std::size_t{100000}, std::size_t{1} << 20}) {
        send_check(16, size);
        send_check(16, size, LOOM_AM_SEND_FLAG_RNDV);
    }
}

TEST_P(UcpAmTest, ReplyEndpoint) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    ASSERT_EQ(LOOM_OK, set_handler(sender_, 2, &back_));
    // The receiver answers from inside its handler, on the endpoint it was given.
    std::vector<loom_status_ptr_t> replies;
    rec_.on_message = [&](Message& m) {
        if (!m.reply_ep) return;
        replies.push_back(loom_am_send_nbx(m.reply_ep, 2, m.header.data(), m.header.size(), nullptr, 0, nullptr));
    };
    std::size_t k = 0;
    for (std::size_t size : {8, 20000, 1 << 20}) {
        auto header = pattern(8, static_cast<unsigned>(size));
        auto data = pattern(size, 3);  // the caller's until the send completes
        loom_status_ptr_t s = send(ep_, 1, header, data, LOOM_AM_SEND_FLAG_REPLY);
        ++k;
        ASSERT_TRUE(progress_until([&] { return back_.messages.size() == k; }, "the reply"));
        ASSERT_EQ(k, rec_.messages.size());
        EXPECT_NE(0u, rec_.messages.back().attr & LOOM_AM_RECV_ATTR_FIELD_REPLY_EP) << size;
        EXPECT_EQ(header, back_.messages.back().header) << size;
        EXPECT_EQ(LOOM_OK, wait(s));
    }
    for (loom_status_ptr_t r : replies) EXPECT_EQ(LOOM_OK, wait(r));
    // Without the flag: no reply endpoint.
    auto small = pattern(8, 1);
    loom_status_ptr_t s = send(ep_, 1, small, small);
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == 4; }));
    EXPECT_EQ(0u, rec_.messages.back().attr & LOOM_AM_RECV_ATTR_FIELD_REPLY_EP);
    EXPECT_EQ(nullptr, rec_.messages.back().reply_ep);
    EXPECT_EQ(LOOM_OK, wait(s));
}

TEST_P(UcpAmTest, PersistentDataIsKeptUntilReleased) {
    rec_.keep_data = true;
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_, LOOM_AM_FLAG_PERSISTENT_DATA | LOOM_AM_FLAG_WHOLE_MSG));
    const std::vector<std::size_t> sizes = {0, 8, 600, 8000, 30000, 200000};
    std::vector<std::vector<char>> sent;
    for (std::size_t size : sizes) {
        sent.push_back(pattern(size, static_cast<unsigned>(size) + 5));
        EXPECT_EQ(LOOM_OK, wait(send(ep_, 1, {}, sent.back(), LOOM_AM_SEND_FLAG_EAGER)));
    }
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == sizes.size(); }));
    // Churn: more traffic through the same buffers of the transports.
    rec_.keep_data = false;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(LOOM_OK, wait(send(ep_, 1, {}, pattern(7000, i))));
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == sizes.size() + 50; }));
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        Message& m = rec_.messages[i];
        ASSERT_NE(0u, m.attr & LOOM_AM_RECV_ATTR_FLAG_DATA) << sizes[i];
        ASSERT_NE(nullptr, m.kept);
        EXPECT_TRUE(sent[i] == std::vector<char>(static_cast<char*>(m.kept), static_cast<char*>(m.kept) + sizes[i]))
            << "kept data changed, size " << sizes[i];
    }
    // Half are released, half received into a buffer (which releases them too).
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        Message& m = rec_.messages[i];
        if (i % 2 == 0) {
            loom_am_data_release(receiver_, m.kept);
            continue;
        }
        std::vector<char> out(sizes[i] + 1, 0x33);
        size_t length = 0;
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
        p.recv_info.length = &length;
        EXPECT_EQ(nullptr, loom_am_recv_data_nbx(receiver_, m.kept, out.data(), sizes[i], &p));
        EXPECT_EQ(sizes[i], length);
        EXPECT_EQ(0, std::memcmp(out.data(), sent[i].data(), sizes[i]));
        EXPECT_EQ(0x33, out[sizes[i]]);
    }
    // Released data is not data any more.
    testing::internal::CaptureStderr();
    {
        loom::test::LogCapture log;
        loom_am_data_release(receiver_, rec_.messages[0].kept);
        EXPECT_EQ(1, log.count("is not active-message data"));
    }
    (void)testing::internal::GetCapturedStderr();
}

TEST_P(UcpAmTest, DataWithoutPersistenceIsLentOnlyWhenReassembled) {
    rec_.keep_data = true;
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    const std::size_t big = 200000;  // more than one message of any built-in transport
    EXPECT_EQ(LOOM_OK, wait(send(ep_, 1, {}, pattern(big, 1), LOOM_AM_SEND_FLAG_EAGER)));
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == 1; }));
    // Fragments are reassembled in Loom's memory, which the handler may keep.
    Message& m = rec_.messages[0];
    ASSERT_NE(0u, m.attr & LOOM_AM_RECV_ATTR_FLAG_DATA);
    ASSERT_NE(nullptr, m.kept);
    EXPECT_EQ(pattern(big, 1), std::vector<char>(static_cast<char*>(m.kept), static_cast<char*>(m.kept) + big));
    loom_am_data_release(receiver_, m.kept);
    // A small message stays in the transport's buffer, which self, shm and tcp do not
    // lend: a handler that keeps it anyway gets one warning, and the data is not kept.
    struct Stubborn {
        int calls = 0;
        std::uint64_t attr = 0;
    } stubborn;
    loom_am_handler_param_t hp{};
    hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = 5;
    hp.arg = &stubborn;
    hp.cb = [](void* arg, const void*, size_t, void*, size_t, const loom_am_recv_param_t* param) {
        auto* s = static_cast<Stubborn*>(arg);
        ++s->calls;
        s->attr = param->recv_attr;
        return LOOM_INPROGRESS;
    };
    ASSERT_EQ(LOOM_OK, loom_worker_set_am_recv_handler(receiver_, &hp));
    loom::test::LogCapture log;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(LOOM_OK, wait(send(ep_, 5, {}, pattern(8, 1))));
    ASSERT_TRUE(progress_until([&] { return stubborn.calls == 3; }));
    if (std::string(GetParam().tls).rfind("rc", 0) == 0) {
        // rc lends its receive descriptors (docs/transports.md): kept until the worker goes.
        EXPECT_NE(0u, stubborn.attr & LOOM_AM_RECV_ATTR_FLAG_DATA) << "rc lends its receive buffers";
        EXPECT_EQ(0, log.count("LOOM_INPROGRESS for data it may not keep"));
    } else {
        EXPECT_EQ(0u, stubborn.attr & LOOM_AM_RECV_ATTR_FLAG_DATA) << "self, shm and tcp do not lend their buffers";
        EXPECT_EQ(1, log.count("LOOM_INPROGRESS for data it may not keep"));
    }
}

TEST_P(UcpAmTest, RendezvousReceiveLaterTruncatedOrDropped) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    const std::size_t size = 1 << 20;
    auto data = pattern(size, 9);
    // Kept in the handler, fetched after it returned.
    rec_.rndv = Recorder::Rndv::keep;
    auto header = pattern(4, 1);
    loom_status_ptr_t s = send(ep_, 1, header, data, LOOM_AM_SEND_FLAG_RNDV);
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == 1; }));
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(s)) << "the send completed before the data was fetched";
    rec_.fetch(rec_.messages[0], rec_.messages[0].desc);
    ASSERT_TRUE(progress_until([&] { return rec_.messages[0].recv_status != LOOM_INPROGRESS; }));
    EXPECT_EQ(LOOM_OK, rec_.messages[0].recv_status);
    rec_.messages[0].data.resize(size);
    EXPECT_TRUE(data == rec_.messages[0].data);
    EXPECT_EQ(LOOM_OK, wait(s));
    // A second fetch of the same descriptor is refused.
    char buf[8];
    loom_status_ptr_t again = loom_am_recv_data_nbx(receiver_, rec_.messages[0].desc, buf, 8, nullptr);
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, LOOM_PTR_STATUS(again));

    // A buffer too short: truncated, nothing written past it; the sender completes.
    rec_.rndv = Recorder::Rndv::fetch;
    rec_.rndv_buffer = size / 2;
    s = send(ep_, 1, {}, data, LOOM_AM_SEND_FLAG_RNDV);
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == 2 && rec_.messages[1].recv_status != LOOM_INPROGRESS; }));
    EXPECT_EQ(LOOM_ERR_MESSAGE_TRUNCATED, rec_.messages[1].recv_status);
    EXPECT_EQ(size, rec_.messages[1].recv_length);
    EXPECT_EQ(0x5a, rec_.messages[1].data[size / 2]);
    EXPECT_EQ(LOOM_OK, wait(s));
    rec_.rndv_buffer = SIZE_MAX;

    // Dropped by returning LOOM_OK, by loom_am_data_release, or refused with an error.
    rec_.rndv = Recorder::Rndv::drop;
    EXPECT_EQ(LOOM_OK, wait(send(ep_, 1, {}, data, LOOM_AM_SEND_FLAG_RNDV)));
    rec_.rndv = Recorder::Rndv::keep;
    s = send(ep_, 1, {}, data, LOOM_AM_SEND_FLAG_RNDV);
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == 4; }));
    loom_am_data_release(receiver_, rec_.messages[3].desc);
    EXPECT_EQ(LOOM_OK, wait(s));
    rec_.rndv = Recorder::Rndv::refuse;
    EXPECT_EQ(LOOM_ERR_CANCELED, wait(send(ep_, 1, {}, data, LOOM_AM_SEND_FLAG_RNDV)));
    // Kept and never fetched: the worker's destruction frees it (checked by ASan).
    rec_.rndv = Recorder::Rndv::keep;
    s = send(ep_, 1, {}, data, LOOM_AM_SEND_FLAG_RNDV);
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == 6; }));
    loom_request_free(s);
}

TEST_P(UcpAmTest, RendezvousIntoIovAndCallerRequest) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    rec_.rndv = Recorder::Rndv::keep;
    const std::size_t size = 300000;
    auto data = pattern(size, 4);
    loom_status_ptr_t s = send(ep_, 1, {}, data, LOOM_AM_SEND_FLAG_RNDV);
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == 1; }));
    loom_context_attr_t attr{};
    attr.field_mask = LOOM_ATTR_FIELD_REQUEST_SIZE;
    ASSERT_EQ(LOOM_OK, loom_context_query(ctx_, &attr));
    std::vector<char> mem(attr.request_size + 64);
    std::vector<char> a(size / 3), b(size - size / 3);
    loom_dt_iov_t iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE | LOOM_OP_ATTR_FIELD_REQUEST | LOOM_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.datatype = loom_dt_make_iov();
    p.request = mem.data() + attr.request_size;
    loom_status_ptr_t r = loom_am_recv_data_nbx(receiver_, rec_.messages[0].desc, iov, 2, &p);
    ASSERT_EQ(p.request, r);
    ASSERT_TRUE(progress_until([&] { return loom_request_check_status(r) != LOOM_INPROGRESS; }));
    EXPECT_EQ(LOOM_OK, loom_request_check_status(r));
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_TRUE(data == a);
    EXPECT_EQ(LOOM_OK, wait(s));
}

TEST_P(UcpAmTest, UnknownIdIsDroppedWithOneWarning) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    {
        loom::test::LogCapture log;
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(LOOM_OK, wait(send(ep_, 7, pattern(4, 1), pattern(100 + i * 90000, 2), LOOM_AM_SEND_FLAG_EAGER)));
        }
        // A rendezvous to nobody completes its send with an error instead of hanging.
        EXPECT_EQ(LOOM_ERR_NO_ELEM, wait(send(ep_, 7, {}, pattern(1 << 20, 3), LOOM_AM_SEND_FLAG_RNDV)));
        // The next message for a handled id still arrives.
        send_check(4, 33);
        EXPECT_EQ(1u, rec_.messages.size());
        EXPECT_EQ(1, log.count("for id 7, which has no handler"));
    }
}

TEST_P(UcpAmTest, HandlerReplacedAndRemoved) {
    Recorder other;
    other.worker = receiver_;
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 3, &rec_));
    EXPECT_EQ(LOOM_OK, wait(send(ep_, 3, {}, pattern(8, 1))));
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == 1; }));
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 3, &other));
    EXPECT_EQ(LOOM_OK, wait(send(ep_, 3, {}, pattern(20000, 1), LOOM_AM_SEND_FLAG_EAGER)));
    ASSERT_TRUE(progress_until([&] { return other.messages.size() == 1; }));
    EXPECT_EQ(1u, rec_.messages.size());
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 3, nullptr));  // removed
    loom::test::LogCapture log;
    EXPECT_EQ(LOOM_OK, wait(send(ep_, 3, {}, pattern(8, 1))));
    // The drop happens on the receiver's progress: a later message to another id shows it came.
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 4, &rec_));
    EXPECT_EQ(LOOM_OK, wait(send(ep_, 4, {}, pattern(8, 2))));
    ASSERT_TRUE(progress_until([&] { return rec_.messages.size() == 2; }));
    EXPECT_EQ(1u, other.messages.size());
    EXPECT_EQ(1, log.count("for id 3, which has no handler"));
}

/** Many sends in flight at once, mixed sizes and protocols: all arrive, in send order. */
TEST_P(UcpAmTest, ManyOutstandingInOrder) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    const std::vector<std::size_t> sizes = {8, 70000, 0, 300000, 5000, 1, 20000, 1 << 20, 64, 9000};
    const int n = 400;
    std::vector<std::vector<char>> data;
    std::vector<std::uint32_t> seqs(n);
    std::vector<loom_status_ptr_t> reqs;
    for (int i = 0; i < n; ++i) {
        seqs[i] = static_cast<std::uint32_t>(i);
        data.push_back(pattern(i % 40 == 0 ? sizes[(i / 40) % sizes.size()] : (i * 37) % 3000, i));
    }
    for (int i = 0; i < n; ++i) {
        reqs.push_back(loom_am_send_nbx(ep_, 1, &seqs[i], sizeof(seqs[i]), data[i].data(), data[i].size(), nullptr));
        ASSERT_FALSE(LOOM_PTR_IS_ERR(reqs.back())) << i;
    }
    ASSERT_TRUE(progress_until([&] {
        if (rec_.messages.size() != static_cast<std::size_t>(n)) return false;
        for (const Message& m : rec_.messages) {
            if ((m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) && m.recv_status == LOOM_INPROGRESS) return false;
        }
        return true;
    }, "every message"));
    for (int i = 0; i < n; ++i) {
        Message& m = rec_.messages[i];
        std::uint32_t seq;
        ASSERT_EQ(sizeof(seq), m.header.size());
        std::memcpy(&seq, m.header.data(), sizeof(seq));
        ASSERT_EQ(static_cast<std::uint32_t>(i), seq) << "handlers ran out of send order";
        if (m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) {
            EXPECT_EQ(LOOM_OK, m.recv_status);
            m.data.resize(m.length);
        }
        EXPECT_TRUE(data[i] == m.data) << i;
    }
    for (loom_status_ptr_t r : reqs) EXPECT_EQ(LOOM_OK, wait(r));
}

TEST_P(UcpAmTest, IovSendAndNoImmediateCompletion) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    for (std::size_t size : {10, 20000, 300000}) {
        auto data = pattern(size, 4);
        std::size_t a = size / 3;
        loom_dt_iov_t iov[2] = {{data.data(), a}, {data.data() + a, size - a}};
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE | LOOM_OP_ATTR_FLAG_NO_IMM_CMPL;
        p.datatype = loom_dt_make_iov();
        const std::size_t before = rec_.messages.size();
        loom_status_ptr_t s = loom_am_send_nbx(ep_, 1, nullptr, 0, iov, 2, &p);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(s)) << "NO_IMM_CMPL must return a request";
        ASSERT_TRUE(progress_until([&] { return rec_.messages.size() > before; }));
        Message& m = rec_.messages.back();
        ASSERT_TRUE(progress_until([&] { return !(m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) || m.recv_status != LOOM_INPROGRESS; }));
        m.data.resize(size);
        EXPECT_TRUE(data == m.data) << size;
        EXPECT_EQ(LOOM_OK, wait(s));
    }
}

TEST_P(UcpAmTest, BadParametersAreRefused) {
    loom::test::LogCapture log;
    char buf[16] = {};
    auto status = [](loom_status_ptr_t p) { return LOOM_PTR_STATUS(p); };
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_am_send_nbx(nullptr, 1, nullptr, 0, buf, 8, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_am_send_nbx(ep_, 65536, nullptr, 0, buf, 8, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_am_send_nbx(ep_, 1, nullptr, 4, buf, 8, nullptr)));
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_AM_SEND_FLAG_EAGER | LOOM_AM_SEND_FLAG_RNDV;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_am_send_nbx(ep_, 1, nullptr, 0, buf, 8, &p)));
    p.flags = 1u << 9;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_am_send_nbx(ep_, 1, nullptr, 0, buf, 8, &p)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_am_recv_data_nbx(receiver_, buf, buf, 8, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_am_recv_data_nbx(receiver_, nullptr, buf, 8, nullptr)));
    loom_am_handler_param_t hp{};
    hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_CB;  // no id
    hp.cb = Recorder::cb;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_worker_set_am_recv_handler(receiver_, &hp));
    hp.field_mask |= LOOM_AM_HANDLER_PARAM_FIELD_ID;
    hp.id = 70000;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_worker_set_am_recv_handler(receiver_, &hp));
    hp.id = 1;
    hp.field_mask |= LOOM_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.flags = 1u << 7;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_worker_set_am_recv_handler(receiver_, &hp));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_worker_set_am_recv_handler(nullptr, &hp));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_worker_set_am_recv_handler(receiver_, nullptr));
    EXPECT_GE(log.count("ucp: loom_"), 12);
    // A context without LOOM_FEATURE_AM refuses active messages.
    init({}, LOOM_FEATURE_TAG);
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, set_handler(receiver_, 1, &rec_));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_am_send_nbx(ep_, 1, nullptr, 0, buf, 8, nullptr)));
    EXPECT_GE(log.count("without LOOM_FEATURE_AM"), 2);
}

/** A force-closed endpoint fails its rendezvous sends; a failed endpoint refuses new ones. */
TEST_P(UcpAmTest, ForceCloseFailsOutstandingSends) {
    ASSERT_EQ(LOOM_OK, set_handler(receiver_, 1, &rec_));
    rec_.rndv = Recorder::Rndv::keep;
    auto data = pattern(1 << 20, 1);
    loom_status_ptr_t s = send(ep_, 1, {}, data, LOOM_AM_SEND_FLAG_RNDV);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(s));
    loom_status_ptr_t flush = loom_ep_flush_nbx(ep_, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(flush)) << "a flush with a rendezvous outstanding completed at once";
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    EXPECT_EQ(LOOM_OK, wait(loom_ep_close_nbx(ep_, &p)));
    ep_ = nullptr;
    EXPECT_EQ(LOOM_ERR_CANCELED, wait(s));
    EXPECT_EQ(LOOM_ERR_CANCELED, wait(flush));
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpAmTest,
                         testing::Values(TlSet{"self", "self", true}, TlSet{"shm", "shm", false},
                                         TlSet{"tcp", "tcp", false}),
                         [](const testing::TestParamInfo<TlSet>& info) { return std::string(info.param.name); });

/** rc, where test/rdma/run_rdma_tests.sh runs the protocol layer on RDMA devices (LOOMTEST_UCP_VERBS=1). */
INSTANTIATE_TEST_SUITE_P(Verbs, UcpAmTest, testing::ValuesIn(loom::test::verbs_tl_sets()),
                         [](const testing::TestParamInfo<TlSet>& info) {
                             return std::string(info.param.name);
                         });

// --- two processes ---------------------------------------------------------------------------

using loom::test::ForkedPeer;

/** One process's context, worker and endpoint to the other, for active messages. */
struct Side : loom::test::UcpSide {
    bool open(const char* tls) { return UcpSide::open(tls, LOOM_FEATURE_AM); }

    loom_status_t wait(loom_status_ptr_t r, int seconds = 30) {
        return wait_with(r, [](void* q) { return loom_request_check_status(q); }, seconds);
    }

    loom_status_t set_handler(unsigned id, loom_am_recv_callback_t cb, void* arg) {
        loom_am_handler_param_t hp{};
        hp.field_mask =
            LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id = id;
        hp.cb = cb;
        hp.arg = arg;
        return loom_worker_set_am_recv_handler(worker, &hp);
    }
};

class UcpAmMultiProcTest : public testing::TestWithParam<const char*> {};

/**
 * The child echoes every active message to id 1 back to id 2 on the reply endpoint it
 * was given, header and data, until an empty message to id 3.
 */
TEST_P(UcpAmMultiProcTest, EchoOnReplyEndpoint) {
    const char* tls = GetParam();
    ForkedPeer peer([tls](ForkedPeer::Channel& ch) {
        Side me;
        if (!me.open(tls)) return 1;
        Recorder rec;
        rec.worker = me.worker;
        bool quit = false;
        if (me.set_handler(1, Recorder::cb, &rec) != LOOM_OK) return 2;
        if (me.set_handler(3, [](void* arg, const void*, size_t, void*, size_t, const loom_am_recv_param_t*) {
                *static_cast<bool*>(arg) = true;
                return LOOM_OK;
            }, &quit) != LOOM_OK) {
            return 2;
        }
        ch.send(me.address());  // the parent connects; this side answers on reply endpoints only
        while (!quit) {
            if (!me.progress_until([&] { return quit || !rec.messages.empty(); }, 60)) return 3;
            if (rec.messages.empty()) break;
            Message& m = rec.messages.front();
            if (!me.progress_until([&] { return !(m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) || m.recv_status != LOOM_INPROGRESS; }, 60)) {
                return 4;
            }
            if (m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) {
                if (m.recv_status != LOOM_OK) return 5;
                m.data.resize(m.length);
            }
            if (m.reply_ep == nullptr) return 6;
            loom_status_t s = me.wait(loom_am_send_nbx(m.reply_ep, 2, m.header.data(), m.header.size(), m.data.data(),
                                                       m.data.size(), nullptr));
            if (s != LOOM_OK) {
                fprintf(stderr, "child: echo of %zu bytes failed: %s\n", m.data.size(), loom_status_string(s));
                return 7;
            }
            rec.messages.pop_front();
        }
        // Replies must leave before the worker goes.
        return me.wait(loom_worker_flush_nbx(me.worker, nullptr)) == LOOM_OK ? 0 : 8;
    });
    Side me;
    ASSERT_TRUE(me.open(tls));
    Recorder rec;
    rec.worker = me.worker;
    ASSERT_EQ(LOOM_OK, me.set_handler(2, Recorder::cb, &rec));
    auto child = peer.channel().recv();
    ASSERT_TRUE(child);
    ASSERT_TRUE(me.connect(*child, false));
    unsigned seed = 1;
    for (std::size_t size : {std::size_t{0}, std::size_t{8}, std::size_t{200}, std::size_t{5000}, std::size_t{20000},
                             std::size_t{100000}, std::size_t{300000}, std::size_t{4} << 20}) {
        auto header = pattern(size % 64 + 1, seed);
        auto data = pattern(size, seed++);
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = LOOM_AM_SEND_FLAG_REPLY;
        ASSERT_EQ(LOOM_OK, me.wait(loom_am_send_nbx(me.ep, 1, header.data(), header.size(), data.data(), size, &p)))
            << size << "; child exit " << peer.wait(std::chrono::milliseconds(1));
        ASSERT_TRUE(me.progress_until([&] {
            return !rec.messages.empty() && (!(rec.messages.back().attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) ||
                                             rec.messages.back().recv_status != LOOM_INPROGRESS);
        })) << size << "; child exit " << peer.wait(std::chrono::milliseconds(1));
        Message& m = rec.messages.back();
        if (m.attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) {
            ASSERT_EQ(LOOM_OK, m.recv_status);
            m.data.resize(m.length);
        }
        EXPECT_EQ(header, m.header) << size;
        ASSERT_TRUE(data == m.data) << "size " << size;
        rec.messages.clear();
    }
    ASSERT_EQ(LOOM_OK, me.wait(loom_am_send_nbx(me.ep, 3, nullptr, 0, nullptr, 0, nullptr)));
    ASSERT_EQ(LOOM_OK, me.wait(loom_ep_flush_nbx(me.ep, nullptr)));
    // The child flushes its replies before leaving: progress meanwhile.
    int exit_code = -1000;
    ASSERT_TRUE(me.progress_until([&] { return (exit_code = peer.wait(std::chrono::milliseconds(0))) != -1000; }, 60));
    EXPECT_EQ(0, exit_code);
}

/** The receiver keeps a rendezvous descriptor and dies: the send fails, the error handler runs. */
TEST_P(UcpAmMultiProcTest, PeerKilledMidRendezvous) {
    const char* tls = GetParam();
    auto* arrived = static_cast<volatile int*>(
        mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(MAP_FAILED, (void*)arrived);
    *arrived = 0;
    ForkedPeer peer([tls, arrived](ForkedPeer::Channel& ch) {
        Side me;
        if (!me.open(tls)) return 1;
        Recorder rec;
        rec.worker = me.worker;
        rec.rndv = Recorder::Rndv::keep;  // never fetched
        if (me.set_handler(1, Recorder::cb, &rec) != LOOM_OK) return 2;
        ch.send(me.address());
        if (!me.progress_until([&] { return !rec.messages.empty(); }, 60)) return 3;
        *arrived = 1;
        me.progress_until([] { return false; }, 120);
        return 4;
    });
    Side me;
    ASSERT_TRUE(me.open(tls));
    auto child = peer.channel().recv();
    ASSERT_TRUE(child);
    ASSERT_TRUE(me.connect(*child, true));
    auto data = pattern(8 << 20, 5);
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_AM_SEND_FLAG_RNDV;
    loom_status_ptr_t sreq = loom_am_send_nbx(me.ep, 1, nullptr, 0, data.data(), data.size(), &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    ASSERT_TRUE(me.progress_until([&] { return *arrived != 0; })) << "the child never saw the rendezvous request";
    munmap(const_cast<int*>(arrived), 4096);
    peer.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, peer.wait());
    loom_status_t s = me.wait(sreq, 60);
    EXPECT_NE(LOOM_OK, s);
    EXPECT_NE(LOOM_ERR_TIMED_OUT, s) << "the send hung after its receiver died";
    EXPECT_EQ(1, me.errors) << "the error handler must run once";
    EXPECT_TRUE(LOOM_PTR_IS_ERR(loom_am_send_nbx(me.ep, 1, nullptr, 0, data.data(), 8, nullptr)));
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpAmMultiProcTest, testing::Values("shm", "tcp"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
