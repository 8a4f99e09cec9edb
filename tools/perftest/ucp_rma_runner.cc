/**
 * Protocol-layer RMA tests of loom_perftest, with ucx_perftest's names, defaults and
 * semantics:
 *
 *   ucp_put_lat  ping-pong of puts: each side puts -s bytes into the other's mapped
 *                buffer, whose last byte carries a sequence number the receiver polls
 *                for; one-way latency = round trip / 2 (window 1)
 *   ucp_put_bw   the client streams puts into the server's buffer, up to -O requests
 *                in flight (default 32); the clock stops once a flush of the endpoint
 *                completed, i.e. the data is at the target
 *   ucp_get      the client gets -s bytes from the server's buffer, -O at a time
 *                (default 1: the latency column is one get's round trip)
 *   ucp_add      the client posts 4- or 8-byte (-s) atomic adds of 1 to a word of the
 *                server, -O requests at a time (default 1); the clock stops after a flush
 *
 * The server only progresses (the software RMA of tcp, and shm without CMA, needs it)
 * until the client says it is done. Then the data is checked outside the timing: the
 * server compares its buffer with what the puts wrote, or its word with the number of
 * adds, and answers; the client compares what the last get fetched. A mismatch fails
 * the run. Buffers are mapped with LOOM_MEM_MAP_ALLOCATE, so shm atomics work between
 * processes and the local buffers are registered where a transport wants that.
 *
 * Only the public C API (include/loom/ucp.h) is used; transports come from LOOM_TLS (the
 * client's -x replaces it in both processes). Every wait gives up after 60 s in which the
 * worker made no progress, or at once when the endpoint to the peer fails.
 */
#include "perftest.h"
#include "ucp_session.h"

#include "ucs/type/result.h"

#include <loom/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace loom::perftest {

namespace {

constexpr loom_tag_t kTagDone = 0x1337a890u;     ///< client -> server: the test is over
constexpr loom_tag_t kTagVerdict = 0x1337a891u;  ///< server -> client: 1 when its data checked out

std::uint8_t pattern_byte(std::size_t i) {
    return static_cast<std::uint8_t>((i * 7 + 3) & 0xff);
}

/** What the checks send back and forth: a buffer's address and its packed key. */
struct Region {
    loom_mem_h memh = nullptr;
    std::uint8_t* data = nullptr;
    std::size_t length = 0;
};

/** Context, worker, endpoint, mapped buffers and the peer's keys. */
class RmaUcp : public UcpSession {
public:
    explicit RmaUcp(const Params& params) : UcpSession(params) { regions_.reserve(kMaxRegions); }

    /** Buffers a test maps at most (loopback put_lat: two per side). */
    static constexpr std::size_t kMaxRegions = 4;

    ~RmaUcp() {
        for (loom_rkey_h k : rkeys_) loom_rkey_destroy(k);
        force_close();  // before the memory its outstanding operations may still use
        for (Region& r : regions_) (void)loom_mem_unmap(context(), r.memh);
    }

    /** The context with tags, RMA and atomics, and the worker. */
    Status open() {
        return UcpSession::open(LOOM_FEATURE_TAG | LOOM_FEATURE_RMA | LOOM_FEATURE_AMO32 | LOOM_FEATURE_AMO64);
    }

    /** Maps @p length bytes (at least 64) allocated by Loom, filled with @p fill. */
    Result<Region*> map(std::size_t length, std::uint8_t fill) {
        loom_mem_map_params_t mp{};
        mp.field_mask = LOOM_MEM_MAP_PARAM_FIELD_LENGTH | LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.length = length < 64 ? 64 : length;
        mp.flags = LOOM_MEM_MAP_ALLOCATE;
        if (regions_.size() == kMaxRegions) return Status::exceeds_limit;
        Region r;
        if (loom_status_t s = loom_mem_map(context(), &mp, &r.memh); s != LOOM_OK)
            return fail(params_, "loom_mem_map", s);
        loom_mem_attr_t a{};
        a.field_mask = LOOM_MEM_ATTR_FIELD_ADDRESS | LOOM_MEM_ATTR_FIELD_LENGTH;
        (void)loom_mem_query(r.memh, &a);
        r.data = static_cast<std::uint8_t*>(a.address);
        r.length = a.length;
        std::memset(r.data, fill, r.length);
        regions_.push_back(r);
        return &regions_.back();
    }

    /** [u64 address][packed key] of @p r, for the peer. */
    Result<std::vector<std::uint8_t>> describe(const Region& r) {
        void* key;
        std::size_t key_length;
        if (loom_status_t s = loom_rkey_pack(context(), r.memh, &key, &key_length); s != LOOM_OK) {
            return fail(params_, "loom_rkey_pack", s);
        }
        std::vector<std::uint8_t> blob(8 + key_length);
        const auto address = reinterpret_cast<std::uintptr_t>(r.data);
        std::memcpy(blob.data(), &address, 8);
        std::memcpy(blob.data() + 8, key, key_length);
        loom_rkey_buffer_release(key);
        return blob;
    }

    /** Unpacks a peer's describe() blob: the remote address and key. */
    Status unpack(const std::vector<std::uint8_t>& blob, std::uint64_t& address, loom_rkey_h& rkey) {
        if (blob.size() < 8) {
            std::fprintf(stderr, "loom_perftest: %s: the peer's buffer description is truncated\n",
                         test_name(params_.test));
            return Status::invalid_param;
        }
        std::memcpy(&address, blob.data(), 8);
        if (loom_status_t s = loom_ep_rkey_unpack(ep(), blob.data() + 8, blob.size() - 8, &rkey);
            s != LOOM_OK) {
            return fail(params_, "loom_ep_rkey_unpack", s);
        }
        rkeys_.push_back(rkey);
        return Status::ok;
    }

    /** Polls the byte at @p p (progressing) until it reads @p value. */
    loom_status_t poll_byte(const std::uint8_t* p, std::uint8_t value) {
        return progress_until([&] { return __atomic_load_n(p, __ATOMIC_ACQUIRE) == value; });
    }

    loom_status_t send_word(std::uint64_t value, loom_tag_t tag) {
        word_out_ = value;
        return wait(loom_tag_send_nbx(ep(), &word_out_, sizeof(word_out_), tag, nullptr));
    }

    loom_status_t recv_word(std::uint64_t& value, loom_tag_t tag) {
        return wait(loom_tag_recv_nbx(worker(), &value, sizeof(value), tag, ~loom_tag_t{0}, nullptr));
    }

    /** Closes the endpoint after flushing it (the peer's keys first). */
    Status close() {
        for (loom_rkey_h k : rkeys_) loom_rkey_destroy(k);
        rkeys_.clear();
        return UcpSession::close();
    }

private:
    std::vector<loom_rkey_h> rkeys_;
    std::vector<Region> regions_;  ///< reserved up front: map() hands out pointers into it
    std::uint64_t word_out_ = 0;
};

/** Both sides' view of one test: where the peer's buffer is. */
struct Peer {
    std::uint64_t address = 0;
    loom_rkey_h rkey = nullptr;
};

/** One operation of the stream tests into @p remote; NULL, an error or a request. */
loom_status_ptr_t issue(const Params& params, RmaUcp& ucp, Region& local, const Peer& remote) {
    static const std::uint64_t kOne = 1;
    switch (params.test) {
        case TestKind::ucp_put_bw:
            return loom_put_nbx(ucp.ep(), local.data, params.size, remote.address, remote.rkey, nullptr);
        case TestKind::ucp_get:
            return loom_get_nbx(ucp.ep(), local.data, params.size, remote.address, remote.rkey, nullptr);
        default: {
            loom_request_param_t p{};
            p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
            p.datatype = loom_dt_make_contig(params.size);
            return loom_atomic_op_nbx(ucp.ep(), LOOM_ATOMIC_OP_ADD, &kOne, 1, remote.address, remote.rkey,
                                      &p);
        }
    }
}

const char* op_name(TestKind kind) {
    switch (kind) {
        case TestKind::ucp_put_lat:
        case TestKind::ucp_put_bw:
            return "loom_put_nbx";
        case TestKind::ucp_get:
            return "loom_get_nbx";
        default:
            return "loom_atomic_op_nbx";
    }
}

/** Whether the server's buffer holds what the stream test left there. */
bool server_data_ok(const Params& params, const Region& target) {
    if (params.test == TestKind::ucp_put_bw) {
        for (std::size_t i = 0; i < params.size; ++i) {
            if (target.data[i] != pattern_byte(i)) return false;
        }
    } else if (params.test == TestKind::ucp_add) {
        std::uint64_t value = 0;
        std::memcpy(&value, target.data, params.size);
        const std::uint64_t mask = params.size == 4 ? 0xffffffffull : ~0ull;
        if (value != ((params.warmup + params.iters) & mask)) {
            std::fprintf(stderr, "loom_perftest: %s: the target word is %llu after %llu adds\n",
                         test_name(params.test), static_cast<unsigned long long>(value),
                         static_cast<unsigned long long>(params.warmup + params.iters));
            return false;
        }
    }
    return true;
}

// --- ucp_put_lat ---------------------------------------------------------------------------

/** Puts @p sbuf (its last byte = @p sn) into @p to and waits for the request. */
loom_status_t put_sn(const Params& params, RmaUcp& ucp, Region& sbuf, const Peer& to, std::uint8_t sn) {
    sbuf.data[params.size - 1] = sn;
    return ucp.wait(loom_put_nbx(ucp.ep(), sbuf.data, params.size, to.address, to.rkey, nullptr));
}

/**
 * The put ping-pong. @p rbuf receives the peer's puts; in loopback, @p peer_* are the
 * other side's buffers (in this process) and the pong runs between ping and poll.
 */
Status run_put_lat(const Params& params, RmaUcp& ucp, bool client, bool loopback, Region& sbuf, Region& rbuf,
                   const Peer& remote, Region* peer_sbuf, Region* peer_rbuf, const Peer& back,
                   const OutputOptions& out, Report& report) {
    const std::uint64_t total = params.warmup + params.iters;
    std::unique_ptr<Meter> meter;
    for (std::uint64_t i = 0; i < total; ++i) {
        // Never 0 (the initial contents), and two consecutive values always differ.
        const auto sn = static_cast<std::uint8_t>(1 + i % 255);
        if (client && i == params.warmup) meter = std::make_unique<Meter>(params, out, true);
        ucs::Ticks t0 = ucs::get_time();
        if (client) {
            if (loom_status_t s = put_sn(params, ucp, sbuf, remote, sn); s != LOOM_OK) {
                return fail_wait(params, "loom_put_nbx (ping)", s);
            }
            if (loopback) {
                if (loom_status_t s = ucp.poll_byte(peer_rbuf->data + params.size - 1, sn); s != LOOM_OK) {
                    return fail_wait(params, "the ping", s);
                }
                if (loom_status_t s = put_sn(params, ucp, *peer_sbuf, back, sn); s != LOOM_OK) {
                    return fail_wait(params, "loom_put_nbx (pong)", s);
                }
            }
            if (loom_status_t s = ucp.poll_byte(rbuf.data + params.size - 1, sn); s != LOOM_OK) {
                return fail_wait(params, "the pong", s);
            }
            if (meter) {
                ucs::Ticks now = ucs::get_time();
                meter->sample(i - params.warmup, now, now - t0);
            }
        } else {
            if (loom_status_t s = ucp.poll_byte(rbuf.data + params.size - 1, sn); s != LOOM_OK) {
                return fail_wait(params, "the ping", s);
            }
            if (loom_status_t s = put_sn(params, ucp, sbuf, remote, sn); s != LOOM_OK) {
                return fail_wait(params, "loom_put_nbx (pong)", s);
            }
        }
    }
    if (meter) meter->finish(params.iters, report);
    return Status::ok;
}

// --- ucp_put_bw, ucp_get, ucp_add --------------------------------------------------------------

std::uint32_t default_window(TestKind kind) {
    return kind == TestKind::ucp_put_bw ? 32 : 1;
}

Status run_stream_client(const Params& params, RmaUcp& ucp, Region& local, const Peer& remote,
                         const OutputOptions& out, Report& report) {
    const std::uint64_t total = params.warmup + params.iters;
    const std::uint32_t window = params.outstanding ? params.outstanding : default_window(params.test);
    std::vector<loom_status_ptr_t> inflight(window, nullptr);
    auto drop_all = [&] {
        for (loom_status_ptr_t& r : inflight) {
            if (LOOM_PTR_IS_PTR(r)) loom_request_free(r);
            r = nullptr;
        }
    };
    const char* what = op_name(params.test);
    std::unique_ptr<Meter> meter;
    std::uint32_t next = 0;  // the slot of operation i (i % window, without a division per operation)
    for (std::uint64_t i = 0; i < total; ++i) {
        if (i == params.warmup) {
            // The warm-up ends before the clock starts (as ucx_perftest's, which runs apart).
            if (loom_status_t s = ucp.wait_all(inflight); s != LOOM_OK) {
                drop_all();
                return fail_wait(params, what, s);
            }
            meter = std::make_unique<Meter>(params, out, false);
        }
        loom_status_ptr_t& slot = inflight[next];
        next = next + 1 == window ? 0 : next + 1;
        if (slot != nullptr) {  // the operation `window` ago: wait until it completed
            loom_status_t s = ucp.wait(slot);
            slot = nullptr;
            if (s != LOOM_OK) {
                drop_all();
                return fail_wait(params, what, s);
            }
        }
        slot = issue(params, ucp, local, remote);
        if (LOOM_PTR_IS_ERR(slot)) {
            loom_status_t s = LOOM_PTR_STATUS(slot);
            slot = nullptr;
            drop_all();
            return fail(params, what, s);
        }
        // Operations that complete in the call never wait: progress now and then anyway, so
        // a dead peer is noticed (as the endpoint's failure) and software RMA moves on.
        if ((i & 63) == 63) {
            if (loom_status_t s = ucp.progress_once(); s != LOOM_OK) {
                drop_all();
                return fail_wait(params, what, s);
            }
        }
        if (meter) meter->sample(i - params.warmup, ucs::get_time(), 0);
    }
    if (loom_status_t s = ucp.wait_all(inflight); s != LOOM_OK) {
        drop_all();
        return fail_wait(params, what, s);
    }
    // Puts and posted adds are complete when they are at the target.
    if (params.test != TestKind::ucp_get) {
        if (loom_status_t s = ucp.wait(loom_ep_flush_nbx(ucp.ep(), nullptr)); s != LOOM_OK) {
            return fail_wait(params, "loom_ep_flush_nbx", s);
        }
    }
    if (meter) meter->finish(params.iters, report);
    if (params.test == TestKind::ucp_get) {
        for (std::size_t i = 0; i < params.size; ++i) {
            if (local.data[i] != pattern_byte(i)) {
                std::fprintf(stderr, "loom_perftest: ucp_get: byte %zu of the data fetched is wrong\n", i);
                return Status::io_error;
            }
        }
    }
    return Status::ok;
}

Status check_size(const Params& params) {
    if (params.test == TestKind::ucp_add ? params.size != 4 && params.size != 8 : params.size == 0) {
        std::fprintf(stderr, "loom_perftest: %s: invalid size %llu (%s)\n", test_name(params.test),
                     static_cast<unsigned long long>(params.size),
                     params.test == TestKind::ucp_add ? "an atomic is 4 or 8 bytes" : "at least 1 byte");
        return Status::invalid_param;
    }
    return Status::ok;
}

/** The verdict exchange after a stream test; the client fails the run on a bad one. */
Status finish_stream(const Params& params, RmaUcp& ucp, bool client, Region& target) {
    std::uint64_t word = 0;
    if (client) {
        if (loom_status_t s = ucp.send_word(0, kTagDone); s != LOOM_OK)
            return fail_wait(params, "the end message", s);
        if (loom_status_t s = ucp.recv_word(word, kTagVerdict); s != LOOM_OK) {
            return fail_wait(params, "the verdict", s);
        }
        if (word != 1) {
            std::fprintf(stderr, "loom_perftest: %s: the target's data is wrong after the test\n",
                         test_name(params.test));
            return Status::io_error;
        }
        return Status::ok;
    }
    // The server progresses (software RMA) until the client is done, then checks.
    if (loom_status_t s = ucp.recv_word(word, kTagDone); s != LOOM_OK)
        return fail_wait(params, "the test", s);
    const bool ok = server_data_ok(params, target);
    if (loom_status_t s = ucp.send_word(ok ? 1 : 0, kTagVerdict); s != LOOM_OK) {
        return fail_wait(params, "the verdict", s);
    }
    return ok ? Status::ok : Status::io_error;
}

}  // namespace

Status run_ucp_rma_test(const Params& params, Role role, Oob* oob, const OutputOptions& out, Report& report) {
    if (Status s = check_size(params); s != Status::ok) return s;
    RmaUcp ucp(params);
    if (Status s = ucp.open(); s != Status::ok) return s;
    const bool loopback = role == Role::loopback;
    const bool client = role != Role::server;
    const bool put_lat = params.test == TestKind::ucp_put_lat;
    // Every side maps a send buffer and a target buffer (loopback: both sides' in one process).
    // Puts write the pattern into a target of zeros; gets read it from the target.
    auto sbuf = ucp.map(params.size, 0);
    auto tbuf = ucp.map(params.size, 0);
    if (!sbuf || !tbuf) return Status::no_memory;
    for (std::size_t i = 0; i < params.size; ++i) {
        (*sbuf)->data[i] = params.test == TestKind::ucp_get ? 0 : pattern_byte(i);
        if (params.test == TestKind::ucp_get) (*tbuf)->data[i] = pattern_byte(i);
    }
    Region* peer_sbuf = nullptr;
    Region* peer_rbuf = nullptr;
    if (loopback && put_lat) {
        auto ps = ucp.map(params.size, 0);
        auto pr = ucp.map(params.size, 0);
        if (!ps || !pr) return Status::no_memory;
        peer_sbuf = *ps;
        peer_rbuf = *pr;
    }
    // Endpoints, then each side's target buffer description for the other.
    std::vector<std::uint8_t> peer_address;
    if (loopback) {
        peer_address = ucp.address();
    } else {
        Status s = oob->exchange(ucp.address(), peer_address);
        if (s != Status::ok) {
            std::fprintf(stderr, "loom_perftest: %s: the worker address exchange failed\n",
                         test_name(params.test));
            return s;
        }
    }
    if (Status s = ucp.connect(peer_address.data()); s != Status::ok) return s;
    Peer remote, back;
    if (loopback) {
        auto blob = ucp.describe(put_lat ? *peer_rbuf : **tbuf);
        if (!blob) return blob.status();
        if (Status s = ucp.unpack(*blob, remote.address, remote.rkey); s != Status::ok) return s;
        if (put_lat) {
            auto mine = ucp.describe(**tbuf);
            if (!mine) return mine.status();
            if (Status s = ucp.unpack(*mine, back.address, back.rkey); s != Status::ok) return s;
        }
    } else {
        auto blob = ucp.describe(**tbuf);
        if (!blob) return blob.status();
        std::vector<std::uint8_t> peer_blob;
        Status s = oob->exchange(*blob, peer_blob);
        if (s != Status::ok) {
            std::fprintf(stderr, "loom_perftest: %s: the buffer exchange failed\n", test_name(params.test));
            return s;
        }
        if (s = ucp.unpack(peer_blob, remote.address, remote.rkey); s != Status::ok) return s;
        if (s = oob->barrier(); s != Status::ok) {
            std::fprintf(stderr, "loom_perftest: %s: the peer failed before the test (see its output)\n",
                         test_name(params.test));
            return s;
        }
    }
    if (client) print_header(out, params);
    Status s;
    if (put_lat) {
        s = run_put_lat(params, ucp, client, loopback, **sbuf, **tbuf, remote, peer_sbuf, peer_rbuf, back,
                        out, report);
    } else if (client) {
        s = run_stream_client(params, ucp, **sbuf, remote, out, report);
        if (s == Status::ok && loopback && !server_data_ok(params, **tbuf)) {
            std::fprintf(stderr, "loom_perftest: %s: the target's data is wrong after the test\n",
                         test_name(params.test));
            s = Status::io_error;
        }
        if (s == Status::ok && !loopback) s = finish_stream(params, ucp, true, **tbuf);
    } else {
        s = finish_stream(params, ucp, false, **tbuf);
    }
    if (s != Status::ok) return s;
    if (s = ucp.close(); s != Status::ok) return s;
    // Nobody tears down its worker while the other may still progress a close.
    if (!loopback && (s = oob->barrier()) != Status::ok) {
        std::fprintf(stderr, "loom_perftest: %s: the peer failed after the test\n", test_name(params.test));
        return s;
    }
    return Status::ok;
}

}  // namespace loom::perftest
