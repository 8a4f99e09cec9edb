/**
 * Tagged messages through the UCX API, two workers of one context in this process, over
 * LOOM_TLS=shm,self and tcp: the _nbx calls and the UCX 1.x _nb/_nbr ones, eager and
 * rendezvous sizes, sync sends, probes, wildcards, cancel, truncation, callbacks and
 * user data, the no-immediate-completion rule, freeing a request early, the request
 * calls, caller-provided requests as Open MPI's pml uses them.
 */
#include "ucx_compat_test.h"

#include <alloca.h>

namespace ucx_compat {
namespace {

class TagTest : public PairTest {};

/**
 * Sizes across eager short, eager multi-fragment and rendezvous on both transports (shm's
 * rendezvous threshold is ~10 KB, tcp's ~200 KB).
 */
const std::size_t kSizes[] = {0, 1, 8, 1000, 8192, 12000, 65536, 300000, 1 << 20, 4 << 20};

TEST_P(TagTest, NbxSendRecvEverySizeBothOrders) {
    for (std::size_t size : kSizes) {
        for (bool recv_first : {true, false}) {
            SCOPED_TRACE(testing::Message()
                         << size << " bytes, receive posted " << (recv_first ? "first" : "last"));
            const ucp_tag_t tag = 0x1000 + size;
            auto data = pattern(size, static_cast<unsigned>(size));
            std::vector<char> out(size + 16, 'x');
            Done rd, sd;
            ucs_status_ptr_t rr = nullptr, sr = nullptr;
            ucp_request_param_t rp = recv_param(&rd);
            ucp_request_param_t sp = send_param(&sd);
            if (recv_first) rr = ucp_tag_recv_nbx(p.w[1], out.data(), out.size(), tag, ~0ull, &rp);
            sr = ucp_tag_send_nbx(p.ep[0], data.data(), size, tag, &sp);
            ASSERT_FALSE(UCS_PTR_IS_ERR(sr)) << ucs_status_string(UCS_PTR_STATUS(sr));
            if (!recv_first) {
                // Wait for the message to be here, so the receive finds it unexpected.
                ASSERT_TRUE(p.progress_until([&] {
                    ucp_tag_recv_info_t i;
                    return ucp_tag_probe_nb(p.w[1], tag, ~0ull, 0, &i) != nullptr;
                }));
                rr = ucp_tag_recv_nbx(p.w[1], out.data(), out.size(), tag, ~0ull, &rp);
            }
            ASSERT_FALSE(UCS_PTR_IS_ERR(rr));
            ASSERT_TRUE(p.progress_until(
                [&] { return (sr == nullptr || sd.calls == 1) && (rr == nullptr || rd.calls == 1); }));
            if (sr != nullptr) {
                EXPECT_EQ(UCS_OK, sd.status);
                EXPECT_EQ(sr, sd.request) << "the callback gets the handle the call returned";
                EXPECT_EQ(UCS_OK, ucp_request_check_status(sr));
                ucp_request_free(sr);
            }
            if (rr != nullptr) {
                EXPECT_EQ(UCS_OK, rd.status);
                EXPECT_EQ(rr, rd.request);
                EXPECT_EQ(tag, rd.info.sender_tag);
                EXPECT_EQ(size, rd.info.length);
                ucp_tag_recv_info_t info{};
                EXPECT_EQ(UCS_OK, ucp_request_test(rr, &info));
                EXPECT_EQ(tag, info.sender_tag);
                EXPECT_EQ(size, info.length);
                ucp_request_free(rr);
            }
            EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin()));
            EXPECT_EQ('x', out[size]) << "written past the message";
            // A callback never runs for an operation that completed inside its call.
            progress_rounds({p.w[0], p.w[1]}, 10);
            EXPECT_EQ(sr == nullptr ? 0 : 1, sd.calls);
            EXPECT_EQ(rr == nullptr ? 0 : 1, rd.calls);
        }
    }
}

/** A receive that completes inside its call returns NULL and fills recv_info; no callback runs. */
TEST_P(TagTest, ImmediateReceiveFillsRecvInfo) {
    std::uint64_t v = 0xabcdef, out = 0;
    ucp_request_param_t sp{};
    ASSERT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 9, &sp)));
    ASSERT_TRUE(p.progress_until([&] {
        ucp_tag_recv_info_t i;
        return ucp_tag_probe_nb(p.w[1], 9, ~0ull, 0, &i) != nullptr;
    }));
    Done rd;
    ucp_tag_recv_info_t info{};
    ucp_request_param_t rp = recv_param(&rd, UCP_OP_ATTR_FIELD_RECV_INFO);
    rp.recv_info.tag_info = &info;
    ucs_status_ptr_t r = ucp_tag_recv_nbx(p.w[1], &out, sizeof(out), 0, 0, &rp);
    ASSERT_EQ(nullptr, r) << "an arrived eager message completes inside the call";
    EXPECT_EQ(9u, info.sender_tag);
    EXPECT_EQ(sizeof(v), info.length);
    EXPECT_EQ(v, out);
    progress_rounds({p.w[0], p.w[1]}, 10);
    EXPECT_EQ(0, rd.calls);
}

/**
 * UCP_OP_ATTR_FLAG_NO_IMM_CMPL: the request is returned even for an operation done inside
 * the call, and its completion (callback and status) is reported only by
 * ucp_worker_progress, never inside the call (Loom's rule: MPI libraries set fields of
 * their request after the call returns).
 */
TEST_P(TagTest, NoImmCmplReportsOnlyFromProgress) {
    std::uint64_t v = 77, out = 0;
    Done sd;
    ucp_request_param_t sp = send_param(&sd, UCP_OP_ATTR_FLAG_NO_IMM_CMPL);
    ucs_status_ptr_t sr = ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 3, &sp);
    ASSERT_TRUE(UCS_PTR_IS_PTR(sr));
    EXPECT_EQ(0, sd.calls) << "the callback ran inside the call";
    take_request(sr);
    ASSERT_TRUE(p.progress_until([&] { return sd.calls == 1; }));
    EXPECT_EQ(UCS_OK, sd.status);
    EXPECT_EQ(1u, static_cast<UserReq*>(sr)->uses) << "the caller's part was overwritten";
    ucp_request_free(sr);
    ASSERT_TRUE(p.progress_until([&] {
        ucp_tag_recv_info_t i;
        return ucp_tag_probe_nb(p.w[1], 3, ~0ull, 0, &i) != nullptr;
    }));
    // The message is here: the receive is done inside the call, but says so only from progress.
    Done rd;
    ucp_request_param_t rp = recv_param(&rd, UCP_OP_ATTR_FLAG_NO_IMM_CMPL);
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], &out, sizeof(out), 3, ~0ull, &rp);
    ASSERT_TRUE(UCS_PTR_IS_PTR(rr));
    EXPECT_EQ(0, rd.calls) << "the callback ran inside the call";
    EXPECT_EQ(UCS_INPROGRESS, ucp_request_check_status(rr)) << "completion reported inside the call";
    EXPECT_FALSE(ucp_request_is_completed(rr));
    static_cast<UserReq*>(rr)->user_data = &rd;  // as an MPI library fills its request after the call
    ucp_worker_progress(p.w[1]);
    EXPECT_EQ(1, rd.calls) << "the next progress reports it";
    EXPECT_EQ(UCS_OK, rd.status);
    EXPECT_EQ(3u, rd.info.sender_tag);
    EXPECT_EQ(&rd, static_cast<UserReq*>(rr)->user_data);
    EXPECT_TRUE(ucp_request_is_completed(rr));
    EXPECT_EQ(v, out);
    ucp_request_free(rr);
}

TEST_P(TagTest, TruncationReportsTheFullLength) {
    for (std::size_t size : {64ul, 12000ul, 300000ul, 2ul << 20}) {
        for (bool recv_first : {true, false}) {
            SCOPED_TRACE(testing::Message() << size << " bytes, receive " << (recv_first ? "first" : "last"));
            auto data = pattern(size, 5);
            std::vector<char> out(size / 2 + 8, 'y');
            const std::size_t room = size / 2;
            ucp_request_param_t sp{};
            Done rd;
            ucp_tag_recv_info_t imm{};  // filled when the receive completes inside its call
            ucp_request_param_t rp = recv_param(&rd, UCP_OP_ATTR_FIELD_RECV_INFO);
            rp.recv_info.tag_info = &imm;
            ucs_status_ptr_t rr = nullptr;
            if (recv_first) rr = ucp_tag_recv_nbx(p.w[1], out.data(), room, 11, ~0ull, &rp);
            ucs_status_ptr_t sr = ucp_tag_send_nbx(p.ep[0], data.data(), size, 11, &sp);
            if (!recv_first) {
                ASSERT_TRUE(p.progress_until([&] {
                    ucp_tag_recv_info_t i;
                    return ucp_tag_probe_nb(p.w[1], 11, ~0ull, 0, &i) != nullptr;
                }));
                rr = ucp_tag_recv_nbx(p.w[1], out.data(), room, 11, ~0ull, &rp);
            }
            if (UCS_PTR_IS_PTR(rr)) {
                ucp_tag_recv_info_t info{};
                const ucs_status_t rs = p.wait(rr, &info);
                EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, rs) << ucs_status_string(rs);
                EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, rd.status);
                EXPECT_EQ(size, rd.info.length) << "the full length";
                EXPECT_EQ(size, info.length);
                EXPECT_EQ(11u, info.sender_tag);
            } else {
                // Done inside the call (an eager message that was here): the status, and the
                // full length through recv_info.
                EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, UCS_PTR_STATUS(rr));
                EXPECT_EQ(size, imm.length) << "the full length";
                EXPECT_EQ(11u, imm.sender_tag);
                EXPECT_EQ(0, rd.calls);
            }
            EXPECT_EQ('y', out[room]) << "written past the receive buffer";
            // The sender is not failed by its receiver's truncation (UCX completes it, OK or error).
            const ucs_status_t ss = p.wait(sr);
            EXPECT_TRUE(ss == UCS_OK || ss == UCS_ERR_MESSAGE_TRUNCATED) << ucs_status_string(ss);
        }
    }
    // The endpoint still works afterwards.
    std::uint32_t v = 1, o = 0;
    ucp_request_param_t sp{}, rp{};
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], &o, sizeof(o), 12, ~0ull, &rp);
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 12, &sp)));
    EXPECT_EQ(UCS_OK, p.wait(rr));
    EXPECT_EQ(1u, o);
}

/** A sync send completes only once a receive matched it, whatever its size. */
TEST_P(TagTest, SyncSendCompletesOnlyAfterTheMatch) {
    for (std::size_t size : {8ul, 12000ul, 1ul << 20}) {
        for (bool nbx : {true, false}) {
            SCOPED_TRACE(testing::Message()
                         << size << " bytes, " << (nbx ? "ucp_tag_send_sync_nbx" : "ucp_tag_send_sync_nb"));
            auto data = pattern(size, 8);
            Done sd;
            ucp_request_param_t sp = send_param(&sd);
            ucs_status_ptr_t sr =
                nbx ? ucp_tag_send_sync_nbx(p.ep[0], data.data(), size, 21, &sp)
                    : ucp_tag_send_sync_nb(p.ep[0], data.data(), size, ucp_dt_make_contig(1), 21, send_cb);
            ASSERT_TRUE(UCS_PTR_IS_PTR(sr)) << "a sync send cannot complete before its receiver saw it";
            if (!nbx) take_request(sr);
            ucp_tag_recv_info_t info{};
            ASSERT_TRUE(
                p.progress_until([&] { return ucp_tag_probe_nb(p.w[1], 21, ~0ull, 0, &info) != nullptr; }));
            EXPECT_EQ(size, info.length);
            progress_rounds({p.w[0], p.w[1]}, 2000);
            EXPECT_EQ(UCS_INPROGRESS, ucp_request_check_status(sr)) << "completed before any receive matched";
            EXPECT_EQ(0, nbx ? sd.calls : static_cast<UserReq*>(sr)->completed);
            std::vector<char> out(size);
            ucp_request_param_t rp{};
            ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], out.data(), size, 21, ~0ull, &rp);
            EXPECT_EQ(UCS_OK, p.wait(rr));
            ASSERT_TRUE(p.progress_until([&] { return ucp_request_check_status(sr) != UCS_INPROGRESS; }));
            if (nbx) {
                EXPECT_EQ(1, sd.calls);
                EXPECT_EQ(UCS_OK, sd.status);
            } else {
                EXPECT_EQ(1, static_cast<UserReq*>(sr)->completed);
                EXPECT_EQ(UCS_OK, static_cast<UserReq*>(sr)->status);
            }
            nbx ? ucp_request_free(sr) : ucp_request_release(sr);
            EXPECT_EQ(data, out);
        }
    }
}

TEST_P(TagTest, ProbeWithAndWithoutRemove) {
    ucp_tag_recv_info_t info{};
    EXPECT_EQ(nullptr, ucp_tag_probe_nb(p.w[1], 0, 0, 0, &info)) << "nothing sent yet";
    for (std::size_t size : {16ul, 12000ul, 1ul << 20}) {
        SCOPED_TRACE(size);
        auto a = pattern(size, 1), b = pattern(size, 2), c = pattern(size, 3);
        ucp_request_param_t sp{};
        ucs_status_ptr_t s1 = ucp_tag_send_nbx(p.ep[0], a.data(), size, 0x501, &sp);
        ucs_status_ptr_t s2 = ucp_tag_send_nbx(p.ep[0], b.data(), size, 0x502, &sp);
        ucs_status_ptr_t s3 = ucp_tag_send_nbx(p.ep[0], c.data(), size, 0x503, &sp);
        // Without remove: the message stays for a receive.
        ASSERT_TRUE(
            p.progress_until([&] { return ucp_tag_probe_nb(p.w[1], 0x501, ~0ull, 0, &info) != nullptr; }));
        EXPECT_EQ(0x501u, info.sender_tag);
        EXPECT_EQ(size, info.length);
        EXPECT_NE(nullptr, ucp_tag_probe_nb(p.w[1], 0x501, ~0ull, 0, &info))
            << "probing twice finds it again";
        std::vector<char> out(size);
        ucp_request_param_t rp{};
        EXPECT_EQ(UCS_OK, p.wait(ucp_tag_recv_nbx(p.w[1], out.data(), size, 0x501, ~0ull, &rp)));
        EXPECT_EQ(a, out);
        // With remove, then ucp_tag_msg_recv_nbx.
        ucp_tag_message_h m = nullptr;
        ASSERT_TRUE(p.progress_until(
            [&] { return (m = ucp_tag_probe_nb(p.w[1], 0x502, ~0ull, 1, &info)) != nullptr; }));
        EXPECT_EQ(0x502u, info.sender_tag);
        EXPECT_EQ(size, info.length);
        EXPECT_EQ(nullptr, ucp_tag_probe_nb(p.w[1], 0x502, ~0ull, 0, &info))
            << "a removed message is gone from the queue";
        Done rd;
        ucp_request_param_t mp = recv_param(&rd);
        std::fill(out.begin(), out.end(), 0);
        ucs_status_ptr_t mr = ucp_tag_msg_recv_nbx(p.w[1], out.data(), size, m, &mp);
        ucp_tag_recv_info_t minfo{};
        EXPECT_EQ(UCS_OK, p.wait(mr, &minfo));
        if (mr != nullptr) {
            EXPECT_EQ(0x502u, minfo.sender_tag);
            EXPECT_EQ(1, rd.calls);
            EXPECT_EQ(size, rd.info.length);
        }
        EXPECT_EQ(b, out);
        // With remove, then the UCX 1.x ucp_tag_msg_recv_nb (always a request, callback from progress).
        ASSERT_TRUE(p.progress_until(
            [&] { return (m = ucp_tag_probe_nb(p.w[1], 0x503, ~0ull, 1, &info)) != nullptr; }));
        std::fill(out.begin(), out.end(), 0);
        ucs_status_ptr_t nr =
            ucp_tag_msg_recv_nb(p.w[1], out.data(), size, ucp_dt_make_contig(1), m, recv_cb);
        ASSERT_TRUE(UCS_PTR_IS_PTR(nr));
        take_request(nr);
        auto* u = static_cast<UserReq*>(nr);
        EXPECT_EQ(0, u->completed) << "callback inside the call";
        ASSERT_TRUE(p.progress_until([&] { return u->completed == 1; }));
        EXPECT_EQ(UCS_OK, u->status);
        EXPECT_EQ(0x503u, u->info.sender_tag);
        EXPECT_EQ(size, u->info.length);
        ucp_request_release(nr);
        EXPECT_EQ(c, out);
        for (ucs_status_ptr_t s : {s1, s2, s3}) EXPECT_EQ(UCS_OK, p.wait(s));
    }
}

TEST_P(TagTest, WildcardMasksAndOrder) {
    const ucp_tag_t tags[] = {0xAAAA000000000001ull, 0xAAAA000000000002ull, 0xBBBB000000000003ull,
                              0xAAAA000000000004ull};
    std::uint32_t vals[4] = {10, 20, 30, 40};
    ucp_request_param_t sp{};
    for (int i = 0; i < 4; ++i)
        EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &vals[i], 4, tags[i], &sp)));
    // High 16 bits 0xAAAA, any low bits: the three of them, in the order sent.
    const ucp_tag_t mask = 0xFFFF000000000000ull;
    for (int want : {0, 1, 3}) {
        std::uint32_t o = 0;
        ucp_tag_recv_info_t info{};
        ucp_request_param_t rp{};
        EXPECT_EQ(UCS_OK, p.wait(ucp_tag_recv_nbx(p.w[1], &o, 4, 0xAAAA123400000000ull, mask, &rp), &info));
        EXPECT_EQ(vals[want], o);
    }
    // Mask 0: anything (the one left).
    std::uint32_t o = 0;
    Done rd;
    ucp_request_param_t rp = recv_param(&rd, UCP_OP_ATTR_FIELD_RECV_INFO);
    ucp_tag_recv_info_t info{};
    rp.recv_info.tag_info = &info;
    ucs_status_ptr_t r = ucp_tag_recv_nbx(p.w[1], &o, 4, 0, 0, &rp);
    ASSERT_FALSE(UCS_PTR_IS_ERR(r));
    if (r != nullptr) {
        ASSERT_TRUE(p.progress_until([&] { return rd.calls == 1; }));
        info = rd.info;
        ucp_request_free(r);
    }
    EXPECT_EQ(30u, o);
    EXPECT_EQ(tags[2], info.sender_tag);
    // A receive posted first matches a later message of any tag.
    Done rd2;
    ucp_request_param_t rp2 = recv_param(&rd2);
    ucs_status_ptr_t r2 = ucp_tag_recv_nbx(p.w[1], &o, 4, 0, 0, &rp2);
    ASSERT_TRUE(UCS_PTR_IS_PTR(r2));
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &vals[0], 4, 0x1234567ull, &sp)));
    ASSERT_TRUE(p.progress_until([&] { return rd2.calls == 1; }));
    EXPECT_EQ(0x1234567ull, rd2.info.sender_tag);
    ucp_request_free(r2);
}

TEST_P(TagTest, CancelAnUnmatchedReceive) {
    std::uint64_t o = 0;
    Done rd;
    ucp_request_param_t rp = recv_param(&rd);
    ucs_status_ptr_t r = ucp_tag_recv_nbx(p.w[1], &o, sizeof(o), 0x77, ~0ull, &rp);
    ASSERT_TRUE(UCS_PTR_IS_PTR(r));
    ucp_request_cancel(p.w[1], r);
    ASSERT_TRUE(p.progress_until([&] { return rd.calls == 1; }));
    EXPECT_EQ(UCS_ERR_CANCELED, rd.status);
    EXPECT_EQ(UCS_ERR_CANCELED, ucp_request_check_status(r));
    ucp_request_free(r);
    // The canceled receive takes nothing: the next message goes to the next receive.
    std::uint64_t v = 99;
    ucp_request_param_t sp{};
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 0x77, &sp)));
    std::uint64_t o2 = 0;
    ucp_request_param_t rp2{};
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_recv_nbx(p.w[1], &o2, sizeof(o2), 0x77, ~0ull, &rp2)));
    EXPECT_EQ(99u, o2);
    EXPECT_EQ(0u, o);
    // Canceling a completed request changes nothing; a UCX 1.x receive cancels too.
    ucs_status_ptr_t n = ucp_tag_recv_nb(p.w[1], &o, sizeof(o), ucp_dt_make_contig(1), 0x78, ~0ull, recv_cb);
    ASSERT_TRUE(UCS_PTR_IS_PTR(n));
    take_request(n);
    ucp_request_cancel(p.w[1], n);
    ASSERT_TRUE(p.progress_until([&] { return static_cast<UserReq*>(n)->completed == 1; }));
    EXPECT_EQ(UCS_ERR_CANCELED, static_cast<UserReq*>(n)->status);
    ucp_request_cancel(p.w[1], n);
    progress_rounds({p.w[1]}, 10);
    EXPECT_EQ(1, static_cast<UserReq*>(n)->completed);
    ucp_request_release(n);
}

/** ucp_request_free before completion: the operation still completes, its callback never runs. */
TEST_P(TagTest, FreeBeforeCompletionSuppressesTheCallback) {
    // A receive freed before its message: the data still lands.
    std::vector<char> out(1000, 0);
    auto data = pattern(1000, 4);
    Done rd;
    ucp_request_param_t rp = recv_param(&rd);
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], out.data(), out.size(), 0x88, ~0ull, &rp);
    ASSERT_TRUE(UCS_PTR_IS_PTR(rr));
    ucp_request_free(rr);
    ucp_request_param_t sp{};
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], data.data(), data.size(), 0x88, &sp)));
    ASSERT_TRUE(p.progress_until([&] { return out == data; })) << "the freed receive never completed";
    progress_rounds({p.w[0], p.w[1]}, 100);
    EXPECT_EQ(0, rd.calls) << "the callback of a freed request ran";
    // A rendezvous send freed before completion: the receiver still gets every byte.
    auto big = pattern(4 << 20, 6);
    Done sd;
    ucp_request_param_t bsp = send_param(&sd);
    ucs_status_ptr_t sr = ucp_tag_send_nbx(p.ep[0], big.data(), big.size(), 0x89, &bsp);
    ASSERT_TRUE(UCS_PTR_IS_PTR(sr));
    ucp_request_free(sr);
    std::vector<char> bout(big.size());
    ucp_request_param_t brp{};
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_recv_nbx(p.w[1], bout.data(), bout.size(), 0x89, ~0ull, &brp)));
    EXPECT_EQ(big, bout);
    // Flushing the endpoint completes what the freed send still had to do.
    EXPECT_EQ(UCS_OK, p.wait(ucp_ep_flush_nbx(p.ep[0], &sp)));
    progress_rounds({p.w[0], p.w[1]}, 100);
    EXPECT_EQ(0, sd.calls) << "the callback of a freed send ran";
    // UCX 1.x: ucp_request_release before completion, the same rule (counted process-wide:
    // the released memory may serve another operation meanwhile).
    std::uint64_t o = 0, v = 5;
    ucs_status_ptr_t n = ucp_tag_recv_nb(p.w[1], &o, sizeof(o), ucp_dt_make_contig(1), 0x8a, ~0ull, recv_cb);
    ASSERT_TRUE(UCS_PTR_IS_PTR(n));
    take_request(n);
    const long before = legacy_callbacks();
    ucp_request_release(n);
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 0x8a, &sp)));
    ASSERT_TRUE(p.progress_until([&] { return o == 5; }));
    progress_rounds({p.w[0], p.w[1]}, 100);
    EXPECT_EQ(before, legacy_callbacks()) << "the callback of a released request ran";
}

/** The UCX 1.x calls: ucp_tag_send_nb / ucp_tag_recv_nb with their callbacks, test, release. */
TEST_P(TagTest, UcxOneSendRecvNb) {
    for (std::size_t size : {8ul, 12000ul, 1ul << 20}) {
        SCOPED_TRACE(size);
        auto data = pattern(size, 9);
        std::vector<char> out(size);
        ucs_status_ptr_t rr =
            ucp_tag_recv_nb(p.w[1], out.data(), size, ucp_dt_make_contig(1), 0x31, ~0ull, recv_cb);
        ASSERT_TRUE(UCS_PTR_IS_PTR(rr)) << "a UCX 1.x receive always returns a request";
        take_request(rr);
        auto* ur = static_cast<UserReq*>(rr);
        EXPECT_EQ(0, ur->completed);
        ucs_status_ptr_t sr =
            ucp_tag_send_nb(p.ep[0], data.data(), size, ucp_dt_make_contig(1), 0x31, send_cb);
        ASSERT_FALSE(UCS_PTR_IS_ERR(sr));
        if (sr != nullptr) {
            take_request(sr);
            EXPECT_EQ(0, static_cast<UserReq*>(sr)->completed);
        }
        ASSERT_TRUE(p.progress_until([&] {
            return ur->completed == 1 && (sr == nullptr || static_cast<UserReq*>(sr)->completed == 1);
        }));
        EXPECT_EQ(UCS_OK, ur->status);
        EXPECT_EQ(0x31u, ur->info.sender_tag);
        EXPECT_EQ(size, ur->info.length);
        ucp_tag_recv_info_t info{};
        EXPECT_EQ(UCS_OK, ucp_request_test(rr, &info));
        EXPECT_EQ(size, info.length);
        EXPECT_TRUE(ucp_request_is_completed(rr));
        ucp_request_release(rr);
        if (sr != nullptr) {
            EXPECT_EQ(UCS_OK, static_cast<UserReq*>(sr)->status);
            EXPECT_TRUE(ucp_request_is_completed(sr));
            ucp_request_release(sr);
        }
        EXPECT_EQ(data, out);
    }
    // A message already here: the receive's callback runs from progress, never inside the call.
    std::uint32_t v = 3, o = 0;
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nb(p.ep[0], &v, 1, ucp_dt_make_contig(4), 0x32, send_cb)));
    ASSERT_TRUE(p.progress_until([&] {
        ucp_tag_recv_info_t i;
        return ucp_tag_probe_nb(p.w[1], 0x32, ~0ull, 0, &i) != nullptr;
    }));
    ucs_status_ptr_t rr = ucp_tag_recv_nb(p.w[1], &o, 1, ucp_dt_make_contig(4), 0x32, ~0ull, recv_cb);
    ASSERT_TRUE(UCS_PTR_IS_PTR(rr));
    take_request(rr);
    EXPECT_EQ(0, static_cast<UserReq*>(rr)->completed);
    ASSERT_TRUE(p.progress_until([&] { return static_cast<UserReq*>(rr)->completed == 1; }));
    EXPECT_EQ(4u, static_cast<UserReq*>(rr)->info.length);
    EXPECT_EQ(3u, o);
    ucp_request_release(rr);
    // ucp_stream_recv_request_test reads the same request state (status and length).
    std::uint64_t o8 = 0, v8 = 8;
    ucs_status_ptr_t pending = ucp_tag_recv_nb(p.w[1], &o8, 8, ucp_dt_make_contig(1), 0x33, ~0ull, recv_cb);
    ASSERT_TRUE(UCS_PTR_IS_PTR(pending));
    take_request(pending);
    size_t len = 12345;
    EXPECT_EQ(UCS_INPROGRESS, ucp_stream_recv_request_test(pending, &len));
    EXPECT_EQ(12345u, len);
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nb(p.ep[0], &v8, 8, ucp_dt_make_contig(1), 0x33, nullptr)));
    ASSERT_TRUE(p.progress_until([&] { return static_cast<UserReq*>(pending)->completed == 1; }));
    EXPECT_EQ(UCS_OK, ucp_stream_recv_request_test(pending, &len));
    EXPECT_EQ(8u, len);
    ucp_request_release(pending);
}

// --- caller-provided requests ----------------------------------------------------------------

constexpr std::size_t kCanary = 64;
constexpr unsigned char kCanaryByte = 0xA5;

bool canary_intact(const char* p) {
    for (std::size_t i = 0; i < kCanary; ++i) {
        if (static_cast<unsigned char>(p[i]) != kCanaryByte) return false;
    }
    return true;
}

/** The request test loop of Open MPI's pml (MCA_COMMON_UCX_PROGRESS_LOOP around ucp_request_test). */
ucs_status_t test_loop(void* req, ucp_tag_recv_info_t* info, Workers workers) {
    ucs_status_t s = UCS_INPROGRESS;
    const bool done =
        progress_until(workers, [&] { return (s = ucp_request_test(req, info)) != UCS_INPROGRESS; });
    EXPECT_TRUE(done) << "the request never completed";
    return s;
}

/**
 * Open MPI's pml blocking send and receive: the request at the END of request_size bytes of
 * stack (alloca(request_size) + request_size), ucp_tag_send_nbr / ucp_tag_recv_nbr,
 * ucp_request_check_status / ucp_request_test in a progress loop, the same memory reused
 * for the next operation. Canaries around the memory: nothing is written outside it.
 */
TEST_P(TagTest, OpenMpiBlockingSendRecvOnStackRequests) {
    const std::size_t rs = p.context->request_size();
    ASSERT_GT(rs, 0u);
    char* base = static_cast<char*>(alloca(kCanary + rs + kCanary));
    std::memset(base, kCanaryByte, kCanary + rs + kCanary);
    void* rreq = base + kCanary + rs;  // the receive's request: the end of its buffer
    char* sbase = static_cast<char*>(alloca(kCanary + rs + kCanary));
    std::memset(sbase, kCanaryByte, kCanary + rs + kCanary);
    void* sreq = sbase + kCanary + rs;
    unsigned seed = 0;
    for (std::size_t size : {8ul, 100ul, 12000ul, 300000ul, 1ul << 20, 8ul, 4ul << 20, 0ul}) {
        SCOPED_TRACE(size);
        auto data = pattern(size, ++seed);
        std::vector<char> out(size + 1, 'z');
        const ucp_tag_t tag = 0x4000 + seed;
        // 1. A receive whose message already arrived: done inside the call, reported by test.
        ucs_status_t s = ucp_tag_send_nbr(p.ep[0], data.data(), size, ucp_dt_make_contig(1), tag, sreq);
        ASSERT_TRUE(s == UCS_OK || s == UCS_INPROGRESS) << ucs_status_string(s);
        ASSERT_TRUE(p.progress_until([&] {
            ucp_tag_recv_info_t i;
            return ucp_tag_probe_nb(p.w[1], tag, ~0ull, 0, &i) != nullptr;
        }));
        ASSERT_EQ(UCS_OK,
                  ucp_tag_recv_nbr(p.w[1], out.data(), size, ucp_dt_make_contig(1), tag, ~0ull, rreq));
        ucp_tag_recv_info_t info{};
        if (size <= 4096) {
            // A small message that is here completes inside the call, and the caller's request
            // says so at once, with its tag and length (as in UCX; docs/mpi.md).
            EXPECT_EQ(UCS_OK, ucp_request_test(rreq, &info)) << "not complete right after the call";
        } else {
            EXPECT_EQ(UCS_OK, test_loop(rreq, &info, {p.w[0], p.w[1]}));
        }
        EXPECT_EQ(tag, info.sender_tag);
        EXPECT_EQ(size, info.length);
        if (s == UCS_INPROGRESS) {
            ASSERT_TRUE(p.progress_until([&] { return ucp_request_check_status(sreq) != UCS_INPROGRESS; }));
            EXPECT_EQ(UCS_OK, ucp_request_check_status(sreq));
        }
        EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin()));
        EXPECT_EQ('z', out[size]);
        // 2. The receive posted first (same memory again), the send after.
        std::fill(out.begin(), out.end(), 'z');
        ASSERT_EQ(UCS_OK,
                  ucp_tag_recv_nbr(p.w[1], out.data(), size, ucp_dt_make_contig(1), tag + 1, ~0ull, rreq));
        s = ucp_tag_send_nbr(p.ep[0], data.data(), size, ucp_dt_make_contig(1), tag + 1, sreq);
        ASSERT_TRUE(s == UCS_OK || s == UCS_INPROGRESS) << ucs_status_string(s);
        EXPECT_EQ(UCS_OK, test_loop(rreq, &info, {p.w[0], p.w[1]}));
        EXPECT_EQ(tag + 1, info.sender_tag);
        EXPECT_EQ(size, info.length);
        if (s == UCS_INPROGRESS) {
            ASSERT_TRUE(p.progress_until([&] { return ucp_request_check_status(sreq) != UCS_INPROGRESS; }));
        }
        EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin()));
        // 3. Truncation into the same memory: the full length.
        if (size >= 2) {
            s = ucp_tag_send_nbr(p.ep[0], data.data(), size, ucp_dt_make_contig(1), tag + 2, sreq);
            ASSERT_EQ(UCS_OK, ucp_tag_recv_nbr(p.w[1], out.data(), size / 2, ucp_dt_make_contig(1), tag + 2,
                                               ~0ull, rreq));
            EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, test_loop(rreq, &info, {p.w[0], p.w[1]}));
            EXPECT_EQ(size, info.length);
            EXPECT_EQ(tag + 2, info.sender_tag);
            if (s == UCS_INPROGRESS) {
                ASSERT_TRUE(
                    p.progress_until([&] { return ucp_request_check_status(sreq) != UCS_INPROGRESS; }));
            }
        }
        EXPECT_TRUE(canary_intact(base)) << "written below the receive's request memory";
        EXPECT_TRUE(canary_intact(base + kCanary + rs)) << "written past the receive's request handle";
        EXPECT_TRUE(canary_intact(sbase)) << "written below the send's request memory";
        EXPECT_TRUE(canary_intact(sbase + kCanary + rs)) << "written past the send's request handle";
    }
    // Caller-provided requests are the caller's: request_init never runs on them (it would
    // have written past the handle, into the canary, and recorded the memory).
    std::lock_guard<std::mutex> g(hooks().lock);
    EXPECT_EQ(0u, hooks().live.count(rreq) + hooks().live.count(sreq));
}

/**
 * The _nbx form of caller-provided requests (UCP_OP_ATTR_FIELD_REQUEST): the handle returned is the
 * caller's.
 */
TEST_P(TagTest, NbxWithCallerProvidedRequest) {
    const std::size_t rs = p.context->request_size();
    std::vector<char> rmem(kCanary + rs + kCanary, static_cast<char>(kCanaryByte));
    std::vector<char> smem(kCanary + rs + kCanary, static_cast<char>(kCanaryByte));
    void* rreq = rmem.data() + kCanary + rs;
    void* sreq = smem.data() + kCanary + rs;
    for (std::size_t size : {8ul, 300000ul, 2ul << 20}) {
        SCOPED_TRACE(size);
        auto data = pattern(size, 12);
        std::vector<char> out(size);
        Done rd, sd;
        ucp_request_param_t rp = recv_param(&rd, UCP_OP_ATTR_FIELD_REQUEST);
        rp.request = rreq;
        ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], out.data(), size, 0x66, ~0ull, &rp);
        ASSERT_EQ(rreq, rr) << "a posted receive returns the caller's request";
        ucp_request_param_t sp = send_param(&sd, UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FLAG_NO_IMM_CMPL);
        sp.request = sreq;
        ucs_status_ptr_t sr = ucp_tag_send_nbx(p.ep[0], data.data(), size, 0x66, &sp);
        ASSERT_EQ(sreq, sr);
        ASSERT_TRUE(p.progress_until([&] { return rd.calls == 1 && sd.calls == 1; }));
        EXPECT_EQ(rreq, rd.request);
        EXPECT_EQ(sreq, sd.request);
        EXPECT_EQ(UCS_OK, rd.status);
        EXPECT_EQ(size, rd.info.length);
        EXPECT_EQ(UCS_OK, sd.status);
        EXPECT_EQ(data, out);
        // A caller-provided request is released by the caller; ucp_request_free is how UCX callers do it.
        ucp_request_free(rr);
        ucp_request_free(sr);
        EXPECT_TRUE(canary_intact(rmem.data()) && canary_intact(rmem.data() + kCanary + rs));
        EXPECT_TRUE(canary_intact(smem.data()) && canary_intact(smem.data() + kCanary + rs));
    }
}

// --- datatypes ------------------------------------------------------------------------------

/** A generic datatype: count int32 elements, every other one of the buffer (stride 2). */
struct Strided {
    int starts = 0;
    int finishes = 0;
    ucs_status_t unpack_status = UCS_OK;  ///< what unpack returns (UCS_OK: unpacks)
};

struct StridedState {
    Strided* dt;
    char* buf;
    std::size_t count;
};

char& strided_byte(StridedState* s, std::size_t b) {
    return s->buf[(b / 4) * 8 + b % 4];
}

ucp_generic_dt_ops_t strided_ops() {
    ucp_generic_dt_ops_t ops{};
    ops.start_pack = [](void* ctx, const void* buffer, size_t count) -> void* {
        auto* dt = static_cast<Strided*>(ctx);
        ++dt->starts;
        return new StridedState{dt, const_cast<char*>(static_cast<const char*>(buffer)), count};
    };
    ops.start_unpack = [](void* ctx, void* buffer, size_t count) -> void* {
        auto* dt = static_cast<Strided*>(ctx);
        ++dt->starts;
        return new StridedState{dt, static_cast<char*>(buffer), count};
    };
    ops.packed_size = [](void* state) -> size_t { return static_cast<StridedState*>(state)->count * 4; };
    ops.pack = [](void* state, size_t offset, void* dest, size_t max) -> size_t {
        auto* s = static_cast<StridedState*>(state);
        const size_t n = std::min(max, s->count * 4 - offset);
        for (size_t i = 0; i < n; ++i) static_cast<char*>(dest)[i] = strided_byte(s, offset + i);
        return n;
    };
    ops.unpack = [](void* state, size_t offset, const void* src, size_t length) -> ucs_status_t {
        auto* s = static_cast<StridedState*>(state);
        if (s->dt->unpack_status != UCS_OK) return s->dt->unpack_status;
        if (offset + length > s->count * 4) return UCS_ERR_MESSAGE_TRUNCATED;
        for (size_t i = 0; i < length; ++i) strided_byte(s, offset + i) = static_cast<const char*>(src)[i];
        return UCS_OK;
    };
    ops.finish = [](void* state) {
        auto* s = static_cast<StridedState*>(state);
        ++s->dt->finishes;
        delete s;
    };
    return ops;
}

TEST_P(TagTest, GenericDatatypeBothSides) {
    Strided ctx;
    ucp_generic_dt_ops_t ops = strided_ops();
    ucp_datatype_t dt = 0;
    ASSERT_EQ(UCS_OK, ucp_dt_create_generic(&ops, &ctx, &dt));
    EXPECT_EQ(static_cast<ucp_datatype_t>(UCP_DATATYPE_GENERIC), dt & UCP_DATATYPE_CLASS_MASK);
    for (std::size_t count : {1ul, 100ul, 3000ul, 100000ul, 600000ul}) {
        SCOPED_TRACE(testing::Message() << count << " elements");
        std::vector<std::int32_t> src(2 * count), dst(2 * count, -1);
        for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::int32_t>(i * 7 + 1);
        // generic -> generic (nbx)
        ucp_request_param_t sp{}, rp{};
        sp.op_attr_mask = rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
        sp.datatype = rp.datatype = dt;
        ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], dst.data(), count, 0x90, ~0ull, &rp);
        ucs_status_ptr_t sr = ucp_tag_send_nbx(p.ep[0], src.data(), count, 0x90, &sp);
        EXPECT_EQ(UCS_OK, p.wait(sr));
        ucp_tag_recv_info_t info{};
        EXPECT_EQ(UCS_OK, p.wait(rr, &info));
        if (rr != nullptr) {
            EXPECT_EQ(count * 4, info.length);
        }
        for (std::size_t i = 0; i < src.size(); ++i) {
            ASSERT_EQ(i % 2 == 0 ? src[i] : -1, dst[i]) << "element " << i;
        }
        // generic (UCX 1.x) -> contiguous, and contiguous -> generic (UCX 1.x)
        std::vector<std::int32_t> packed(count);
        ucs_status_ptr_t r1 =
            ucp_tag_recv_nb(p.w[1], packed.data(), count * 4, ucp_dt_make_contig(1), 0x91, ~0ull, recv_cb);
        ucs_status_ptr_t s1 = ucp_tag_send_nb(p.ep[0], src.data(), count, dt, 0x91, send_cb);
        EXPECT_EQ(UCS_OK, p.wait(s1));
        EXPECT_EQ(UCS_OK, p.wait(r1));
        for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(src[2 * i], packed[i]) << i;
        std::fill(dst.begin(), dst.end(), -1);
        ucs_status_ptr_t r2 = ucp_tag_recv_nb(p.w[1], dst.data(), count, dt, 0x92, ~0ull, recv_cb);
        ucs_status_ptr_t s2 =
            ucp_tag_send_nb(p.ep[0], packed.data(), count, ucp_dt_make_contig(4), 0x92, send_cb);
        EXPECT_EQ(UCS_OK, p.wait(s2));
        EXPECT_EQ(UCS_OK, p.wait(r2));
        for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(packed[i], dst[2 * i]) << i;
    }
    EXPECT_EQ(ctx.starts, ctx.finishes) << "every pack and unpack state is finished";
    ucp_dt_destroy(dt);
    ucp_dt_destroy(ucp_dt_make_contig(8));  // not generic: nothing to do
}

/**
 * The UCX status a receive reports when a generic datatype's unpack returns @p err: the
 * same status, except for the UCX errors Loom's status set has no counterpart for (the
 * layer passes the unpack's status through Loom's request): UCS_ERR_NOT_IMPLEMENTED
 * arrives as UCS_ERR_UNSUPPORTED, and NO_PROGRESS, BUFFER_TOO_SMALL,
 * SOME_CONNECTS_FAILED, SHMEM_SEGMENT and the link/endpoint failure ranges (but
 * ENDPOINT_TIMEOUT) as UCS_ERR_IO_ERROR. (MPI libraries' unpack functions return
 * UCS_OK or UCS_ERR_MESSAGE_TRUNCATED.)
 */
ucs_status_t unpack_error_seen(ucs_status_t err) {
    switch (err) {
        case UCS_ERR_NOT_IMPLEMENTED:
            return UCS_ERR_UNSUPPORTED;
        case UCS_ERR_NO_PROGRESS:
        case UCS_ERR_BUFFER_TOO_SMALL:
        case UCS_ERR_SOME_CONNECTS_FAILED:
        case UCS_ERR_SHMEM_SEGMENT:
            return UCS_ERR_IO_ERROR;
        default:
            break;
    }
    if (err <= UCS_ERR_FIRST_LINK_FAILURE && err >= UCS_ERR_LAST_ENDPOINT_FAILURE &&
        err != UCS_ERR_ENDPOINT_TIMEOUT) {
        return UCS_ERR_IO_ERROR;
    }
    return err;
}

/**
 * An unpack that fails: the receive completes with the UCX status the unpack returned
 * (truncation included; unpack_error_seen() lists the few that Loom cannot carry), for
 * eager and rendezvous messages.
 */
TEST_P(TagTest, GenericUnpackErrorSurfacesAsItsUcxStatus) {
    Strided ctx;
    ucp_generic_dt_ops_t ops = strided_ops();
    ucp_datatype_t dt = 0;
    ASSERT_EQ(UCS_OK, ucp_dt_create_generic(&ops, &ctx, &dt));
    int exact = 0;
    for (int e = UCS_ERR_NO_MESSAGE; e >= UCS_ERR_LAST_ENDPOINT_FAILURE; --e) {
        if (e < UCS_ERR_CONNECTION_RESET && e > UCS_ERR_FIRST_LINK_FAILURE) continue;  // unassigned codes
        const ucs_status_t err = static_cast<ucs_status_t>(e);
        if (unpack_error_seen(err) == err) ++exact;
        for (std::size_t count : {16ul, 200000ul}) {
            SCOPED_TRACE(testing::Message() << ucs_status_string(err) << ", " << count << " elements");
            ctx.unpack_status = err;
            std::vector<std::int32_t> src(count, 3), dst(2 * count, 0);
            Done rd;
            ucp_request_param_t rpc = recv_param(&rd, UCP_OP_ATTR_FIELD_DATATYPE);
            rpc.datatype = dt;
            ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], dst.data(), count, 0x93, ~0ull, &rpc);
            ucp_request_param_t sp{};
            ucs_status_ptr_t sr = ucp_tag_send_nbx(p.ep[0], src.data(), count * 4, 0x93, &sp);
            const ucs_status_t rs = p.wait(rr);
            EXPECT_EQ(unpack_error_seen(err), rs) << "got " << ucs_status_string(rs);
            if (rr != nullptr) {
                EXPECT_EQ(unpack_error_seen(err), rd.status);
            }
            (void)p.wait(sr);
        }
    }
    EXPECT_EQ(21, exact) << "UCX errors that must surface unchanged";
    ctx.unpack_status = UCS_OK;
    // A message longer than the generic receive's packed size: truncated.
    std::vector<std::int32_t> src(64, 1), dst(2 * 32, 0);
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = dt;
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], dst.data(), 32, 0x94, ~0ull, &rp);
    ucp_request_param_t sp{};
    ucs_status_ptr_t sr = ucp_tag_send_nbx(p.ep[0], src.data(), src.size() * 4, 0x94, &sp);
    ucp_tag_recv_info_t info{};
    EXPECT_EQ(UCS_ERR_MESSAGE_TRUNCATED, p.wait(rr, &info));
    if (rr != nullptr) {
        EXPECT_EQ(64u * 4, info.length);
    }
    (void)p.wait(sr);
    EXPECT_EQ(ctx.starts, ctx.finishes);
    ucp_dt_destroy(dt);
}

TEST_P(TagTest, IovDatatypes) {
    for (std::size_t size : {30ul, 30000ul, 3ul << 20}) {
        SCOPED_TRACE(size);
        auto data = pattern(size, 13);
        // Three pieces of uneven lengths (one empty).
        std::vector<char> a(size / 3), b(0), c(size - size / 3);
        ucp_dt_iov_t siov[3] = {
            {data.data(), size / 3}, {nullptr, 0}, {data.data() + size / 3, size - size / 3}};
        ucp_dt_iov_t riov[3] = {{a.data(), a.size()}, {b.data(), 0}, {c.data(), c.size()}};
        // iov -> contiguous (nbx)
        std::vector<char> out(size);
        ucp_request_param_t sp{};
        sp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
        sp.datatype = ucp_dt_make_iov();
        ucp_request_param_t rp{};
        ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], out.data(), size, 0xa0, ~0ull, &rp);
        EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], siov, 3, 0xa0, &sp)));
        ucp_tag_recv_info_t info{};
        EXPECT_EQ(UCS_OK, p.wait(rr, &info));
        EXPECT_EQ(data, out);
        // contiguous -> iov (UCX 1.x)
        ucs_status_ptr_t r2 = ucp_tag_recv_nb(p.w[1], riov, 3, ucp_dt_make_iov(), 0xa1, ~0ull, recv_cb);
        EXPECT_EQ(UCS_OK,
                  p.wait(ucp_tag_send_nb(p.ep[0], data.data(), size, ucp_dt_make_contig(1), 0xa1, send_cb)));
        EXPECT_EQ(UCS_OK, p.wait(r2));
        EXPECT_TRUE(std::equal(a.begin(), a.end(), data.begin()));
        EXPECT_TRUE(std::equal(c.begin(), c.end(), data.begin() + size / 3));
        // iov -> iov (nbx)
        std::fill(a.begin(), a.end(), 0);
        std::fill(c.begin(), c.end(), 0);
        ucp_request_param_t rpi{};
        rpi.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
        rpi.datatype = ucp_dt_make_iov();
        ucs_status_ptr_t r3 = ucp_tag_recv_nbx(p.w[1], riov, 3, 0xa2, ~0ull, &rpi);
        EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], siov, 3, 0xa2, &sp)));
        EXPECT_EQ(UCS_OK, p.wait(r3));
        EXPECT_TRUE(std::equal(a.begin(), a.end(), data.begin()));
        EXPECT_TRUE(std::equal(c.begin(), c.end(), data.begin() + size / 3));
    }
}

/** Contiguous datatypes of wider elements count elements, not bytes. */
TEST_P(TagTest, ContigElementSizes) {
    std::vector<std::uint64_t> v(1000), o(1000, 0);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = i * 0x0101010101ull;
    ucp_request_param_t sp{};
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    sp.datatype = ucp_dt_make_contig(8);
    ucp_tag_recv_info_t info{};
    ucs_status_ptr_t rr =
        ucp_tag_recv_nb(p.w[1], o.data(), o.size(), ucp_dt_make_contig(8), 0xb0, ~0ull, recv_cb);
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_send_nbx(p.ep[0], v.data(), v.size(), 0xb0, &sp)));
    EXPECT_EQ(UCS_OK, p.wait(rr, &info));
    EXPECT_EQ(8000u, info.length) << "the length is in bytes";
    EXPECT_EQ(v, o);
}

INSTANTIATE_TEST_SUITE_P(Tls, TagTest, testing::ValuesIn(kLocalTls), tls_name);

}  // namespace
}  // namespace ucx_compat
