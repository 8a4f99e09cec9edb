/**
 * Two processes through the UCX API over the real transports (LOOM_TLS=shm, tcp): a child
 * forked first, each side with its own context and worker, the worker addresses
 * exchanged through a pipe. Tagged messages in every form, the blocking UCX 1.x calls
 * (ucp_put, ucp_get, ucp_ep_flush, ucp_worker_flush: they progress only the caller, the
 * peer progresses on its own), RMA and atomics checked against the target's memory,
 * MPICH-style active messages with replies, and a peer killed with SIGKILL: the
 * survivor's operation fails and its error handler runs with a UCX status, no hang.
 *
 * The children return exit codes (no gtest assertions in them): 0 is success, each
 * failure its own number, named in the parent's message.
 */
#include "ucx_compat_test.h"

#include <signal.h>

namespace ucx_compat {
namespace {

class MultiProcTest : public testing::TestWithParam<const char*> {};

const std::size_t kTagSizes[] = {0, 8, 1000, 12000, 65536, 300000, 1 << 20, 4 << 20};

ucp_tag_t size_tag(std::size_t size) {
    return 0x7000000000ull + size;
}

/**
 * The child's blocking receive: Open MPI's (a request at the end of a buffer, ucp_request_test in a
 * progress loop).
 */
ucs_status_t child_recv(Side& me, void* buf, std::size_t size, ucp_tag_t tag, ucp_tag_recv_info_t* info) {
    const std::size_t rs = me.ctx.request_size();
    std::vector<char> mem(rs);
    void* req = mem.data() + rs;
    ucs_status_t s = ucp_tag_recv_nbr(me.worker, buf, size, ucp_dt_make_contig(1), tag, ~0ull, req);
    if (s != UCS_OK) return s;
    if (!me.progress_until([&] { return (s = ucp_request_test(req, info)) != UCS_INPROGRESS; }))
        return UCS_ERR_TIMED_OUT;
    return s;
}

TEST_P(MultiProcTest, TagEveryFormAndBlockingFlushes) {
    const char* tls = GetParam();
    Child child([tls](Channel& ch) {
        Side me(tls);
        if (!me.meet(ch)) return 1;
        for (std::size_t size : kTagSizes) {
            std::vector<char> buf(size);
            ucp_tag_recv_info_t info{};
            if (child_recv(me, buf.data(), size, size_tag(size), &info) != UCS_OK) return 2;
            if (info.length != size || info.sender_tag != size_tag(size)) return 3;
            if (buf != pattern(size, static_cast<unsigned>(size))) return 4;
            // Echo it, with a sync send: complete once the parent's receive matched.
            ucp_request_param_t sp{};
            if (me.wait(ucp_tag_send_sync_nbx(me.ep, buf.data(), size, size_tag(size) + 1, &sp)) != UCS_OK)
                return 5;
        }
        // The parent's burst, taken while it waits in its blocking flushes.
        for (int i = 0; i < 20; ++i) {
            std::vector<char> buf(65536);
            ucp_tag_recv_info_t info{};
            if (child_recv(me, buf.data(), buf.size(), 0x99, &info) != UCS_OK || buf != pattern(65536, 9))
                return 8;
        }
        // Serve the parent's close until it says so.
        if (!me.serve_until_message(ch)) return 6;
        return ch.recv_u64() == 42u ? 0 : 7;
    });
    Side me(tls);
    ASSERT_TRUE(me.meet(child.channel())) << "no address from the child, or no endpoint to it";
    int form = 0;
    for (std::size_t size : kTagSizes) {
        SCOPED_TRACE(testing::Message() << size << " bytes, form " << form);
        auto data = pattern(size, static_cast<unsigned>(size));
        // The echo's receive first (UCX 1.x), then the send in one of four forms.
        std::vector<char> echo(size);
        ucs_status_ptr_t rr = ucp_tag_recv_nb(me.worker, echo.data(), size, ucp_dt_make_contig(1),
                                              size_tag(size) + 1, ~0ull, recv_cb);
        ASSERT_TRUE(UCS_PTR_IS_PTR(rr));
        take_request(rr);
        const std::size_t rs = me.ctx.request_size();
        std::vector<char> nbr_mem(rs);
        switch (form++ % 4) {
            case 0: {
                ucp_request_param_t sp{};
                EXPECT_EQ(UCS_OK, me.wait(ucp_tag_send_nbx(me.ep, data.data(), size, size_tag(size), &sp)));
                break;
            }
            case 1:
                EXPECT_EQ(UCS_OK, me.wait(ucp_tag_send_nb(me.ep, data.data(), size, ucp_dt_make_contig(1),
                                                          size_tag(size), send_cb)));
                break;
            case 2:
                EXPECT_EQ(UCS_OK,
                          me.wait(ucp_tag_send_sync_nb(me.ep, data.data(), size, ucp_dt_make_contig(1),
                                                       size_tag(size), send_cb)));
                break;
            case 3: {
                void* req = nbr_mem.data() + rs;
                const ucs_status_t s =
                    ucp_tag_send_nbr(me.ep, data.data(), size, ucp_dt_make_contig(1), size_tag(size), req);
                ASSERT_TRUE(s == UCS_OK || s == UCS_INPROGRESS) << ucs_status_string(s);
                if (s == UCS_INPROGRESS) {
                    ASSERT_TRUE(
                        me.progress_until([&] { return ucp_request_check_status(req) != UCS_INPROGRESS; }));
                    EXPECT_EQ(UCS_OK, ucp_request_check_status(req));
                }
                break;
            }
        }
        auto* u = static_cast<UserReq*>(rr);
        ASSERT_TRUE(me.progress_until([&] { return u->completed == 1; }))
            << "no echo; child exit " << (child.kill(SIGKILL), child.wait());
        EXPECT_EQ(UCS_OK, u->status);
        EXPECT_EQ(size, u->info.length);
        ucp_request_release(rr);
        EXPECT_EQ(data, echo);
    }
    // Blocking flushes: they progress this worker only; the child progresses its own and
    // receives the burst (rendezvous on shm) meanwhile.
    std::vector<ucs_status_ptr_t> sends;
    auto data = pattern(65536, 9);
    for (int i = 0; i < 20; ++i) {
        ucp_request_param_t sp{};
        sends.push_back(ucp_tag_send_nbx(me.ep, data.data(), data.size(), 0x99, &sp));
    }
    EXPECT_EQ(UCS_OK, ucp_ep_flush(me.ep));
    EXPECT_EQ(UCS_OK, ucp_worker_flush(me.worker));
    for (ucs_status_ptr_t s : sends) EXPECT_EQ(UCS_OK, me.wait(s));
    // A flushing close, progressed by this side alone.
    ucs_status_ptr_t c = ucp_ep_close_nb(me.ep, UCP_EP_CLOSE_MODE_FLUSH);
    me.ep = nullptr;
    EXPECT_EQ(UCS_OK, me.wait(c));
    ASSERT_TRUE(child.channel().send_u64(42));
    EXPECT_EQ(0, child.wait());
}

/** The target's memory of the RMA test: an allocated region, its initial bytes known to both sides. */
constexpr std::size_t kRegion = 1 << 20;

std::vector<char> initial_region() {
    return pattern(kRegion, 4242);
}

TEST_P(MultiProcTest, RmaEveryFormIncludingBlocking) {
    const char* tls = GetParam();
    Child child([tls](Channel& ch) {
        Side me(tls);
        if (!me.meet(ch)) return 1;
        ucp_mem_map_params_t mp{};
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.length = kRegion;
        mp.flags = UCP_MEM_MAP_ALLOCATE;
        ucp_mem_h memh = nullptr;
        if (ucp_mem_map(me.ctx.get(), &mp, &memh) != UCS_OK) return 2;
        ucp_mem_attr_t ma{};
        ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
        if (ucp_mem_query(memh, &ma) != UCS_OK) return 3;
        auto init = initial_region();
        std::memcpy(ma.address, init.data(), kRegion);
        void* packed = nullptr;
        size_t size = 0;
        if (ucp_rkey_pack(me.ctx.get(), memh, &packed, &size) != UCS_OK) return 4;
        std::vector<std::uint8_t> msg(8 + size);
        const auto addr = reinterpret_cast<std::uint64_t>(ma.address);
        std::memcpy(msg.data(), &addr, 8);
        std::memcpy(msg.data() + 8, packed, size);
        ucp_rkey_buffer_release(packed);
        if (!ch.send(msg)) return 5;
        // Serve the parent's one-sided operations (they need no call here) until it asks for the memory.
        if (!me.serve_until_message(ch, 2 * kDeadlineSeconds) || ch.recv_u64() != 1u) return 6;
        if (!ch.send(ma.address, kRegion)) return 7;
        if (!me.serve_until_message(ch) || ch.recv_u64() != 2u) return 8;
        return ucp_mem_unmap(me.ctx.get(), memh) == UCS_OK ? 0 : 9;
    });
    Side me(tls);
    ASSERT_TRUE(me.meet(child.channel()));
    auto key = child.channel().recv();
    ASSERT_TRUE(key && key->size() > 8)
        << "no key from the child; exit " << (child.kill(SIGKILL), child.wait());
    std::uint64_t base = 0;
    std::memcpy(&base, key->data(), 8);
    ucp_rkey_h rkey = nullptr;
    ASSERT_EQ(UCS_OK, ucp_ep_rkey_unpack(me.ep, key->data() + 8, &rkey));
    std::vector<char> model = initial_region();  // what the target's memory must hold
    // Blocking get of the whole region.
    std::vector<char> got(kRegion);
    ASSERT_EQ(UCS_OK, ucp_get(me.ep, got.data(), kRegion, base, rkey));
    EXPECT_EQ(model, got);
    // Blocking puts of every size, read back with blocking gets after a blocking flush.
    unsigned seed = 0;
    for (std::size_t size : {1ul, 8ul, 100ul, 4096ul, 70000ul, 500000ul}) {
        SCOPED_TRACE(size);
        auto data = pattern(size, ++seed);
        const std::size_t off = (seed * 4099) % (kRegion - size);
        ASSERT_EQ(UCS_OK, ucp_put(me.ep, data.data(), size, base + off, rkey));
        std::memcpy(model.data() + off, data.data(), size);
        ASSERT_EQ(UCS_OK, ucp_ep_flush(me.ep));
        std::vector<char> back(size);
        ASSERT_EQ(UCS_OK, ucp_get(me.ep, back.data(), size, base + off, rkey));
        EXPECT_EQ(data, back);
    }
    // Implicit puts and gets, completed by a blocking worker flush.
    std::vector<std::vector<char>> nbi;
    for (int i = 0; i < 16; ++i) {
        nbi.push_back(pattern(3000, 100 + i));
        const std::size_t off = 600000 + static_cast<std::size_t>(i) * 3000;
        const ucs_status_t s = ucp_put_nbi(me.ep, nbi.back().data(), 3000, base + off, rkey);
        ASSERT_TRUE(s == UCS_OK || s == UCS_INPROGRESS) << ucs_status_string(s);
        std::memcpy(model.data() + off, nbi.back().data(), 3000);
    }
    ASSERT_EQ(UCS_OK, ucp_worker_flush(me.worker));
    std::vector<char> span(16 * 3000);
    const ucs_status_t gs = ucp_get_nbi(me.ep, span.data(), span.size(), base + 600000, rkey);
    ASSERT_TRUE(gs == UCS_OK || gs == UCS_INPROGRESS) << ucs_status_string(gs);
    ASSERT_EQ(UCS_OK, ucp_worker_flush(me.worker));
    EXPECT_EQ(0, std::memcmp(span.data(), model.data() + 600000, span.size()));
    // The non-blocking forms with callbacks.
    auto nb = pattern(20000, 7);
    ucs_status_ptr_t r = ucp_put_nb(me.ep, nb.data(), nb.size(), base + 700000, rkey, send_cb);
    if (UCS_PTR_IS_PTR(r)) take_request(r);
    EXPECT_EQ(UCS_OK, me.wait(r));
    std::memcpy(model.data() + 700000, nb.data(), nb.size());
    Done fd;
    ucp_request_param_t fp = send_param(&fd);
    EXPECT_EQ(UCS_OK, me.wait(ucp_ep_flush_nbx(me.ep, &fp)));
    std::vector<char> nb_back(nb.size());
    Done gd;
    ucp_request_param_t gp = send_param(&gd);
    EXPECT_EQ(UCS_OK, me.wait(ucp_get_nbx(me.ep, nb_back.data(), nb_back.size(), base + 700000, rkey, &gp)));
    EXPECT_EQ(nb, nb_back);
    // Atomics on the first words.
    const std::uint64_t a64 = base, a32 = base + 8;
    std::uint64_t w64;
    std::uint32_t w32;
    std::memcpy(&w64, model.data(), 8);
    std::memcpy(&w32, model.data() + 8, 4);
    EXPECT_FALSE(UCS_STATUS_IS_ERR(ucp_atomic_post(me.ep, UCP_ATOMIC_POST_OP_ADD, 5, 8, a64, rkey)));
    EXPECT_FALSE(UCS_STATUS_IS_ERR(ucp_atomic_post(me.ep, UCP_ATOMIC_POST_OP_XOR, 0xff, 4, a32, rkey)));
    ASSERT_EQ(UCS_OK, ucp_ep_flush(me.ep));
    w64 += 5;
    w32 ^= 0xff;
    std::uint64_t r64 = 0x1122334455667788ull;  // CSWAP: in, the value to swap in; compared with the current value: swaps
    ucs_status_ptr_t ar = ucp_atomic_fetch_nb(me.ep, UCP_ATOMIC_FETCH_OP_CSWAP, w64, &r64, 8, a64, rkey, nullptr);
    EXPECT_EQ(UCS_OK, me.wait(ar));
    EXPECT_EQ(w64, r64);
    w64 = 0x1122334455667788ull;
    std::uint32_t r32 = 0;
    std::uint32_t add = 3;
    ucp_request_param_t ap{};
    ap.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    ap.datatype = ucp_dt_make_contig(4);
    ap.reply_buffer = &r32;
    EXPECT_EQ(UCS_OK, me.wait(ucp_atomic_op_nbx(me.ep, UCP_ATOMIC_OP_ADD, &add, 1, a32, rkey, &ap)));
    EXPECT_EQ(w32, r32);
    w32 += 3;
    std::memcpy(model.data(), &w64, 8);
    std::memcpy(model.data() + 8, &w32, 4);
    std::uint64_t check64 = 0;
    ASSERT_EQ(UCS_OK, ucp_get(me.ep, &check64, 8, a64, rkey));
    EXPECT_EQ(w64, check64);
    // The target's own view of its memory.
    ASSERT_TRUE(child.channel().send_u64(1));
    auto dump = child.channel().recv();
    ASSERT_TRUE(dump && dump->size() == kRegion)
        << "no memory dump; child exit " << (child.kill(SIGKILL), child.wait());
    EXPECT_EQ(0, std::memcmp(dump->data(), model.data(), kRegion))
        << "the target's memory differs from the puts and atomics";
    ucp_rkey_destroy(rkey);
    ASSERT_TRUE(child.channel().send_u64(2));
    EXPECT_EQ(0, child.wait());
}

/**
 * MPICH's active messages between processes: ucp_am_send_nb with UCP_AM_SEND_REPLY, replies from the
 * handler.
 */
TEST_P(MultiProcTest, ActiveMessagesWithReplies) {
    const char* tls = GetParam();
    const std::size_t sizes[] = {8, 12000, 300000, 4 << 20};
    Child child([tls](Channel& ch) {
        Side me(tls);
        struct State {
            std::vector<ucs_status_ptr_t> replies;
            int bad = 0;
        } st;
        auto handler = [](void* arg, void* data, size_t length, ucp_ep_h reply_ep, unsigned) -> ucs_status_t {
            auto* s = static_cast<State*>(arg);
            if (reply_ep == nullptr) ++s->bad;
            static std::uint64_t answer[2];  // length, checksum (eager: copied out inside the call)
            answer[0] = length;
            answer[1] = 0;
            for (size_t i = 0; i < length; ++i)
                answer[1] = answer[1] * 31 + static_cast<unsigned char>(static_cast<char*>(data)[i]);
            if (reply_ep != nullptr) {
                s->replies.push_back(
                    ucp_am_send_nb(reply_ep, 2, answer, sizeof(answer), ucp_dt_make_contig(1), nullptr, 0));
            }
            return UCS_OK;
        };
        if (!me.ok() ||
            ucp_worker_set_am_handler(me.worker, 1, handler, &st, UCP_AM_FLAG_WHOLE_MSG) != UCS_OK)
            return 1;
        if (!me.meet(ch)) return 2;
        if (!me.serve_until_message(ch, 2 * kDeadlineSeconds)) return 3;
        for (ucs_status_ptr_t r : st.replies) {
            if (UCS_PTR_IS_ERR(r) || me.wait(r) != UCS_OK) return 4;
        }
        return st.bad == 0 && ch.recv_u64() == 7u ? 0 : 5;
    });
    Side me(tls);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> answers;
    auto handler = [](void* arg, void* data, size_t length, ucp_ep_h, unsigned) -> ucs_status_t {
        auto* a = static_cast<std::vector<std::pair<std::uint64_t, std::uint64_t>>*>(arg);
        std::uint64_t v[2] = {0, 0};
        if (length == sizeof(v)) std::memcpy(v, data, sizeof(v));
        a->emplace_back(v[0], v[1]);
        return UCS_OK;
    };
    ASSERT_EQ(UCS_OK, ucp_worker_set_am_handler(me.worker, 2, handler, &answers, UCP_AM_FLAG_WHOLE_MSG));
    ASSERT_TRUE(me.meet(child.channel()));
    std::vector<std::vector<char>> sent;
    for (std::size_t size : sizes) {
        sent.push_back(pattern(size, static_cast<unsigned>(size)));
        EXPECT_EQ(UCS_OK, me.wait(ucp_am_send_nb(me.ep, 1, sent.back().data(), size, ucp_dt_make_contig(1),
                                                 send_cb, UCP_AM_SEND_REPLY)));
    }
    ASSERT_TRUE(me.progress_until([&] { return answers.size() == std::size(sizes); }))
        << answers.size() << " answers; child exit " << (child.kill(SIGKILL), child.wait());
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
        std::uint64_t sum = 0;
        for (char c : sent[i]) sum = sum * 31 + static_cast<unsigned char>(c);
        EXPECT_EQ(sizes[i], answers[i].first) << "the handler did not get the whole message";
        EXPECT_EQ(sum, answers[i].second);
    }
    ASSERT_TRUE(child.channel().send_u64(7));
    EXPECT_EQ(0, child.wait());
}

// --- a peer killed ---------------------------------------------------------------------------

/** A UCX error status that ucs_status_string knows (not an "Unknown error"). */
bool is_ucx_error(ucs_status_t s) {
    return UCS_STATUS_IS_ERR(s) && s != UCS_ERR_TIMED_OUT &&
           std::strstr(ucs_status_string(s), "nknown") == nullptr;
}

/** A rendezvous send whose receiver is killed: the send fails and the error handler runs, with UCX statuses.
 */
TEST_P(MultiProcTest, PeerKilledFailsAnOutstandingSend) {
    const char* tls = GetParam();
    Child child([tls](Channel& ch) {
        Side me(tls);
        if (!me.meet(ch)) return 1;
        // Never receive: wait for the rendezvous request, say so, wait to be killed.
        ucp_tag_recv_info_t info{};
        if (!me.progress_until([&] { return ucp_tag_probe_nb(me.worker, 5, ~0ull, 0, &info) != nullptr; }))
            return 2;
        ch.send_u64(1);
        (void)ch.recv(10 * kDeadlineSeconds);
        return 3;
    });
    Side me(tls);
    ASSERT_TRUE(me.meet(child.channel(), true));
    auto data = pattern(8 << 20, 5);
    Done sd;
    ucp_request_param_t sp = send_param(&sd);
    ucs_status_ptr_t sr = ucp_tag_send_nbx(me.ep, data.data(), data.size(), 5, &sp);
    ASSERT_TRUE(UCS_PTR_IS_PTR(sr)) << "8 MiB goes by rendezvous";
    std::optional<std::uint64_t> arrived;
    ASSERT_TRUE(me.progress_until([&] { return child.channel().readable(); }))
        << "the child never saw the send";
    arrived = child.channel().recv_u64();
    ASSERT_EQ(1u, arrived.value_or(0));
    child.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, child.wait());
    ASSERT_TRUE(me.progress_until([&] { return sd.calls == 1 && me.errors >= 1; }))
        << "hung after the peer died: send callbacks " << sd.calls << ", error handler calls " << me.errors;
    EXPECT_TRUE(is_ucx_error(sd.status)) << ucs_status_string(sd.status);
    EXPECT_EQ(1, me.errors) << "the error handler runs once";
    EXPECT_TRUE(is_ucx_error(me.last_error)) << ucs_status_string(me.last_error);
    EXPECT_EQ(me.ep, me.error_ep);
    ucp_request_free(sr);
    // The endpoint stays failed: a new send reports an error, at once or through its request.
    std::uint64_t v = 1;
    ucp_request_param_t np{};
    const ucs_status_t again = me.wait(ucp_tag_send_nbx(me.ep, &v, sizeof(v), 6, &np));
    EXPECT_TRUE(is_ucx_error(again)) << ucs_status_string(again);
    // A receive posted meanwhile is not tied to the endpoint: cancel it.
    Done rd;
    ucp_request_param_t rp = recv_param(&rd);
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(me.worker, &v, sizeof(v), 77, ~0ull, &rp);
    ASSERT_TRUE(UCS_PTR_IS_PTR(rr));
    ucp_request_cancel(me.worker, rr);
    EXPECT_EQ(UCS_ERR_CANCELED, me.wait(rr));
}

/**
 * A round trip of small messages, so that the connections both ways are up (a send
 * issued before is queued until wire-up completes, which needs progress).
 */
bool warm_up(Side& me, bool first) {
    std::uint64_t v = 0;
    ucp_request_param_t p{};
    ucp_tag_recv_info_t info{};
    if (first && me.wait(ucp_tag_send_nbx(me.ep, &v, sizeof(v), 0xAAA, &p)) != UCS_OK) return false;
    if (me.wait(ucp_tag_recv_nbx(me.worker, &v, sizeof(v), 0xAAA, ~0ull, &p), &info) != UCS_OK) return false;
    return first || me.wait(ucp_tag_send_nbx(me.ep, &v, sizeof(v), 0xAAA, &p)) == UCS_OK;
}

/** A rendezvous receive whose sender is killed before the data moved: the receive fails, the handler runs. */
TEST_P(MultiProcTest, PeerKilledFailsAnOutstandingReceive) {
    const char* tls = GetParam();
    Child child([tls](Channel& ch) {
        Side me(tls);
        if (!me.meet(ch) || !warm_up(me, true)) return 1;
        static std::vector<char> data = pattern(8 << 20, 6);
        ucp_request_param_t sp{};
        ucs_status_ptr_t r = ucp_tag_send_nbx(me.ep, data.data(), data.size(), 9, &sp);
        if (!UCS_PTR_IS_PTR(r)) return 2;
        ch.send_u64(1);  // the rendezvous request left inside the call; from now on this side stops
        (void)ch.recv(10 * kDeadlineSeconds);
        return 3;
    });
    Side me(tls);
    ASSERT_TRUE(me.meet(child.channel(), true));
    ASSERT_TRUE(warm_up(me, false));
    ASSERT_TRUE(me.progress_until([&] { return child.channel().readable(); }));
    ASSERT_EQ(1u, child.channel().recv_u64().value_or(0));
    ucp_tag_recv_info_t info{};
    ASSERT_TRUE(me.progress_until([&] { return ucp_tag_probe_nb(me.worker, 9, ~0ull, 0, &info) != nullptr; }))
        << "the rendezvous request never arrived";
    EXPECT_EQ(8u << 20, info.length);
    child.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, child.wait());
    std::vector<char> out(8 << 20);
    Done rd;
    ucp_request_param_t rp = recv_param(&rd);
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(me.worker, out.data(), out.size(), 9, ~0ull, &rp);
    if (UCS_PTR_IS_PTR(rr)) {
        ASSERT_TRUE(me.progress_until([&] { return rd.calls == 1; }))
            << "the receive hung after its sender died; error handler calls " << me.errors;
        EXPECT_TRUE(is_ucx_error(rd.status)) << "the data cannot have come: " << ucs_status_string(rd.status);
        ucp_request_free(rr);
    } else {
        EXPECT_TRUE(is_ucx_error(status_of(rr))) << ucs_status_string(status_of(rr));
    }
    ASSERT_TRUE(me.progress_until([&] { return me.errors >= 1; })) << "the error handler never ran";
    EXPECT_EQ(1, me.errors);
    EXPECT_TRUE(is_ucx_error(me.last_error)) << ucs_status_string(me.last_error);
}

INSTANTIATE_TEST_SUITE_P(Tls, MultiProcTest, testing::ValuesIn(kRemoteTls), tls_name);

}  // namespace
}  // namespace ucx_compat
