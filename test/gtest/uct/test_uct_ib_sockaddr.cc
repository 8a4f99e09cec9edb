/**
 * Client/server connections of the rc transport (kCapConnectToSockaddr): a listener on a
 * socket address, connection requests with private data, accept and reject with private
 * data of their own, and the failures a client must hear about (nobody listening, a
 * refusal, too much private data). Runs on every rc device, through rdma_cm: iWARP uses
 * it anyway, RoCE with LOOM_IB_CM=rdmacm. Server and client are two ifaces on one device.
 */
#include "uct_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace loom::uct::test {
namespace {

constexpr AmId kAmId = 5;

std::vector<Resource> rc_resources() {
    std::vector<Resource> rc;
    for (const Resource& r : all_resources()) {
        if (r.tl.tl_name == "rc") rc.push_back(r);
    }
    return rc;
}

/** Worker, md and an rdma_cm iface. */
class CmSide {
public:
    explicit CmSide(const Resource& r) {
        auto md = r.component->md_open(r.md_name);
        if (!md) throw std::runtime_error("md_open failed");
        md_ = std::move(*md);
        IfaceParams params;
        params.config_overrides = {{"IB_CM", "rdmacm"}};
        auto iface = md_->iface_open(r.tl, &worker_, params);
        if (!iface) throw std::runtime_error("iface_open failed: " + std::string(to_string(iface.status())));
        iface_ = std::move(*iface);
        if (iface_->query(attr_) != Status::ok || iface_->progress_enable() != Status::ok) {
            throw std::runtime_error("iface set-up failed");
        }
    }
    ~CmSide() {
        for (Ep* ep : eps) iface_->ep_destroy(ep);
        listener.reset();
        iface_.reset();
    }

    Iface& iface() { return *iface_; }
    Worker& worker() { return worker_; }
    const IfaceAttr& attr() const { return attr_; }

    std::unique_ptr<Listener> listener;
    std::vector<Ep*> eps;

private:
    Worker worker_;
    std::unique_ptr<Md> md_;
    std::unique_ptr<Iface> iface_;
    IfaceAttr attr_;
};

/** What the server's listener saw. */
struct Requests {
    std::vector<ConnRequest*> pending;
    std::vector<std::string> priv;
    std::string client;

    static void on_request(void* arg, ConnRequest* request, const void* data, std::size_t len,
                           const sockaddr* client) {
        auto* self = static_cast<Requests*>(arg);
        self->pending.push_back(request);
        self->priv.emplace_back(static_cast<const char*>(data), len);
        char buf[INET6_ADDRSTRLEN] = {};
        if (client != nullptr && client->sa_family == AF_INET) {
            inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(client)->sin_addr, buf, sizeof(buf));
        }
        self->client = buf;
    }
};

/** What an endpoint's on_connect reported. */
struct Outcome {
    int calls = 0;
    Status status = Status::ok;
    std::string priv;
    Ep* ep = nullptr;

    static void on_connect(void* arg, Ep* ep, Status status, const void* data, std::size_t len) {
        auto* self = static_cast<Outcome*>(arg);
        ++self->calls;
        self->status = status;
        self->ep = ep;
        self->priv.assign(static_cast<const char*>(data), data == nullptr ? 0 : len);
    }
};

class IbSockaddrTest : public testing::TestWithParam<Resource> {
protected:
    void SetUp() override {
        server_ = std::make_unique<CmSide>(GetParam());
        client_ = std::make_unique<CmSide>(GetParam());
        if (!(server_->attr().cap_flags & kCapConnectToSockaddr)) {
            GTEST_FAIL() << "an rdma_cm iface must offer client/server connections";
        }
        ListenParams lp;
        lp.on_request = Requests::on_request;
        lp.arg = &requests_;
        auto listener = server_->iface().listen(lp);
        ASSERT_TRUE(listener.ok()) << to_string(listener.status());
        server_->listener = std::move(*listener);
        address_ = server_->listener->address();
        ASSERT_NE(0, port()) << "the listener reports no port";
        for (CmSide* side : {server_.get(), client_.get()}) {
            ASSERT_EQ(Status::ok, side->iface().set_am_handler(
                                      kAmId,
                                      [](void* arg, void*, std::size_t, unsigned) {
                                          ++*static_cast<int*>(arg);
                                          return Status::ok;
                                      },
                                      side == server_.get() ? &server_got_ : &client_got_, 0));
        }
    }

    void TearDown() override {
        client_.reset();
        server_.reset();
    }

    std::uint16_t port() const {
        return ntohs(address_.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&address_)->sin6_port
                                                    : reinterpret_cast<const sockaddr_in*>(&address_)->sin_port);
    }

    void progress() {
        server_->worker().progress();
        client_->worker().progress();
    }

    template <typename Pred>
    bool wait_for(Pred done, std::chrono::seconds timeout = std::chrono::seconds(30)) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            progress();
        }
        return true;
    }

    /** Starts a client connection to @p addr with @p priv. */
    Result<Ep*> connect(const sockaddr_storage& addr, const std::string& priv, Outcome& outcome) {
        EpParams params;
        params.peer_sockaddr = reinterpret_cast<const sockaddr*>(&addr);
        params.peer_sockaddr_len = sizeof(addr);
        params.priv_data = priv.data();
        params.priv_len = priv.size();
        params.on_connect = Outcome::on_connect;
        params.on_connect_arg = &outcome;
        auto ep = client_->iface().ep_create(params);
        if (ep) client_->eps.push_back(*ep);
        return ep;
    }

    Status send(Ep* ep) {
        Status s;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while ((s = ep_am_short(ep, kAmId, 0, nullptr, 0)) == Status::no_resource &&
               std::chrono::steady_clock::now() < deadline) {
            progress();
        }
        return s;
    }

    std::unique_ptr<CmSide> server_, client_;
    Requests requests_;
    sockaddr_storage address_{};
    int server_got_ = 0, client_got_ = 0;
};

TEST_P(IbSockaddrTest, RequestAndAcceptCarryPrivateDataBothWays) {
    Outcome client_outcome, server_outcome;
    auto ep = connect(address_, "hello from the client", client_outcome);
    ASSERT_TRUE(ep.ok()) << to_string(ep.status());
    ASSERT_TRUE(wait_for([&] { return !requests_.pending.empty(); })) << "the listener never saw the request";
    EXPECT_EQ("hello from the client", requests_.priv.at(0));
    EXPECT_FALSE(requests_.client.empty());
    EXPECT_EQ(0, client_outcome.calls) << "connected before the server accepted";

    EpParams accept;
    accept.conn_request = requests_.pending.at(0);
    std::string answer = "welcome";
    accept.priv_data = answer.data();
    accept.priv_len = answer.size();
    accept.on_connect = Outcome::on_connect;
    accept.on_connect_arg = &server_outcome;
    auto server_ep = server_->iface().ep_create(accept);
    ASSERT_TRUE(server_ep.ok()) << to_string(server_ep.status());
    server_->eps.push_back(*server_ep);

    ASSERT_TRUE(wait_for([&] { return client_outcome.calls == 1 && server_outcome.calls == 1; }));
    EXPECT_EQ(Status::ok, client_outcome.status);
    EXPECT_EQ("welcome", client_outcome.priv);
    EXPECT_EQ(*ep, client_outcome.ep);
    EXPECT_EQ(Status::ok, server_outcome.status);
    EXPECT_EQ(*server_ep, server_outcome.ep);

    // The endpoints are ordinary rc endpoints: messages both ways.
    ASSERT_EQ(Status::ok, send(*ep));
    ASSERT_EQ(Status::ok, send(*server_ep));
    ASSERT_TRUE(wait_for([&] { return server_got_ == 1 && client_got_ == 1; }));
}

TEST_P(IbSockaddrTest, RejectReachesTheClientWithItsData) {
    Outcome outcome;
    auto ep = connect(address_, "may I?", outcome);
    ASSERT_TRUE(ep.ok());
    ASSERT_TRUE(wait_for([&] { return !requests_.pending.empty(); }));
    std::string no = "busy";
    ASSERT_EQ(Status::ok, server_->iface().reject(requests_.pending.at(0), no.data(), no.size()));
    ASSERT_TRUE(wait_for([&] { return outcome.calls == 1; })) << "the client never heard the refusal";
    EXPECT_EQ(Status::connection_refused, outcome.status) << to_string(outcome.status);
    // iWARP (MPA) and IB carry reject data; where a device drops it the status still says it all.
    if (!outcome.priv.empty()) {
        EXPECT_EQ("busy", outcome.priv);
    }
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_EQ(1, outcome.calls);
    // Answering the same request twice is an error, not a crash.
    EXPECT_EQ(Status::invalid_param, server_->iface().reject(requests_.pending.at(0), nullptr, 0));
}

TEST_P(IbSockaddrTest, NobodyListeningFailsTheClient) {
    sockaddr_storage closed = address_;
    std::uint16_t other = static_cast<std::uint16_t>(port() == 65535 ? 65534 : port() + 1);
    reinterpret_cast<sockaddr_in*>(&closed)->sin_port = htons(other);
    Outcome outcome;
    auto ep = connect(closed, "anyone?", outcome);
    if (!ep.ok()) {
        EXPECT_TRUE(is_error(ep.status()));
        return;
    }
    ASSERT_TRUE(wait_for([&] { return outcome.calls == 1; })) << "a client to a closed port never failed";
    EXPECT_TRUE(outcome.status == Status::connection_refused || outcome.status == Status::unreachable)
        << to_string(outcome.status);
    EXPECT_NE(Status::ok, ep_am_short(*ep, kAmId, 0, nullptr, 0));
}

TEST_P(IbSockaddrTest, DestroyingTheListenerRefusesUnansweredRequests) {
    Outcome outcome;
    auto ep = connect(address_, "", outcome);
    ASSERT_TRUE(ep.ok());
    ASSERT_TRUE(wait_for([&] { return !requests_.pending.empty(); }));
    EXPECT_EQ("", requests_.priv.at(0));
    server_->listener.reset();
    ASSERT_TRUE(wait_for([&] { return outcome.calls == 1; }));
    EXPECT_EQ(Status::connection_refused, outcome.status) << to_string(outcome.status);
}

TEST_P(IbSockaddrTest, BadParametersAreRefused) {
    Outcome outcome;
    std::string too_long(client_->attr().max_conn_priv + 1, 'x');
    EXPECT_EQ(Status::invalid_param, connect(address_, too_long, outcome).status());
    sockaddr_storage unix_addr{};
    unix_addr.ss_family = AF_UNIX;
    EXPECT_EQ(Status::invalid_address, connect(unix_addr, "", outcome).status());
    ListenParams no_callback;
    EXPECT_EQ(Status::invalid_param, server_->iface().listen(no_callback).status());
    // The port is taken by the listener already.
    ListenParams again;
    again.addr = reinterpret_cast<const sockaddr*>(&address_);
    again.addr_len = sizeof(address_);
    again.on_request = Requests::on_request;
    again.arg = &requests_;
    EXPECT_TRUE(is_error(client_->iface().listen(again).status()));
    EXPECT_EQ(0, outcome.calls);
}

INSTANTIATE_TEST_SUITE_P(Rc, IbSockaddrTest, testing::ValuesIn(rc_resources()), resource_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(IbSockaddrTest);

}  // namespace
}  // namespace loom::uct::test
