/**
 * The protocol table (src/ucp/proto): what LOOM_PROTO_INFO and `loom_info -e` print is
 * what the send paths do. For every operation class and a sweep of sizes the protocol the
 * printout names is the one the table selects, the API fast paths stop where the table's
 * short range does, requests really run the selected protocol, and a rendezvous receiver
 * runs the scheme its endpoint's table prints.
 */
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp/api/handles.h"
#include "ucp/core/worker.h"
#include "ucp_pair.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using loom::test::EnvList;
using loom::test::TlSet;
using loom::ucp::Ep;
using loom::ucp::kNumProtoOps;
using loom::ucp::ProtoOp;
using loom::ucp::ProtoRange;

/** One range as printed: its sizes and the text after them (protocol name, then details). */
struct PrintedRange {
    std::size_t first, last;
    std::string text;
};

/** The printout parsed: the ranges under each class heading ("tag, contiguous"). */
std::map<std::string, std::vector<PrintedRange>> parse(const std::string& printout) {
    std::map<std::string, std::vector<PrintedRange>> classes;
    std::istringstream in(printout);
    std::string line, current;
    while (std::getline(in, line)) {
        const std::size_t dots = line.find(" .. ");
        if (dots == std::string::npos) {
            if (!line.empty() && line.back() == ':' && line.rfind("  ", 0) == 0 && line.find("protocols of") == std::string::npos) {
                current = line.substr(2, line.size() - 3);
                classes[current];
            }
            continue;
        }
        std::istringstream fields(line);
        std::string first, sep, last;
        fields >> first >> sep >> last;
        std::string rest;
        std::getline(fields, rest);
        rest.erase(0, rest.find_first_not_of(' '));
        classes[current].push_back({std::stoull(first), last == "inf" ? SIZE_MAX : std::stoull(last), rest});
    }
    return classes;
}

std::string class_name(ProtoOp op, bool contig) {
    return std::string(loom::ucp::proto_op_name(op)) + (contig ? ", contiguous" : ", iov/generic");
}

class ProtoTableTest : public loom::test::UcpPairTest {
protected:
    ProtoTableTest()
        : UcpPairTest(LOOM_FEATURE_TAG | LOOM_FEATURE_AM | LOOM_FEATURE_STREAM | LOOM_FEATURE_RMA |
                      LOOM_FEATURE_AMO64) {}

    Ep* ep() const { return reinterpret_cast<Ep*>(ep_); }

    /** Checks the printout against the table for every class and a sweep of sizes. */
    void check_printout_is_table() {
        const std::string printout = ep()->worker->describe_protocols(*ep(), "");
        const auto printed = parse(printout);
        for (unsigned i = 0; i < kNumProtoOps; ++i) {
            const auto op = static_cast<ProtoOp>(i);
            for (bool contig : {true, false}) {
                SCOPED_TRACE(class_name(op, contig));
                auto it = printed.find(class_name(op, contig));
                const std::vector<PrintedRange> none;
                const std::vector<PrintedRange>& ranges = it != printed.end() ? it->second : none;
                // The sweep: both sides of every printed boundary, and powers of two.
                std::set<std::size_t> sizes{0, 1, 2, 3, 4, 7, 8, 9, SIZE_MAX};
                for (const PrintedRange& r : ranges) {
                    for (std::size_t b : {r.first, r.last}) {
                        sizes.insert(b);
                        if (b != 0) sizes.insert(b - 1);
                        if (b != SIZE_MAX) sizes.insert(b + 1);
                    }
                }
                for (int shift = 0; shift < 28; ++shift) sizes.insert(std::size_t{1} << shift);
                for (std::size_t size : sizes) {
                    const ProtoRange* selected = ep()->protos->select(op, contig, size);
                    const PrintedRange* shown = nullptr;
                    for (const PrintedRange& r : ranges) {
                        if (r.first <= size && size <= r.last) shown = &r;
                    }
                    if (selected == nullptr) {
                        EXPECT_EQ(nullptr, shown) << size << " B: printed \"" << shown->text
                                                  << "\", the table has nothing\n" << printout;
                        continue;
                    }
                    ASSERT_NE(nullptr, shown) << size << " B: the table has " << selected->proto->name
                                              << ", the printout nothing\n" << printout;
                    const std::string name = selected->proto->name;
                    EXPECT_EQ(0u, shown->text.rfind(name, 0))
                        << size << " B: printed \"" << shown->text << "\", the table has " << name;
                    EXPECT_TRUE(shown->text.size() == name.size() ||
                                std::string(" ,(").find(shown->text[name.size()]) != std::string::npos)
                        << shown->text;
                }
            }
        }
    }

    /** The API fast paths' limits are where the table's short ranges end. */
    void check_fast_path_limits() {
        const struct {
            ProtoOp op;
            std::uint32_t limit;
        } classes[] = {{ProtoOp::tag, ep()->tag_short_limit},
                       {ProtoOp::am, ep()->am_short_limit},
                       {ProtoOp::stream, ep()->stream_short_limit}};
        for (const auto& c : classes) {
            SCOPED_TRACE(loom::ucp::proto_op_name(c.op));
            for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{c.limit} - 1, std::size_t{c.limit},
                                     std::size_t{c.limit} + 1}) {
                if (size == SIZE_MAX) continue;  // limit 0, minus one
                const ProtoRange* r = ep()->protos->select(c.op, true, size);
                ASSERT_NE(nullptr, r) << size;
                EXPECT_EQ(size < c.limit, r->proto->fast_path) << size << " B goes by " << r->proto->name;
            }
        }
    }
};

TEST_P(ProtoTableTest, PrintoutIsTheDispatchersTable) {
    const EnvList variants[] = {
        {},
        {{"LOOM_RNDV_THRESH", "4k"}},
        {{"LOOM_RNDV_THRESH", "0"}},
        {{"LOOM_RNDV_THRESH", "inf"}},
        {{"LOOM_RNDV_SCHEME", "am"}},
        {{"LOOM_RNDV_SCHEME", "put_zcopy"}, {"LOOM_RNDV_THRESH", "100"}},
    };
    for (const EnvList& env : variants) {
        SCOPED_TRACE(env.empty() ? std::string("defaults") : env[0].first + "=" + env[0].second);
        init(env);
        check_printout_is_table();
        check_fast_path_limits();
    }
}

/** Every class of the printout that a protocol serves has at least one range. */
TEST_P(ProtoTableTest, EveryMessageClassIsServedFromZero) {
    for (ProtoOp op : {ProtoOp::tag, ProtoOp::tag_sync, ProtoOp::am, ProtoOp::am_eager, ProtoOp::am_rndv,
                       ProtoOp::stream, ProtoOp::rndv_recv}) {
        for (bool contig : {true, false}) {
            const auto& cls = ep()->protos->ranges(op, contig);
            ASSERT_NE(0u, cls.count) << class_name(op, contig);
            EXPECT_EQ(0u, cls.ranges[0].first) << class_name(op, contig);
            EXPECT_EQ(SIZE_MAX, cls.ranges[cls.count - 1].last) << class_name(op, contig);
            for (unsigned i = 1; i < cls.count; ++i) {
                EXPECT_EQ(cls.ranges[i - 1].last + 1, cls.ranges[i].first) << class_name(op, contig);
            }
        }
    }
}

/** The scheme rndv_recv_start says it runs for a @p size-byte message ("" when it said nothing). */
std::string scheme_run(const std::string& log, std::size_t size) {
    const std::string what = "rendezvous receive of " + std::to_string(size) + " B from ";
    const std::size_t at = log.find(what);
    if (at == std::string::npos) return {};
    const std::size_t by = log.find(" by ", at);
    const std::size_t eol = log.find('\n', at);
    if (by == std::string::npos || by > eol) return {};
    return log.substr(by + 4, eol - by - 4);
}

/**
 * For every LOOM_RNDV_SCHEME and a sweep of sizes around every printed boundary, the
 * scheme a rendezvous receive runs is the one the printout of the receiver's endpoint
 * (the one replies go on) names for that size: contiguous buffers, and an iov receive.
 */
TEST_P(ProtoTableTest, TheReceiverRunsThePrintedScheme) {
    for (const char* scheme : {"auto", "get_zcopy", "put_zcopy", "get_put", "am"}) {
        SCOPED_TRACE(scheme);
        init({{"LOOM_RNDV_SCHEME", scheme}, {"LOOM_RNDV_THRESH", "0"}});  // every size by rendezvous
        std::vector<char> data(4 << 20, 0x3c), in(4 << 20);
        // Connected both ways: the receiver answers on its endpoint to the sender.
        loom_status_ptr_t first = loom_tag_recv_nbx(receiver_, in.data(), 8, 1, ~0ull, nullptr);
        ASSERT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep_, data.data(), 8, 1, nullptr)));
        ASSERT_EQ(LOOM_OK, wait(first));
        loom::ucp::Worker& rw = *receiver_->impl;
        auto back = rw.ep_by_uuid.find(ep()->worker->uuid);
        ASSERT_NE(rw.ep_by_uuid.end(), back);
        const Ep& rep = *back->second;
        const std::string printout = rw.describe_protocols(rep, "");
        for (bool contig : {true, false}) {
            SCOPED_TRACE(class_name(ProtoOp::rndv_recv, contig));
            const auto printed = parse(printout);
            auto it = printed.find(class_name(ProtoOp::rndv_recv, contig));
            ASSERT_NE(printed.end(), it) << printout;
            std::set<std::size_t> sizes{0, 1, 4096, 8191, 8192, 65536, 1 << 20, 4 << 20};
            for (const PrintedRange& r : it->second) {
                for (std::size_t b : {r.first, r.last}) {
                    if (b != SIZE_MAX) sizes.insert(b);
                    if (b != 0 && b != SIZE_MAX) sizes.insert(b - 1);
                    if (b < (4u << 20)) sizes.insert(b + 1);
                }
            }
            for (std::size_t size : sizes) {
                if (size > data.size()) continue;
                const PrintedRange* shown = nullptr;
                for (const PrintedRange& r : it->second) {
                    if (r.first <= size && size <= r.last) shown = &r;
                }
                ASSERT_NE(nullptr, shown) << size << " B: nothing printed\n" << printout;
                loom::test::LogCapture log("warn,ucp=debug");
                loom_request_param_t p{};
                loom_dt_iov_t riov[2] = {{in.data(), size / 2}, {in.data() + size / 2, data.size() - size / 2}};
                if (!contig) {
                    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
                    p.datatype = loom_dt_make_iov();
                }
                loom_status_ptr_t rreq = contig ? loom_tag_recv_nbx(receiver_, in.data(), size, 5, ~0ull, nullptr)
                                                : loom_tag_recv_nbx(receiver_, riov, 2, 5, ~0ull, &p);
                loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), size, 5, nullptr);
                ASSERT_EQ(LOOM_OK, wait(sreq)) << size;
                ASSERT_EQ(LOOM_OK, wait(rreq)) << size;
                const std::string run = scheme_run(log.text(), size);
                EXPECT_EQ(0u, shown->text.rfind(run + " ", 0))
                    << size << " B: the receiver ran \"" << run << "\", the printout says \"" << shown->text << "\"";
            }
        }
    }
}

loom_status_t drop_am(void*, const void*, size_t, void*, size_t, const loom_am_recv_param_t*) { return LOOM_OK; }

/** Requests run the protocol the table selects for their class and size. */
TEST_P(ProtoTableTest, RequestsRunTheSelectedProtocol) {
    init({{"LOOM_RNDV_THRESH", "20000"}});
    loom_am_handler_param_t h{};
    h.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB;
    h.id = 3;
    h.cb = drop_am;
    ASSERT_EQ(LOOM_OK, loom_worker_set_am_recv_handler(receiver_, &h));
    // The remote side of puts and gets.
    const std::size_t region = 1 << 20;
    std::vector<std::uint8_t> target(region);
    loom_mem_map_params_t mp{};
    mp.field_mask = LOOM_MEM_MAP_PARAM_FIELD_ADDRESS | LOOM_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = target.data();
    mp.length = region;
    loom_mem_h memh = nullptr;
    ASSERT_EQ(LOOM_OK, loom_mem_map(ctx_, &mp, &memh));
    void* packed = nullptr;
    size_t packed_len = 0;
    ASSERT_EQ(LOOM_OK, loom_rkey_pack(ctx_, memh, &packed, &packed_len));
    loom_rkey_h rkey = nullptr;
    ASSERT_EQ(LOOM_OK, loom_ep_rkey_unpack(ep_, packed, packed_len, &rkey));
    loom_rkey_buffer_release(packed);

    std::vector<std::uint8_t> data(region, 0x5c), in(region);
    for (std::size_t size : {std::size_t{1}, std::size_t{8}, std::size_t{ep()->tag_short_limit},
                             std::size_t{5000}, std::size_t{10000}, std::size_t{19999}, std::size_t{20000},
                             std::size_t{100000}, region}) {
        SCOPED_TRACE(std::to_string(size) + " B");
        const struct {
            ProtoOp op;
            std::uint32_t am_flags;
        } sends[] = {{ProtoOp::tag, 0},
                     {ProtoOp::tag_sync, 0},
                     {ProtoOp::am, 0},
                     {ProtoOp::am_eager, LOOM_AM_SEND_FLAG_EAGER},
                     {ProtoOp::am_rndv, LOOM_AM_SEND_FLAG_RNDV},
                     {ProtoOp::stream, 0},
                     {ProtoOp::put, 0},
                     {ProtoOp::get, 0}};
        for (const auto& s : sends) {
            SCOPED_TRACE(loom::ucp::proto_op_name(s.op));
            loom_request_param_t p{};
            p.op_attr_mask = LOOM_OP_ATTR_FLAG_NO_IMM_CMPL;  // a request even when done in the call
            loom_request_param_t am = p;
            am.op_attr_mask |= LOOM_OP_ATTR_FIELD_FLAGS;
            am.flags = s.am_flags;
            loom_status_ptr_t recv = nullptr;
            loom_status_ptr_t req = nullptr;
            const auto raddr = reinterpret_cast<std::uintptr_t>(target.data());
            switch (s.op) {
            case ProtoOp::tag:
            case ProtoOp::tag_sync:
                recv = loom_tag_recv_nbx(receiver_, in.data(), size, 7, ~0ull, nullptr);
                req = s.op == ProtoOp::tag ? loom_tag_send_nbx(ep_, data.data(), size, 7, &p)
                                           : loom_tag_send_sync_nbx(ep_, data.data(), size, 7, &p);
                break;
            case ProtoOp::stream: req = loom_stream_send_nbx(ep_, data.data(), size, &p); break;
            case ProtoOp::put: req = loom_put_nbx(ep_, data.data(), size, raddr, rkey, &p); break;
            case ProtoOp::get: req = loom_get_nbx(ep_, in.data(), size, raddr, rkey, &p); break;
            default: req = loom_am_send_nbx(ep_, 3, nullptr, 0, data.data(), size, &am); break;
            }
            ASSERT_TRUE(LOOM_PTR_IS_PTR(req)) << loom_status_string(LOOM_PTR_STATUS(req));
            const loom::ucp::Request* r = loom::ucp::request_of(req);
            const ProtoRange* selected = ep()->protos->select(s.op, true, size);
            ASSERT_NE(nullptr, selected);
            const loom::ucp::ProtoProgress used = s.op == ProtoOp::put || s.op == ProtoOp::get ? r->progress
                                                                                             : r->progress;
            EXPECT_EQ(selected->progress, used) << "the table says " << selected->proto->name;
            EXPECT_EQ(LOOM_OK, wait(req));
            if (recv != nullptr) {
                EXPECT_EQ(LOOM_OK, wait(recv));
            }
        }
    }
    loom_rkey_destroy(rkey);
    EXPECT_EQ(LOOM_OK, loom_mem_unmap(ctx_, memh));
}

INSTANTIATE_TEST_SUITE_P(Tls, ProtoTableTest,
                         testing::Values(TlSet{"self", "self", true}, TlSet{"shm", "shm", false},
                                         TlSet{"tcp", "tcp", false}),
                         [](const testing::TestParamInfo<TlSet>& info) { return std::string(info.param.name); });

}  // namespace
