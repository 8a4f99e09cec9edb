/**
 * shm-specific tests in one process: configuration, the FIFO (capacity, wrap-around,
 * padding, garbage), addresses and keys from peers, access checks, segments in
 * /dev/shm, and a peer iface that closes. Multi-process behaviour is in
 * test_uct_shm_multiproc.cc.
 */
#include "test_uct_shm.h"

#include "common/test_helpers.h"
#include "uct/shm/shm_common.h"
#include "uct/shm/shm_fifo.h"
#include "uct/shm/shm_iface.h"
#include "uct/shm/shm_segment.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>

namespace loom::uct::shmtest {
namespace {

namespace impl = loom::uct::shm;

constexpr AmId kAmId = 3;

/** Every message the handler saw. */
struct Inbox {
    std::vector<std::vector<std::uint8_t>> messages;

    static Status handler(void* arg, void* data, std::size_t length, unsigned) {
        auto* bytes = static_cast<std::uint8_t*>(data);
        static_cast<Inbox*>(arg)->messages.emplace_back(bytes, bytes + length);
        return Status::ok;
    }
};

std::size_t pack_vector(void* dest, void* arg) {
    auto* data = static_cast<std::vector<std::uint8_t>*>(arg);
    if (!data->empty()) std::memcpy(dest, data->data(), data->size());
    return data->size();
}

/** The SegmentId inside an address() blob. */
impl::SegmentId segment_of(const ShmSide& side, const std::vector<std::uint8_t>& address) {
    impl::SegmentId seg;
    std::memcpy(&seg, address.data() + side.attr().device_addr_len + 1, sizeof(seg));
    return seg;
}

/**
 * The FIFO an address() blob names, in @p mapping of its arena (the SegmentId of the
 * address, mapped by the test as a misbehaving peer would).
 */
impl::FifoCtl* fifo_in(const impl::Mapping& mapping, const ShmSide& side,
                       const std::vector<std::uint8_t>& address) {
    std::uint64_t offset;
    std::memcpy(&offset, address.data() + side.attr().device_addr_len + 1 + sizeof(impl::SegmentId),
                sizeof(offset));
    return reinterpret_cast<impl::FifoCtl*>(static_cast<std::uint8_t*>(mapping.address()) + offset);
}

/** Writes @p seg back into an address() blob. */
void set_segment(const ShmSide& side, std::vector<std::uint8_t>& address, const impl::SegmentId& seg) {
    std::memcpy(address.data() + side.attr().device_addr_len + 1, &seg, sizeof(seg));
}

// --- Configuration --------------------------------------------------------------------------

TEST(ShmConfig, FifoTooSmallForTheLargestMessageIsRejected) {
    loom::test::LogCapture capture("error");
    EXPECT_THROW(ShmSide side({{"SHM_FIFO_SIZE", "4k"}}), std::runtime_error);
    EXPECT_EQ(1, capture.count("LOOM_SHM_FIFO_SIZE=4096"));
}

TEST(ShmConfig, MaxBcopyOutOfRangeIsRejected) {
    loom::test::LogCapture capture("error");
    EXPECT_THROW(ShmSide side({{"SHM_MAX_BCOPY", "100"}}), std::runtime_error);
    EXPECT_THROW(ShmSide side({{"SHM_MAX_BCOPY", "2m"}}), std::runtime_error);
    EXPECT_EQ(2, capture.count("LOOM_SHM_MAX_BCOPY"));
}

TEST(ShmConfig, BadValuesAreRejectedByTheTable) {
    loom::test::LogCapture capture("error");
    EXPECT_THROW(ShmSide side({{"SHM_CMA", "maybe"}}), std::runtime_error);
    EXPECT_THROW(ShmSide side({{"SHM_SEGMENT", "sysv"}}), std::runtime_error);
}

TEST(ShmConfig, LimitsFollowTheConfiguration) {
    ShmSide side({{"SHM_MAX_BCOPY", "1k"}});
    EXPECT_EQ(1024u, side.attr().am.max_bcopy);
    EXPECT_EQ(1024u, side.attr().put.max_bcopy);
    EXPECT_EQ(impl::kMaxShort, side.attr().am.max_short);
    // An 8-byte message (the am_short header alone) is one cell; the largest short is four.
    EXPECT_EQ(1u, impl::msg_cells(8));
    EXPECT_EQ(4u, impl::msg_cells(8 + impl::kMaxShort));
    EXPECT_NE(0u, side.attr().cap_flags & kCapErrHandlingPeerFailure);
    EXPECT_NE(0u, side.attr().cap_flags & kCapEventRecv);
}

TEST(ShmConfig, DefaultBcopyCarriesAn8KiBPayloadAndItsHeaders) {
    // The protocol layer's 8 KiB eager message (tag and fragment headers up to 64 bytes in
    // front) must go as one FIFO message, not as 8 KiB minus the header plus a second one.
    ShmSide side;
    EXPECT_EQ(8192u + 64u, side.attr().am.max_bcopy);
    EXPECT_EQ(side.attr().am.max_bcopy, side.attr().put.max_bcopy);
}

// --- Wake-up events ------------------------------------------------------------------------------

TEST(ShmEvents, AnArmedReceiverIsWokenByTheNextMessageOnly) {
    ShmSide receiver;
    ShmSide sender;
    Ep* ep = sender.connect_or_throw(receiver.address());
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    auto fd = receiver.iface().event_fd();
    ASSERT_TRUE(fd.ok());
    pollfd pfd{*fd, POLLIN, 0};

    // Not armed: messages are found by progress and nobody is signalled.
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 1, nullptr, 0));
    EXPECT_EQ(0, ::poll(&pfd, 1, 0));
    EXPECT_EQ(Status::busy, receiver.iface().event_arm()) << "a message waits: sleeping would lose it";
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 1; }));

    ASSERT_EQ(Status::ok, receiver.iface().event_arm());
    EXPECT_EQ(0, ::poll(&pfd, 1, 0)) << "armed with nothing pending: the fd must not be readable";
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 2, nullptr, 0));
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 3, nullptr, 0));
    EXPECT_EQ(1, ::poll(&pfd, 1, 5000)) << "a message arrived while armed: the fd must wake the receiver";
    EXPECT_EQ(Status::busy, receiver.iface().event_arm());
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 3; }));
    EXPECT_EQ(Status::ok, receiver.iface().event_arm()) << "the wake-up was drained by the arm before";
    EXPECT_EQ(0, ::poll(&pfd, 1, 0));
}

// --- The FIFO ------------------------------------------------------------------------------------

TEST(ShmFifo, CapacityIsThePowerOfTwoOfCellsAbove) {
    // 300k rounds up to 8192 cells (512 KiB): exactly 8192 one-cell messages fit, the next does not.
    ShmSide receiver({{"SHM_FIFO_SIZE", "300k"}});
    ShmSide sender;
    Ep* ep = sender.connect_or_throw(receiver.address());
    int sent = 0;
    while (ep_am_short(ep, kAmId, sent, nullptr, 0) == Status::ok) ++sent;
    EXPECT_EQ(8192, sent);
    EXPECT_EQ(Status::no_resource, ep_am_short(ep, kAmId, 0, nullptr, 0));
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 8192u; }));
    EXPECT_EQ(Status::ok, ep_am_short(ep, kAmId, 0, nullptr, 0));  // room again
}

/** Resident shared-memory pages mapped by this process (RssShmem), in bytes. */
std::size_t rss_shmem() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("RssShmem:", 0) == 0) return std::stoul(line.substr(9)) * 1024;
    }
    return 0;
}

TEST(ShmFifo, AttachingToAPeerDoesNotMapItsWholeRing) {
    // Every endpoint maps its peer's ring; mapping it populated cost each endpoint the ring's
    // size in page-table-backed resident memory (and tens of microseconds), however little
    // it sent, and a first touch by a read made the kernel map 64 KiB around it. Only the
    // pages touched are mapped now, the first of them by a write.
    ShmSide receiver({{"SHM_FIFO_SIZE", "16m"}});
    ShmSide sender;
    std::size_t before = rss_shmem();
    Ep* ep = sender.connect_or_throw(receiver.address());
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 1, nullptr, 0));
    std::size_t grown = rss_shmem() - before;
    EXPECT_LT(grown, 32u << 10) << "bytes of the peer's 16 MiB ring mapped by one message";
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 1u; }));
}

TEST(ShmFifo, IfacesOfOneProcessShareTheirMappingOfAPeer) {
    // A process with many workers maps a peer's segment once: each iface attaching it on
    // its own cost an open, readlink, fstat and mmap per worker (epmem, the scale test).
    ShmSide receiver;
    ShmSide a;
    ShmSide b;
    Ep* ea = a.connect_or_throw(receiver.address());
    Ep* eb = b.connect_or_throw(receiver.address());
    const auto* fifo_a = static_cast<impl::ShmEp*>(ea)->fifo;
    EXPECT_EQ(fifo_a, static_cast<impl::ShmEp*>(eb)->fifo) << "one mapping of the receiver's FIFO";
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    ASSERT_EQ(Status::ok, ep_am_short(ea, kAmId, 1, nullptr, 0));
    ASSERT_EQ(Status::ok, ep_am_short(eb, kAmId, 2, nullptr, 0));
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 2u; }));
    // The mapping lives while one iface uses it: a's endpoint going leaves b's working.
    a.destroy(ea);
    ASSERT_EQ(Status::ok, ep_am_short(eb, kAmId, 3, nullptr, 0));
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 3u; }));
    // And a new endpoint of a finds the same mapping again.
    Ep* again = a.connect_or_throw(receiver.address());
    EXPECT_EQ(fifo_a, static_cast<impl::ShmEp*>(again)->fifo);
}

TEST(ShmFifo, WrapAroundKeepsOrderAndDataForEveryFlavour) {
    // A 32-cell ring: messages of up to 7 cells wrap (with padding) every few sends.
    const ucs::config::Overrides small = {{"SHM_FIFO_SIZE", "2k"}, {"SHM_MAX_BCOPY", "256"}};
    ShmSide receiver(small);
    ShmSide sender(small);
    Ep* ep = sender.connect_or_throw(receiver.address());
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    std::mt19937 rng(7);
    std::vector<std::vector<std::uint8_t>> expected;
    constexpr int kMessages = 3000;
    for (int i = 0; i < kMessages; ++i) {
        const int kind = static_cast<int>(rng() % 3);
        Status status;
        if (kind == 0) {
            auto payload = pattern(rng() % (impl::kMaxShort + 1), i);
            const std::uint64_t header = 0xabc000ull + i;
            while ((status = ep_am_short(ep, kAmId, header, payload.data(),
                                         static_cast<unsigned>(payload.size()))) == Status::no_resource) {
                receiver.progress();
            }
            std::vector<std::uint8_t> whole(sizeof(header));
            std::memcpy(whole.data(), &header, sizeof(header));
            whole.insert(whole.end(), payload.begin(), payload.end());
            expected.push_back(std::move(whole));
        } else if (kind == 1) {
            auto payload = pattern(rng() % 257, i);
            ssize_t packed;
            while ((packed = ep_am_bcopy(ep, kAmId, pack_vector, &payload, 0)) ==
                   static_cast<ssize_t>(Status::no_resource)) {
                receiver.progress();
            }
            ASSERT_EQ(static_cast<ssize_t>(payload.size()), packed);
            status = Status::ok;
            expected.push_back(std::move(payload));
        } else {
            auto header = pattern(rng() % (impl::kMaxZcopyHeader + 1), i);
            auto data = pattern(rng() % 257, i + 1);
            std::size_t half = data.size() / 2;
            Iov iov[2] = {{data.data(), half, kMemHNull},
                          {data.data() + half, data.size() - half, kMemHNull}};
            TestCompletion comp;
            while ((status = ep_am_zcopy(ep, kAmId, header.data(), static_cast<unsigned>(header.size()), iov,
                                         2, 0, &comp)) == Status::no_resource) {
                receiver.progress();
            }
            header.insert(header.end(), data.begin(), data.end());
            expected.push_back(std::move(header));
        }
        ASSERT_EQ(Status::ok, status) << "message " << i;
    }
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == expected.size(); }));
    for (int i = 0; i < kMessages; ++i) ASSERT_EQ(expected[i], inbox.messages[i]) << "message " << i;
}

/** A bcopy whose pack callback makes another endpoint send first. */
struct NestedSend {
    Ep* other;
    std::vector<std::uint8_t> data;
    Status nested_status = Status::no_message;

    static std::size_t pack(void* dest, void* arg) {
        auto* self = static_cast<NestedSend*>(arg);
        self->nested_status = ep_am_short(self->other, kAmId, 0x1234, nullptr, 0);
        std::memcpy(dest, self->data.data(), self->data.size());
        return self->data.size();
    }
};

TEST(ShmFifo, UnusedBcopyCellsBecomePaddingWhenSomeoneReservedBehind) {
    ShmSide receiver;
    ShmSide sender;
    Ep* first = sender.connect_or_throw(receiver.address());
    Ep* second = sender.connect_or_throw(receiver.address());
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    for (int round = 0; round < 3; ++round) {
        NestedSend nested{second, pattern(10 + round, round)};
        ASSERT_EQ(static_cast<ssize_t>(nested.data.size()),
                  ep_am_bcopy(first, kAmId, NestedSend::pack, &nested, 0));
        ASSERT_EQ(Status::ok, nested.nested_status);
        ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 2u * (round + 1); }));
        // The bcopy reserved first, so it arrives first; the padding behind it is skipped.
        EXPECT_EQ(nested.data, inbox.messages[2 * round]);
        ASSERT_EQ(8u, inbox.messages[2 * round + 1].size());
        std::uint64_t header;
        std::memcpy(&header, inbox.messages[2 * round + 1].data(), sizeof(header));
        EXPECT_EQ(0x1234u, header);
    }
}

TEST(ShmFifo, ShortCopiesMoveExactlyTheirBytesAtAnyAlignment) {
    // copy_short's word moves overlap: every length from 0 to past its 32-byte limit, at every
    // alignment of source and destination, writes its bytes and nothing around them.
    std::vector<std::uint8_t> src(512), dst(512);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 1);
    for (std::size_t length = 0; length <= 300; ++length) {
        for (std::size_t s_off = 0; s_off < 8; ++s_off) {
            for (std::size_t d_off = 0; d_off < 8; ++d_off) {
                std::fill(dst.begin(), dst.end(), 0xee);
                impl::copy_short(dst.data() + 64 + d_off, src.data() + s_off, length);
                for (std::size_t i = 0; i < dst.size(); ++i) {
                    const bool inside = i >= 64 + d_off && i < 64 + d_off + length;
                    const std::uint8_t expected = inside ? src[s_off + i - 64 - d_off] : 0xee;
                    ASSERT_EQ(expected, dst[i]) << "length " << length << ", offsets " << s_off << "/" << d_off
                                                << ", byte " << i;
                }
            }
        }
    }
}

/** A pending request that sends one am_short with its sequence number when called. */
struct ShortRequest : PendingReq {
    Ep* ep = nullptr;
    std::uint64_t seq = 0;
    std::vector<std::uint64_t>* ran = nullptr;

    static Status call(PendingReq* base) {
        auto* self = static_cast<ShortRequest*>(base);
        Status status = ep_am_short(self->ep, kAmId, self->seq, nullptr, 0);
        if (status == Status::ok) self->ran->push_back(self->seq);
        return status;
    }
};

/** A sender whose endpoint filled a 64 KiB receiver's ring with 8-byte messages. */
struct FullRing {
    ShmSide receiver{{"SHM_FIFO_SIZE", "64k"}};
    ShmSide sender;
    Ep* ep = sender.connect_or_throw(receiver.address());
    Inbox inbox;
    std::size_t filled = 0;

    FullRing() {
        if (receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0) != Status::ok) {
            throw std::runtime_error("set_am_handler failed");
        }
        while (ep_am_short(ep, kAmId, 0, nullptr, 0) == Status::ok) ++filled;
    }
};

TEST(ShmFifo, OneProgressCallRunsABurstOfPendingRequests) {
    // Queued sends are a burst once the receiver drains: sending one per progress call would
    // hold a sender's message rate to its progress rate. Order stays FIFO.
    FullRing ring;
    ShmSide& receiver = ring.receiver;
    ShmSide& sender = ring.sender;
    Ep* ep = ring.ep;
    Inbox& inbox = ring.inbox;
    const std::size_t filled = ring.filled;
    constexpr std::size_t kQueued = 10;
    std::vector<std::uint64_t> ran;
    std::vector<ShortRequest> requests(kQueued);
    for (std::size_t i = 0; i < kQueued; ++i) {
        requests[i].func = ShortRequest::call;
        requests[i].ep = ep;
        requests[i].seq = 1000 + i;
        requests[i].ran = &ran;
        ASSERT_EQ(Status::ok, ep_pending_add(ep, &requests[i], 0));
    }
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == filled; }));
    EXPECT_TRUE(ran.empty());
    (void)sender.progress();  // once
    ASSERT_EQ(kQueued, ran.size()) << "one progress call ran " << ran.size() << " queued requests";
    for (std::size_t i = 0; i < kQueued; ++i) EXPECT_EQ(1000 + i, ran[i]);
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == filled + kQueued; }));
    std::uint64_t header;
    std::memcpy(&header, inbox.messages.back().data(), sizeof(header));
    EXPECT_EQ(1000 + kQueued - 1, header);
}

/** A queued request that, when it runs, queues another one on its endpoint (as ucp does). */
struct QueuingRequest : PendingReq {
    Ep* ep = nullptr;
    PendingReq* next = nullptr;
    Status added = Status::no_resource;

    static Status call(PendingReq* base) {
        auto* self = static_cast<QueuingRequest*>(base);
        self->added = ep_pending_add(self->ep, self->next, 0);
        return Status::ok;
    }
};

TEST(ShmFifo, ARequestMayQueueAnotherFromThePendingDispatch) {
    // The dispatch holds the endpoint out of the pending list while a request runs; a
    // request that queues another on the same endpoint put it back into that list, and
    // the dispatch then linked it a second time.
    FullRing ring;
    ShmSide& receiver = ring.receiver;
    ShmSide& sender = ring.sender;
    Ep* ep = ring.ep;
    Inbox& inbox = ring.inbox;
    const std::size_t filled = ring.filled;
    std::vector<std::uint64_t> ran;
    ShortRequest behind, added;
    for (auto [req, seq] : {std::pair{&behind, 1u}, {&added, 2u}}) {
        req->func = ShortRequest::call;
        req->ep = ep;
        req->seq = seq;
        req->ran = &ran;
    }
    QueuingRequest first;
    first.func = QueuingRequest::call;
    first.ep = ep;
    first.next = &added;
    ASSERT_EQ(Status::ok, ep_pending_add(ep, &first, 0));
    ASSERT_EQ(Status::ok, ep_pending_add(ep, &behind, 0));  // so the added one must queue
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == filled; }));
    ASSERT_TRUE(sender.progress_until([&] { return ran.size() == 2; }));
    EXPECT_EQ(Status::ok, first.added);
    EXPECT_EQ((std::vector<std::uint64_t>{1, 2}), ran);
    for (int i = 0; i < 100; ++i) (void)sender.progress();  // the list stays sound
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == filled + 2; }));
}

TEST(ShmFifo, MalformedMessagesAreDroppedWithOneLogLine) {
    ShmSide receiver;
    ShmSide sender;
    Ep* ep = sender.connect_or_throw(receiver.address());
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    // Write garbage into the receiver's FIFO the way a broken peer would: reserve, write, publish.
    std::string reason;
    auto mapping = impl::Mapping::attach(segment_of(receiver, receiver.address()), &reason);
    ASSERT_TRUE(mapping.ok()) << reason;
    auto* fifo = fifo_in(*mapping, receiver, receiver.address());
    std::uint64_t cached_tail = 0;
    auto write_garbage = [&](std::uint16_t cells, std::uint8_t type, std::uint32_t length) {
        std::uint64_t pos;
        ASSERT_TRUE(impl::fifo_reserve(fifo, &cached_tail, 1, &pos));
        impl::Cell* cell = fifo->cells() + (pos & fifo->mask);
        cell->hdr.cells = cells;
        cell->hdr.type = static_cast<impl::MsgType>(type);
        cell->hdr.length = length;
        cell->hdr.am_id = kAmId;
        impl::publish(cell, pos, fifo->salt);
    };
    loom::test::LogCapture capture("error");
    write_garbage(0, 1, 0);     // no cells
    write_garbage(1, 1, 1000);  // longer than its cells
    write_garbage(1, 99, 0);    // unknown type
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 77, nullptr, 0));
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 1; }));
    std::uint64_t header;
    std::memcpy(&header, inbox.messages[0].data(), sizeof(header));
    EXPECT_EQ(77u, header);
    EXPECT_EQ(1, capture.count("malformed message"));
}

/** Reserves @p cells cells of @p fifo the way a producer does, and publishes nothing. */
std::uint64_t reserve_without_publishing(impl::FifoCtl* fifo, std::uint64_t cells) {
    std::uint64_t cached_tail = 0, pos = 0;
    if (!impl::fifo_reserve(fifo, &cached_tail, cells, &pos)) throw std::runtime_error("the ring is full");
    return pos;
}

/**
 * A peer killed between reserving cells of our ring and publishing its message would stop
 * the ring for good: every later message, of live peers too, waits behind it (seen once in
 * the soak: a process killed mid-send stalled the survivor's shm traffic with its next
 * incarnation). Once the peer is found dead and the ring waited DEAD_PRODUCER_TIMEOUT,
 * progress skips to the next published message.
 */
TEST(ShmFifo, AReservationOfAPeerThatDiedIsSkipped) {
    ShmSide receiver({{"SHM_PEER_CHECK_INTERVAL", "1ms"}, {"SHM_DEAD_PRODUCER_TIMEOUT", "20ms"}});
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    int to_parent[2], to_child[2];
    ASSERT_EQ(0, ::pipe(to_parent));
    ASSERT_EQ(0, ::pipe(to_child));
    const std::vector<std::uint8_t> ring_address = receiver.address();
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // a peer with an iface of its own (so the receiver watches it), killed mid-send
        ShmSide peer;
        const std::vector<std::uint8_t> address = peer.address();
        const auto size = static_cast<std::uint32_t>(address.size());
        std::string reason;
        auto ring = impl::Mapping::attach(segment_of(receiver, ring_address), &reason);
        char go = 0;
        const bool ok = ::write(to_parent[1], &size, sizeof(size)) == sizeof(size) &&
                        ::write(to_parent[1], address.data(), size) == static_cast<ssize_t>(size) &&
                        ring.ok() &&
                        (reserve_without_publishing(fifo_in(*ring, receiver, ring_address), 3),
                         ::write(to_parent[1], "r", 1) == 1) &&
                        ::read(to_child[0], &go, 1) == 1;
        ::_exit(ok ? 0 : 1);
    }
    std::uint32_t size = 0;
    ASSERT_EQ(static_cast<ssize_t>(sizeof(size)), ::read(to_parent[0], &size, sizeof(size)));
    std::vector<std::uint8_t> peer_address(size);
    ASSERT_EQ(static_cast<ssize_t>(size), ::read(to_parent[0], peer_address.data(), size));
    receiver.connect_or_throw(peer_address);  // the receiver knows the peer: it notices its death
    char reserved = 0;
    ASSERT_EQ(1, ::read(to_parent[0], &reserved, 1));
    ASSERT_EQ(1, ::write(to_child[1], "g", 1));
    int status = 0;
    ASSERT_EQ(child, ::waitpid(child, &status, 0));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the peer could not set up";
    for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);

    ShmSide sender;  // a live peer whose message lands behind the dead run
    Ep* ep = sender.connect_or_throw(receiver.address());
    loom::test::LogCapture capture("error");
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 42, nullptr, 0));
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 1; }, std::chrono::seconds(30)))
        << "the ring still waits on the dead peer's reservation";
    std::uint64_t header;
    std::memcpy(&header, inbox.messages[0].data(), sizeof(header));
    EXPECT_EQ(42u, header);
    EXPECT_EQ(1, capture.count("never published"));
    // The ring goes on as before.
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 43, nullptr, 0));
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 2; }));
}

/** A reservation of a live producer is never skipped, however long it takes to publish. */
TEST(ShmFifo, AReservationOfALiveProducerIsWaitedFor) {
    ShmSide receiver({{"SHM_PEER_CHECK_INTERVAL", "1ms"}, {"SHM_DEAD_PRODUCER_TIMEOUT", "1ms"}});
    ShmSide sender;
    Ep* ep = sender.connect_or_throw(receiver.address());
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    receiver.connect_or_throw(sender.address());  // a peer to check, alive throughout
    std::string reason;
    auto ring = impl::Mapping::attach(segment_of(receiver, receiver.address()), &reason);
    ASSERT_TRUE(ring.ok()) << reason;
    const std::uint64_t pos = reserve_without_publishing(fifo_in(*ring, receiver, receiver.address()), 1);
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 2, nullptr, 0));
    // Many peer checks and timeouts pass; no peer died, so nothing may be skipped.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (std::chrono::steady_clock::now() < until) receiver.progress();
    EXPECT_TRUE(inbox.messages.empty()) << "a live producer's reservation was skipped";
    auto* fifo = fifo_in(*ring, receiver, receiver.address());
    impl::Cell* cell = fifo->cells() + (pos & fifo->mask);
    const std::uint64_t first = 1;
    std::memcpy(cell->payload(), &first, sizeof(first));
    cell->hdr.cells = 1;
    cell->hdr.type = impl::MsgType::am;
    cell->hdr.length = sizeof(first);
    cell->hdr.am_id = kAmId;
    impl::publish(cell, pos, fifo->salt);
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 2; }));
    std::uint64_t a, b;
    std::memcpy(&a, inbox.messages[0].data(), sizeof(a));
    std::memcpy(&b, inbox.messages[1].data(), sizeof(b));
    EXPECT_EQ(1u, a);
    EXPECT_EQ(2u, b);
}

// --- Addresses from peers --------------------------------------------------------------------------

TEST(ShmAddress, CookieMismatchIsUnreachable) {
    ShmSide receiver;
    ShmSide sender;
    auto address = receiver.address();
    auto seg = segment_of(receiver, address);
    seg.cookie ^= 1;  // a reused pid or fd would name another segment
    set_segment(receiver, address, seg);
    loom::test::LogCapture capture("error");
    auto ep = sender.connect(address);
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(Status::unreachable, ep.status());
    EXPECT_EQ(1, capture.count("cookie mismatch"));
}

TEST(ShmAddress, ProcessThatDoesNotExistIsUnreachable) {
    ShmSide receiver;
    ShmSide sender;
    auto address = receiver.address();
    auto seg = segment_of(receiver, address);
    seg.pid = 0x3ffffff0;  // above any pid_max
    set_segment(receiver, address, seg);
    std::string reason;
    EXPECT_FALSE(reachable(sender, address, &reason));
    EXPECT_NE(std::string::npos, reason.find("no process")) << reason;
    loom::test::LogCapture capture("error");
    auto ep = sender.connect(address);
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(Status::unreachable, ep.status());
    EXPECT_EQ(1, capture.count("ep_create"));
}

TEST(ShmAddress, AnotherHostIsUnreachable) {
    ShmSide receiver;
    ShmSide sender;
    auto address = receiver.address();
    address[1] ^= 0x5a;  // the host id follows the version byte
    std::string reason;
    EXPECT_FALSE(reachable(sender, address, &reason));
    EXPECT_NE(std::string::npos, reason.find("another host")) << reason;
    loom::test::LogCapture capture("error");
    EXPECT_EQ(Status::unreachable, sender.connect(address).status());
}

TEST(ShmAddress, ImplausibleSegmentIsInvalid) {
    ShmSide receiver;
    ShmSide sender;
    auto address = receiver.address();
    auto seg = segment_of(receiver, address);
    seg.kind = 9;
    set_segment(receiver, address, seg);
    loom::test::LogCapture capture("error");
    EXPECT_EQ(Status::invalid_address, sender.connect(address).status());
    seg.kind = static_cast<std::uint8_t>(impl::SegmentKind::memfd);
    seg.size = 100;  // smaller than a FIFO can be
    set_segment(receiver, address, seg);
    EXPECT_EQ(Status::invalid_address, sender.connect(address).status());
}

TEST(ShmAddress, ClosedIfaceIsUnreachable) {
    ShmSide sender;
    std::vector<std::uint8_t> address;
    {
        ShmSide gone;
        address = gone.address();
    }
    loom::test::LogCapture capture("error");
    EXPECT_EQ(Status::unreachable, sender.connect(address).status());
}

TEST(ShmAddress, PeerWithTooSmallAFifoIsUnreachable) {
    ShmSide receiver({{"SHM_FIFO_SIZE", "2k"}, {"SHM_MAX_BCOPY", "256"}});
    ShmSide sender(
        {{"SHM_MAX_BCOPY", "64k"}, {"SHM_FIFO_SIZE", "1m"}});  // its largest message does not fit there
    loom::test::LogCapture capture("error");
    EXPECT_EQ(Status::unreachable, sender.connect(receiver.address()).status());
    EXPECT_EQ(1, capture.count("cannot hold our largest messages"));
}

// --- Remote keys and access checks ------------------------------------------------------------------

class ShmRkeyTest : public testing::Test {
protected:
    void SetUp() override {
        receiver_ = std::make_unique<ShmSide>();
        sender_ = std::make_unique<ShmSide>();
        ep_ = sender_->connect_or_throw(receiver_->address());
    }

    Rkey unpack(const std::vector<std::uint8_t>& packed) {
        auto rkey = shm_component().rkey_unpack(packed.data(), packed.size());
        EXPECT_TRUE(rkey.ok()) << to_string(rkey.status());
        return rkey.value_or(Rkey{});
    }

    std::unique_ptr<ShmSide> receiver_;
    std::unique_ptr<ShmSide> sender_;
    Ep* ep_ = nullptr;
};

TEST_F(ShmRkeyTest, AccessesOutsideTheRegionOrRightsAreDenied) {
    std::vector<std::uint8_t> buffer(4096, 0);
    Rkey rkey = unpack(receiver_->register_and_pack(buffer.data(), buffer.size(), kAccessRemoteGet));
    const auto base = reinterpret_cast<std::uint64_t>(buffer.data());
    std::uint8_t data[16] = {1, 2, 3};
    std::uint64_t word = 0;
    loom::test::LogCapture capture("error");
    // No put right.
    EXPECT_EQ(Status::access_denied, ep_put_short(ep_, data, 8, base, rkey.rkey));
    // Gets: inside is fine; across the end, before the start or wrapping around are not.
    std::vector<std::uint8_t> local(16);
    Iov iov{local.data(), 16, kMemHNull};
    TestCompletion comp;
    EXPECT_EQ(Status::ok, ep_get_zcopy(ep_, &iov, 1, base + 4080, rkey.rkey, &comp));
    EXPECT_EQ(Status::access_denied, ep_get_zcopy(ep_, &iov, 1, base + 4081, rkey.rkey, &comp));
    EXPECT_EQ(Status::access_denied, ep_get_zcopy(ep_, &iov, 1, base - 8, rkey.rkey, &comp));
    Iov huge{local.data(), SIZE_MAX - 8, kMemHNull};
    EXPECT_EQ(Status::access_denied, ep_get_zcopy(ep_, &huge, 1, base + 16, rkey.rkey, &comp));
    // No atomic right.
    EXPECT_EQ(Status::access_denied, ep_atomic64_fetch(ep_, AtomicOp::add, 1, &word, base, rkey.rkey, &comp));
    EXPECT_EQ(0, comp.fired);
    EXPECT_EQ(5, capture.count("outside the remote key's region"));
    shm_component().rkey_release(rkey);
}

TEST_F(ShmRkeyTest, MalformedKeysAreRejected) {
    std::vector<std::uint8_t> buffer(64);
    auto packed = receiver_->register_and_pack(buffer.data(), buffer.size(), kAccessAll);
    loom::test::LogCapture capture("error");
    auto bad = packed;
    bad[0] ^= 0xff;  // version
    EXPECT_EQ(Status::invalid_param, shm_component().rkey_unpack(bad.data(), bad.size()).status());
    bad = packed;
    bad[1] = 9;  // kind
    EXPECT_EQ(Status::invalid_param, shm_component().rkey_unpack(bad.data(), bad.size()).status());
    bad = packed;
    bad[2] = 0xff;  // access bits beyond kAccessAll
    EXPECT_EQ(Status::invalid_param, shm_component().rkey_unpack(bad.data(), bad.size()).status());
    bad = packed;
    std::memset(bad.data() + 24, 0xff, 8);  // length: the region wraps around the address space
    EXPECT_EQ(Status::invalid_param, shm_component().rkey_unpack(bad.data(), bad.size()).status());
    EXPECT_EQ(Status::invalid_param, shm_component().rkey_unpack(nullptr, 0).status());
    EXPECT_EQ(5, capture.count("rkey_unpack"));
}

TEST_F(ShmRkeyTest, HandlesAreChecked) {
    Md& md = receiver_->md();
    std::vector<std::uint8_t> buffer(64);
    auto reg = md.mem_reg(buffer.data(), buffer.size(), kAccessAll);
    ASSERT_TRUE(reg.ok());
    auto alloc = md.mem_alloc(100, kAccessAll);
    ASSERT_TRUE(alloc.ok());
    loom::test::LogCapture capture("error");
    EXPECT_EQ(Status::invalid_param, md.mem_free(*reg));            // not an allocation
    EXPECT_EQ(Status::invalid_param, md.mem_dereg(alloc->second));  // not a registration
    EXPECT_EQ(Status::invalid_param, md.mem_dereg(nullptr));
    EXPECT_EQ(Status::invalid_param, sender_->md().mem_dereg(*reg));  // another md's handle
    EXPECT_EQ(Status::ok, md.mem_dereg(*reg));
    EXPECT_EQ(Status::invalid_param, md.mem_dereg(*reg));  // twice
    std::vector<std::uint8_t> packed(receiver_->md_attr().rkey_packed_size);
    EXPECT_EQ(Status::invalid_param, md.mkey_pack(*reg, packed.data()));
    EXPECT_EQ(Status::ok, md.mem_free(alloc->second));
    EXPECT_EQ(Status::invalid_param, md.mem_reg(nullptr, 10, kAccessAll).status());
    EXPECT_EQ(Status::invalid_param, md.mem_alloc(0, kAccessAll).status());
}

TEST_F(ShmRkeyTest, MemAllocMemoryWorksForEveryOperation) {
    auto alloc = receiver_->md().mem_alloc(8192, kAccessAll);
    ASSERT_TRUE(alloc.ok());
    auto* memory = static_cast<std::uint8_t*>(alloc->first);
    EXPECT_EQ(0u, reinterpret_cast<std::uintptr_t>(memory) % 4096);
    Rkey rkey = unpack(receiver_->pack(alloc->second));
    const auto base = reinterpret_cast<std::uint64_t>(memory);
    auto data = pattern(3000, 1);
    Iov iov{data.data(), data.size(), kMemHNull};
    TestCompletion comp;
    ASSERT_EQ(Status::ok, ep_put_zcopy(ep_, &iov, 1, base + 100, rkey.rkey, &comp));
    EXPECT_EQ(0, std::memcmp(memory + 100, data.data(), data.size()));
    std::vector<std::uint8_t> back(3000);
    Iov out{back.data(), back.size(), kMemHNull};
    ASSERT_EQ(Status::ok, ep_get_zcopy(ep_, &out, 1, base + 100, rkey.rkey, &comp));
    EXPECT_EQ(data, back);
    std::uint64_t old = 0;
    ASSERT_EQ(Status::ok, ep_atomic64_fetch(ep_, AtomicOp::add, 5, &old, base + 8000, rkey.rkey, &comp));
    std::uint32_t old32 = 0;
    ASSERT_EQ(Status::ok, ep_atomic32_cswap(ep_, 0, 9, base + 8016, rkey.rkey, &old32, &comp));
    EXPECT_EQ(5u, *reinterpret_cast<std::uint64_t*>(memory + 8000));
    EXPECT_EQ(9u, *reinterpret_cast<std::uint32_t*>(memory + 8016));
    // The region ends at the length asked for, not at the page.
    loom::test::LogCapture capture("error");
    EXPECT_EQ(Status::access_denied, ep_put_short(ep_, data.data(), 8, base + 8190, rkey.rkey));
    EXPECT_EQ(1, capture.count("outside the remote key's region"));
    shm_component().rkey_release(rkey);
    EXPECT_EQ(Status::ok, receiver_->md().mem_free(alloc->second));
}

// --- Segments in /dev/shm ---------------------------------------------------------------------------

TEST(ShmSegments, MemfdSegmentsNeverAppearInDevShm) {
    auto before = loom_shm_names();
    {
        loom::test::ScopedEnv env("LOOM_SHM_SEGMENT", "memfd");
        ShmSide a;
        ShmSide b;
        auto alloc = a.md().mem_alloc(4096, kAccessAll);
        ASSERT_TRUE(alloc.ok());
        EXPECT_EQ(before, loom_shm_names());
        EXPECT_EQ(Status::ok, a.md().mem_free(alloc->second));
    }
    EXPECT_EQ(before, loom_shm_names());
}

TEST(ShmSegments, PosixNamesLiveWhileTheirOwnerUsesThem) {
    auto before = loom_shm_names();
    loom::test::ScopedEnv env("LOOM_SHM_SEGMENT", "posix");  // the md's mem_alloc reads the environment
    auto posix = std::make_unique<ShmSide>();
    ShmSide memfd({{"SHM_SEGMENT", "memfd"}});
    auto during = loom_shm_names();
    ASSERT_EQ(before.size() + 1, during.size()) << "the FIFO of the posix iface has a name";
    auto alloc = posix->md().mem_alloc(4096, kAccessAll);
    ASSERT_TRUE(alloc.ok());
    EXPECT_EQ(before.size() + 2, loom_shm_names().size());
    // Names are mode 0600 and follow /loom-<uid>-<pid>-<start>-<cookie>.
    const impl::ProcessIdentity self = impl::this_process();
    for (const std::string& name : loom_shm_names()) {
        if (std::find(before.begin(), before.end(), name) != before.end()) continue;
        const std::string prefix = "loom-" + std::to_string(::geteuid()) + "-" + std::to_string(self.pid) +
                                   "-" + std::to_string(self.start_time) + "-";
        EXPECT_EQ(0u, name.rfind(prefix, 0)) << name;
        struct stat st;
        ASSERT_EQ(0, ::stat(("/dev/shm/" + name).c_str(), &st));
        EXPECT_EQ(0600u, st.st_mode & 0777) << name;
    }
    // Both kinds talk to each other.
    Inbox inbox_posix, inbox_memfd;
    ASSERT_EQ(Status::ok, posix->iface().set_am_handler(kAmId, Inbox::handler, &inbox_posix, 0));
    ASSERT_EQ(Status::ok, memfd.iface().set_am_handler(kAmId, Inbox::handler, &inbox_memfd, 0));
    Ep* to_memfd = posix->connect_or_throw(memfd.address());
    Ep* to_posix = memfd.connect_or_throw(posix->address());
    ASSERT_EQ(Status::ok, ep_am_short(to_memfd, kAmId, 1, nullptr, 0));
    ASSERT_EQ(Status::ok, ep_am_short(to_posix, kAmId, 2, nullptr, 0));
    ASSERT_TRUE(memfd.progress_until([&] { return inbox_memfd.messages.size() == 1; }));
    ASSERT_TRUE(posix->progress_until([&] { return inbox_posix.messages.size() == 1; }));
    EXPECT_EQ(Status::ok, posix->md().mem_free(alloc->second));
    EXPECT_EQ(during, loom_shm_names()) << "mem_free removes the allocation's name";
    memfd.destroy(to_posix);
    posix.reset();
    EXPECT_EQ(before, loom_shm_names()) << "closing the iface removes the FIFO's name";
}

/** Bytes of memory the file behind our descriptor @p fd holds (its allocated blocks). */
std::size_t allocated_bytes(std::uint32_t fd) {
    struct stat st;
    if (::fstat(static_cast<int>(fd), &st) != 0) return 0;
    return static_cast<std::size_t>(st.st_blocks) * 512;
}

TEST(ShmSegments, IfacesOfAProcessShareOneArenaAndGiveTheirPagesBack) {
    // Every iface's FIFO is a slot of the process's arena: one segment for peers to map.
    loom::test::ScopedEnv env("LOOM_SHM_SEGMENT", "memfd");
    ShmSide first;
    const impl::SegmentId arena = segment_of(first, first.address());
    const std::size_t with_one = allocated_bytes(arena.fd);
    ASSERT_GT(with_one, 0u);
    int in_first = 0;
    for (int i = 0; i < 20; ++i) {
        ShmSide side;
        const impl::SegmentId seg = segment_of(side, side.address());
        // (A full arena, after a thousand ifaces in this process, makes the next one elsewhere.)
        if (seg.cookie != arena.cookie) continue;
        ++in_first;
        ASSERT_GT(allocated_bytes(arena.fd), with_one);
    }
    EXPECT_GE(in_first, 19) << "ifaces made segments of their own";
    // Twenty FIFOs came and went: each left its first page (the header peers may still read).
    EXPECT_LE(allocated_bytes(arena.fd), with_one + 20 * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)))
        << "closed ifaces kept their FIFOs' pages";
    // And a peer reaches a new iface through the arena as before.
    ShmSide receiver;
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    Ep* ep = first.connect_or_throw(receiver.address());
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 5, nullptr, 0));
    ASSERT_TRUE(receiver.progress_until([&] { return inbox.messages.size() == 1u; }));
}

/**
 * Runs @p check in a forked child and returns its verdict: true when it said yes (an
 * exception there is a no). The child ends with _exit: nothing of the test runs twice.
 */
bool in_forked_child(const std::function<bool()>& check) {
    int fds[2];
    if (::pipe(fds) != 0) return false;
    const pid_t child = ::fork();
    if (child < 0) return false;
    if (child == 0) {
        char verdict = 'n';
        try {
            if (check()) verdict = 'y';
        } catch (...) {
        }
        (void)!::write(fds[1], &verdict, 1);
        ::_exit(0);
    }
    ::close(fds[1]);
    char verdict = 0;
    const bool read_one = ::read(fds[0], &verdict, 1) == 1;
    ::close(fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    return read_one && verdict == 'y';
}

TEST(ShmSegments, AForkedChildTakesItsFifosFromAnArenaOfItsOwn) {
    // The child inherits the parent's arena mapped, and its bookkeeping: handing out a
    // slot of it would give two processes' ifaces one FIFO.
    ShmSide parent_side;
    const impl::SegmentId parent_arena = segment_of(parent_side, parent_side.address());
    EXPECT_TRUE(in_forked_child([&] {
        ShmSide side;
        const impl::SegmentId mine = segment_of(side, side.address());
        Inbox inbox;
        if (mine.pid != static_cast<std::uint32_t>(::getpid()) || mine.cookie == parent_arena.cookie ||
            side.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0) != Status::ok) {
            return false;
        }
        Ep* ep = side.connect_or_throw(side.address());  // to itself, through its own arena
        return ep_am_short(ep, kAmId, 1, nullptr, 0) == Status::ok &&
               side.progress_until([&] { return inbox.messages.size() == 1u; });
    })) << "the child's iface was not in an arena of its own, or did not work";
    ShmSide after;  // the parent's arena is still the parent's
    EXPECT_EQ(parent_arena.cookie, segment_of(after, after.address()).cookie);
}

/**
 * The identity (pid, start time, cookie) names the owner of every segment and key; it is
 * cached, so a forked child must get its own and not keep the parent's.
 */
TEST(ShmSegments, AForkedChildHasItsOwnIdentity) {
    const impl::ProcessIdentity parent = impl::this_process();
    ASSERT_EQ(::getpid(), parent.pid);
    EXPECT_TRUE(in_forked_child([&] {
        const impl::ProcessIdentity mine = impl::this_process();
        return mine.pid == ::getpid() && mine.cookie != parent.cookie &&
               mine.start_time >= parent.start_time && impl::this_process().cookie == mine.cookie;
    })) << "the child kept the parent's identity, or changed it between two calls";
    EXPECT_EQ(parent.cookie, impl::this_process().cookie) << "the parent's identity changed";
}

TEST(ShmSegments, SweepRemovesOnlyNamesOfDeadOwners) {
    const impl::ProcessIdentity self = impl::this_process();
    ASSERT_NE(0u, self.start_time);
    const auto uid = static_cast<std::uint32_t>(::geteuid());
    auto make = [](const std::string& name) {
        int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
        EXPECT_GE(fd, 0) << name;
        if (fd >= 0) ::close(fd);
    };
    auto name_of = [](std::uint32_t u, std::uint32_t pid, std::uint64_t start, std::uint64_t cookie) {
        impl::SegmentId id{};
        id.uid = u;
        id.pid = pid;
        id.start_time = start;
        id.cookie = cookie;
        return impl::posix_segment_name(id);
    };
    const std::string alive = name_of(uid, self.pid, self.start_time, 0x1111);
    const std::string reused_pid = name_of(uid, self.pid, self.start_time + 1, 0x2222);  // an older process
    const std::string no_process = name_of(uid, 0x3ffffff0, 5, 0x3333);
    const std::string other_user = name_of(uid + 4242, 0x3ffffff0, 5, 0x4444);
    const std::string not_ours = "/loom-something-else";
    for (const auto& name : {alive, reused_pid, no_process, other_user, not_ours}) make(name);
    EXPECT_GE(impl::sweep_stale_segments(), 2u);  // more if a crashed run left names behind
    auto exists = [](const std::string& name) { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; };
    EXPECT_TRUE(exists(alive));
    EXPECT_FALSE(exists(reused_pid));
    EXPECT_FALSE(exists(no_process));
    EXPECT_TRUE(exists(other_user));
    EXPECT_TRUE(exists(not_ours));
    for (const auto& name : {alive, other_user, not_ours}) ::shm_unlink(name.c_str());
}

// --- A peer iface that closes -------------------------------------------------------------------------

struct ErrorRecord {
    int calls = 0;
    Ep* ep = nullptr;
    Status status = Status::ok;

    static void on_error(void* arg, Ep* ep, Status status) {
        auto* self = static_cast<ErrorRecord*>(arg);
        ++self->calls;
        self->ep = ep;
        self->status = status;
    }
};

TEST(ShmFailure, ClosedPeerIfaceFailsItsEndpoints) {
    ShmSide sender({{"SHM_PEER_CHECK_INTERVAL", "1ms"}});
    auto receiver = std::make_unique<ShmSide>();
    ErrorRecord error;
    auto ep = sender.connect(receiver->address(), ErrorRecord::on_error, &error);
    ASSERT_TRUE(ep.ok());
    ASSERT_EQ(Status::ok, ep_am_short(*ep, kAmId, 1, nullptr, 0));
    loom::test::LogCapture capture("error");
    receiver.reset();
    ASSERT_TRUE(sender.progress_until([&] { return error.calls > 0; }, std::chrono::seconds(10)));
    EXPECT_EQ(1, error.calls);
    EXPECT_EQ(*ep, error.ep);
    EXPECT_EQ(Status::connection_reset, error.status);
    EXPECT_EQ(1, capture.count("closed its interface"));
    // The endpoint is failed for good; nothing crashes or spins.
    EXPECT_EQ(Status::connection_reset, ep_am_short(*ep, kAmId, 2, nullptr, 0));
    std::vector<std::uint8_t> payload(10);
    EXPECT_EQ(static_cast<ssize_t>(Status::connection_reset),
              ep_am_bcopy(*ep, kAmId, pack_vector, &payload, 0));
    EXPECT_EQ(Status::connection_reset, flush_ep(sender, *ep));
    for (int i = 0; i < 100; ++i) sender.progress();
    EXPECT_EQ(1, error.calls);
}

/**
 * A peer that sent and then closed its iface has its messages delivered before its
 * endpoints fail: the protocol layer above fails what waits on a failed endpoint (a
 * stream's last record, 25 fragments behind, was lost to a server woken by the close).
 */
TEST(ShmFailure, MessagesOfAClosedPeerArriveBeforeItsFailure) {
    ShmSide receiver({{"SHM_PEER_CHECK_INTERVAL", "1ms"}});
    auto sender = std::make_unique<ShmSide>();
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    struct Seen {
        Inbox* inbox;
        std::size_t at_failure = 0;
        int calls = 0;
    } seen{&inbox};
    auto back = receiver.connect(
        sender->address(),
        [](void* arg, Ep*, Status) {
            auto* s = static_cast<Seen*>(arg);
            s->at_failure = s->inbox->messages.size();
            ++s->calls;
        },
        &seen);
    ASSERT_TRUE(back.ok());
    Ep* ep = sender->connect_or_throw(receiver.address());
    constexpr std::size_t kMessages = 40;  // more than one progress call handles
    for (std::size_t i = 0; i < kMessages; ++i) ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, i, nullptr, 0));
    sender.reset();  // closes its iface: the receiver's next peer check fails the endpoint
    // Arming makes the next progress check the peers at once (a sleeper woken by the close).
    (void)receiver.iface().event_arm();
    ASSERT_TRUE(receiver.progress_until([&] { return seen.calls > 0; }, std::chrono::seconds(10)));
    EXPECT_EQ(kMessages, seen.at_failure) << "the endpoint failed before the peer's messages were handled";
}

/**
 * A worker asleep on its event fd must wake when a peer dies: requests to that peer wait
 * for a failure only progress's peer check reports (found by the Python bindings' asyncio
 * tests: an await on a send to a killed shm peer never returned).
 */
TEST(ShmFailure, ADyingPeerWakesASleepingIface) {
    ShmSide sender({{"SHM_PEER_CHECK_INTERVAL", "10s"}});  // only the wake-up can make it check
    int to_parent[2];
    ASSERT_EQ(0, ::pipe(to_parent));
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // a peer that lives until it is killed
        ShmSide peer;
        const std::vector<std::uint8_t> address = peer.address();
        const auto size = static_cast<std::uint32_t>(address.size());
        if (::write(to_parent[1], &size, sizeof(size)) == sizeof(size) &&
            ::write(to_parent[1], address.data(), size) == static_cast<ssize_t>(size)) {
            for (;;) ::pause();
        }
        ::_exit(1);
    }
    ::close(to_parent[1]);
    std::uint32_t size = 0;
    ASSERT_EQ(static_cast<ssize_t>(sizeof(size)), ::read(to_parent[0], &size, sizeof(size)));
    std::vector<std::uint8_t> address(size);
    ASSERT_EQ(static_cast<ssize_t>(size), ::read(to_parent[0], address.data(), size));
    ::close(to_parent[0]);
    ErrorRecord error;
    auto ep = sender.connect(address, ErrorRecord::on_error, &error);
    ASSERT_TRUE(ep.ok());
    auto fd = sender.iface().event_fd();
    ASSERT_TRUE(fd.ok());
    while (sender.progress() != 0) {
    }
    ASSERT_EQ(Status::ok, sender.iface().event_arm());
    loom::test::LogCapture capture("error");
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    pollfd pfd{*fd, POLLIN, 0};
    ASSERT_EQ(1, ::poll(&pfd, 1, 30000)) << "the sleeper was not woken by its peer's death";
    ASSERT_TRUE(sender.progress_until([&] { return error.calls > 0; }, std::chrono::seconds(10)));
    EXPECT_EQ(Status::endpoint_failure, error.status);
    // The dead peer's pidfd (readable for good) no longer wakes the sleeper.
    while (sender.progress() != 0) {
    }
    ASSERT_EQ(Status::ok, sender.iface().event_arm());
    EXPECT_EQ(0, ::poll(&pfd, 1, 100)) << "a dead peer keeps waking the sleeper";
}

}  // namespace
}  // namespace loom::uct::shmtest
