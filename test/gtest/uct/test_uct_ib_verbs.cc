/**
 * Facts about the devices that the rc transport's design rests on, checked with plain
 * verbs and rdma_cm (no Loom code): what access rights the sink of an RDMA READ needs.
 *
 * The iWARP specification (RFC 5040) delivers read responses as tagged writes to the
 * sink's STag, so hardware iWARP devices require IBV_ACCESS_REMOTE_WRITE on the sink;
 * the ib md therefore adds it on iWARP (IbMd::ibv_access). This test records what the
 * devices here do: a sink with local write only is accepted by siw as well as by rxe
 * (neither enforces the iWARP rule), a sink without local write is refused by both.
 * Needs the addresses the rdma-vm exports (RDMA_VM_<DEV>_IP); skips elsewhere.
 */
#include <gtest/gtest.h>

#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <fcntl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace loom::uct::test {
namespace {

/** A client and a server QP connected through rdma_cm between two IP addresses. */
class CmConnection {
public:
    CmConnection(const char* server_ip, const char* client_ip) { ok_ = setup(server_ip, client_ip); }

    ~CmConnection() {
        for (ibv_mr* mr : mrs_) ibv_dereg_mr(mr);
        if (client_ != nullptr) {
            if (client_->qp != nullptr) rdma_destroy_qp(client_);
            rdma_destroy_id(client_);
        }
        if (server_ != nullptr) {
            if (server_->qp != nullptr) rdma_destroy_qp(server_);
            rdma_destroy_id(server_);
        }
        if (listen_ != nullptr) rdma_destroy_id(listen_);
        if (client_cq_ != nullptr) ibv_destroy_cq(client_cq_);
        if (server_cq_ != nullptr) ibv_destroy_cq(server_cq_);
        if (client_pd_ != nullptr) ibv_dealloc_pd(client_pd_);
        if (server_pd_ != nullptr) ibv_dealloc_pd(server_pd_);
        if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
    }

    bool ok() const { return ok_; }
    const std::string& error() const { return error_; }

    /** Registers @p buf on the client (@p client true) or server with @p access; nullptr on failure. */
    ibv_mr* reg(bool client, void* buf, std::size_t len, int access) {
        ibv_mr* mr = ibv_reg_mr(client ? client_pd_ : server_pd_, buf, len, access);
        if (mr != nullptr) mrs_.push_back(mr);
        return mr;
    }

    /** Reads @p len bytes from the server's @p remote (@p rkey) into the client's @p sink; the completion
     * status. */
    ibv_wc_status read(void* sink, std::uint32_t lkey, std::uint32_t len, const void* remote,
                       std::uint32_t rkey) {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(sink), len, lkey};
        ibv_send_wr wr{};
        wr.opcode = IBV_WR_RDMA_READ;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(remote);
        wr.wr.rdma.rkey = rkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(client_->qp, &wr, &bad) != 0) return IBV_WC_GENERAL_ERR;
        ibv_wc wc{};
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (ibv_poll_cq(client_cq_, 1, &wc) == 0) {
            if (std::chrono::steady_clock::now() > deadline) return IBV_WC_RESP_TIMEOUT_ERR;
        }
        return wc.status;
    }

private:
    bool setup(const char* server_ip, const char* client_ip) {
        channel_ = rdma_create_event_channel();
        if (channel_ == nullptr) return fail("rdma_create_event_channel");
        if (rdma_create_id(channel_, &listen_, nullptr, RDMA_PS_TCP) != 0) return fail("rdma_create_id");
        sockaddr_in server{};
        server.sin_family = AF_INET;
        inet_pton(AF_INET, server_ip, &server.sin_addr);
        if (rdma_bind_addr(listen_, reinterpret_cast<sockaddr*>(&server)) != 0) return fail("rdma_bind_addr");
        if (rdma_listen(listen_, 4) != 0) return fail("rdma_listen");
        server.sin_port = rdma_get_src_port(listen_);
        sockaddr_in client{};
        client.sin_family = AF_INET;
        inet_pton(AF_INET, client_ip, &client.sin_addr);
        if (rdma_create_id(channel_, &client_, nullptr, RDMA_PS_TCP) != 0) return fail("rdma_create_id");
        if (rdma_resolve_addr(client_, reinterpret_cast<sockaddr*>(&client),
                              reinterpret_cast<sockaddr*>(&server), 5000) != 0 ||
            !expect(RDMA_CM_EVENT_ADDR_RESOLVED)) {
            return fail("resolve address");
        }
        if (rdma_resolve_route(client_, 5000) != 0 || !expect(RDMA_CM_EVENT_ROUTE_RESOLVED)) {
            return fail("resolve route");
        }
        client_pd_ = ibv_alloc_pd(client_->verbs);
        client_cq_ = ibv_create_cq(client_->verbs, 64, nullptr, nullptr, 0);
        ibv_qp_init_attr attr = qp_attr(client_cq_);
        if (client_pd_ == nullptr || client_cq_ == nullptr ||
            rdma_create_qp(client_, client_pd_, &attr) != 0) {
            return fail("client QP");
        }
        rdma_conn_param param{};
        param.responder_resources = 1;
        param.initiator_depth = 1;
        param.retry_count = 7;
        if (rdma_connect(client_, &param) != 0) return fail("rdma_connect");
        rdma_cm_event* event = next_event();
        if (event == nullptr || event->event != RDMA_CM_EVENT_CONNECT_REQUEST) return fail("connect request");
        server_ = event->id;
        rdma_ack_cm_event(event);
        server_pd_ = ibv_alloc_pd(server_->verbs);
        server_cq_ = ibv_create_cq(server_->verbs, 64, nullptr, nullptr, 0);
        attr = qp_attr(server_cq_);
        if (server_pd_ == nullptr || server_cq_ == nullptr ||
            rdma_create_qp(server_, server_pd_, &attr) != 0) {
            return fail("server QP");
        }
        if (rdma_accept(server_, &param) != 0) return fail("rdma_accept");
        for (int established = 0; established < 2; ++established) {
            if (!expect(RDMA_CM_EVENT_ESTABLISHED)) return fail("establish");
        }
        return true;
    }

    static ibv_qp_init_attr qp_attr(ibv_cq* cq) {
        ibv_qp_init_attr attr{};
        attr.send_cq = cq;
        attr.recv_cq = cq;
        attr.qp_type = IBV_QPT_RC;
        attr.cap.max_send_wr = 16;
        attr.cap.max_recv_wr = 16;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        return attr;
    }

    rdma_cm_event* next_event() {
        pollfd pfd{channel_->fd, POLLIN, 0};
        if (::poll(&pfd, 1, 10000) != 1) return nullptr;
        rdma_cm_event* event = nullptr;
        return rdma_get_cm_event(channel_, &event) == 0 ? event : nullptr;
    }

    bool expect(rdma_cm_event_type type) {
        rdma_cm_event* event = next_event();
        if (event == nullptr) return false;
        bool match = event->event == type;
        rdma_ack_cm_event(event);
        return match;
    }

    bool fail(const char* what) {
        error_ = std::string(what) + " failed: " + std::strerror(errno);
        return false;
    }

    rdma_event_channel* channel_ = nullptr;
    rdma_cm_id* listen_ = nullptr;
    rdma_cm_id* client_ = nullptr;
    rdma_cm_id* server_ = nullptr;
    ibv_pd* client_pd_ = nullptr;
    ibv_pd* server_pd_ = nullptr;
    ibv_cq* client_cq_ = nullptr;
    ibv_cq* server_cq_ = nullptr;
    std::vector<ibv_mr*> mrs_;
    bool ok_ = false;
    std::string error_;
};

struct DevicePair {
    const char* name;
    const char* client;  ///< variables holding the addresses
    const char* server;
};

class IbVerbsFactsTest : public testing::TestWithParam<DevicePair> {
protected:
    void SetUp() override {
        client_ip_ = std::getenv(GetParam().client);
        server_ip_ = std::getenv(GetParam().server);
        if (client_ip_ == nullptr || server_ip_ == nullptr) {
            GTEST_SKIP() << "needs " << GetParam().client << " and " << GetParam().server
                         << " (set by the rdma-vm)";
        }
    }
    const char* client_ip_ = nullptr;
    const char* server_ip_ = nullptr;
};

TEST_P(IbVerbsFactsTest, ReadSinkAccessRights) {
    std::vector<std::uint8_t> source(4096), sink(3 * 4096, 0);
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::uint8_t>(i * 7 + 1);
    // The cases that succeed first: a failed read puts the QP in the error state.
    struct Case {
        const char* what;
        int sink_access;
        bool expect_ok;
    };
    const Case cases[] = {
        {"local write + remote write", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, true},
        {"local write only (no remote write: not enforced by this device)", IBV_ACCESS_LOCAL_WRITE, true},
        {"no local write", 0, false},
    };
    CmConnection conn(server_ip_, client_ip_);
    ASSERT_TRUE(conn.ok()) << conn.error();
    ibv_mr* src = conn.reg(false, source.data(), source.size(), IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(nullptr, src);
    for (std::size_t i = 0; i < std::size(cases); ++i) {
        const Case& c = cases[i];
        std::uint8_t* dst = sink.data() + i * 4096;
        ibv_mr* mr = conn.reg(true, dst, 4096, c.sink_access);
        ASSERT_NE(nullptr, mr) << c.what << ": " << std::strerror(errno);
        ibv_wc_status status = conn.read(dst, mr->lkey, 4096, source.data(), src->rkey);
        if (c.expect_ok) {
            EXPECT_EQ(IBV_WC_SUCCESS, status) << c.what << ": " << ibv_wc_status_str(status);
            EXPECT_EQ(0, std::memcmp(dst, source.data(), source.size())) << c.what;
        } else {
            EXPECT_NE(IBV_WC_SUCCESS, status)
                << c.what << ": the device let a read write into read-only memory";
        }
    }
}

const DevicePair kPairs[] = {
    {"siw", "RDMA_VM_SIW0_IP", "RDMA_VM_SIW1_IP"},
    {"rxe", "RDMA_VM_RXE0_IP", "RDMA_VM_RXE1_IP"},
};

INSTANTIATE_TEST_SUITE_P(Devices, IbVerbsFactsTest, testing::ValuesIn(kPairs),
                         [](const testing::TestParamInfo<DevicePair>& info) {
                             return std::string(info.param.name);
                         });

}  // namespace
}  // namespace loom::uct::test
