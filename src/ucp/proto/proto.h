/**
 * Protocols and the per-endpoint protocol table.
 *
 * A protocol (Proto) is one way of carrying one kind of operation: "tag eager short",
 * "tag rendezvous", "put zcopy"... It says which operation classes it serves, whether it
 * takes non-contiguous data, and, for a given endpoint, whether it can run there at all,
 * for which sizes, on which lane and at what cost (a line over the size, from the lanes'
 * performance model). Protocols live in their family's files (tag/, am/, stream/, rma/)
 * and register themselves (LOOM_PROTO_REGISTER).
 *
 * When an endpoint's lanes are chosen, ProtoTable::build asks every protocol and keeps, per
 * operation class and contiguity, the size ranges and the protocol serving each: the
 * cheapest by the model where several can, the user's LOOM_RNDV_THRESH overriding the
 * model. The send paths, the API fast paths (through the short limits cached in Ep),
 * LOOM_PROTO_INFO and `loom_info -e` all read this one table. So does the receiver of a
 * rendezvous: its schemes (GET, PUT, their split, the AM pipeline; src/ucp/rndv) are the
 * protocols of class rndv_recv, which LOOM_RNDV_SCHEME forces as LOOM_RNDV_THRESH forces
 * a threshold.
 */
#pragma once

#include "ucp/core/request.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::ucp {

class Worker;
class Ep;
class ProtoTable;
struct WorkerIface;
struct ContextConfig;

/**
 * The classes of operations a protocol is chosen for, each keyed by the payload's size.
 * Active messages pick eager or rendezvous by their data's size (as UCX does), then the
 * eager variant by the bytes after the fixed AM header: the user header, the data and a
 * reply's 8-byte return address, which is what am_eager lists (am_proto.cc, am_select).
 */
enum class ProtoOp : std::uint8_t {
    tag,       ///< tagged send
    tag_sync,  ///< synchronous tagged send (acknowledged on match)
    am,        ///< active message, eager or rendezvous by size
    am_eager,  ///< active message with LOOM_AM_SEND_FLAG_EAGER
    am_rndv,   ///< active message with LOOM_AM_SEND_FLAG_RNDV
    stream,
    put,
    get,
    atomic,
    /**
     * The receiver's side of a rendezvous: how a matched RTS's data moves, by the
     * message's size; contiguous means both buffers are and the sender offered its own
     * (RtsHdr::address). Built first: the senders' rendezvous protocols read it.
     */
    rndv_recv,
};
inline constexpr unsigned kNumProtoOps = 10;

/** Bit of @p op in Proto::ops. */
constexpr std::uint32_t proto_op_bit(ProtoOp op) { return 1u << static_cast<unsigned>(op); }

/** The name of @p op as the printout shows it ("tag", "tag sync", ...). */
const char* proto_op_name(ProtoOp op);

/** A cost over the message size: fixed + per_byte * size, in seconds. */
struct PerfLine {
    double fixed = 0;
    double per_byte = 0;
    double at(std::size_t size) const { return fixed + per_byte * static_cast<double>(size); }
};

/** What a protocol sees of an endpoint when the table is built. */
struct ProtoInit {
    const Worker& worker;
    const Ep& ep;
    const ContextConfig& config;
    ProtoOp op;
    bool contig;
    /** The user set where rendezvous starts (LOOM_RNDV_THRESH, user_rndv_thresh); else the model decides. */
    bool user_thresh;
    std::size_t user_rndv_thresh;
    /** The classes built so far: rndv_recv comes first (ProtoTable::build). */
    const ProtoTable& table;

    /** The iface of lane @p lane of the endpoint. */
    const WorkerIface& lane_iface(std::uint8_t lane) const;
};

/** What a protocol can do on one endpoint for one class (filled by Proto::init). */
struct ProtoCaps {
    std::size_t min_size = 0;
    std::size_t max_size = SIZE_MAX;
    PerfLine cost;
    std::uint8_t lane = 0;
    /** Serves its sizes whatever the others cost: what put it there (LOOM_RNDV_THRESH, a flag), or nullptr. */
    const char* forced = nullptr;
    /** The model cannot price it: chosen only where no other protocol serves the size. */
    bool fallback = false;
};

/** A protocol; see the file comment. Defined as a constant in its family's file. */
struct Proto {
    const char* name;          ///< short, unique: "tag eager short"
    const char* description;   ///< one line: what it does
    std::uint32_t ops;         ///< proto_op_bit of each class it serves
    bool noncontig;            ///< takes non-contiguous (iov, generic) data too
    /**
     * The C API's fast path carries it inline, without a request, when it serves a class
     * from size 0 (eager short, put short): ProtoTable::fast_path_limit.
     */
    bool fast_path;
    std::uint8_t preference;   ///< between equal costs, the lower wins
    /** Fills @p caps for init.op on this endpoint and returns nullptr, or why it cannot run there. */
    const char* (*init)(const ProtoInit& init, ProtoCaps& caps);
    /** The send progress of a request it carries (nullptr for RMA, which dispatches itself). */
    ProtoProgress progress;
    /** Details for the printout (scheme, fragment size); may be nullptr. */
    std::string (*describe)(const ProtoInit& init, const ProtoCaps& caps);
};

/** Registers @p proto with the table builder (run at load time by LOOM_PROTO_REGISTER). */
void proto_register(const Proto& proto);

/**
 * True when @p progress is the first step of a registered protocol (what a request is
 * started with), false for the later steps a protocol moves its requests on to.
 */
bool proto_is_first_step(ProtoProgress progress);

#define LOOM_PROTO_CONCAT_(a, b) a##b
#define LOOM_PROTO_CONCAT(a, b) LOOM_PROTO_CONCAT_(a, b)
/** Makes @p proto (a Proto constant) known to every table built from now on. */
#define LOOM_PROTO_REGISTER(proto)                                                             \
    [[maybe_unused]] static const bool LOOM_PROTO_CONCAT(loom_proto_registered_, __LINE__) = \
        (::loom::ucp::proto_register(proto), true)

/** One size range of a class: [first, last] goes by proto on lane. */
struct ProtoRange {
    std::size_t first = 0;
    std::size_t last = 0;
    const Proto* proto = nullptr;
    ProtoProgress progress = nullptr;
    PerfLine cost;
    std::uint8_t lane = 0;
};

/** A protocol that serves a class but was left out of it, and why. */
struct ProtoLeftOut {
    const Proto* proto;
    ProtoOp op;
    bool contig;
    std::string why;
};

/**
 * The protocol table of an endpoint configuration (endpoints whose lanes use the same
 * local ifaces share one; Worker::proto_table).
 */
class ProtoTable {
public:
    static constexpr unsigned kMaxRanges = 8;

    /** Builds the table for @p ep's lanes (ep.protos is not read). */
    static std::unique_ptr<ProtoTable> build(const Worker& worker, const Ep& ep);

    /** The range serving @p size bytes of class @p op; nullptr when no protocol does. */
    const ProtoRange* select(ProtoOp op, bool contig, std::size_t size) const {
        const Class& c = classes_[index(op, contig)];
        for (unsigned i = 0; i < c.count; ++i) {
            if (size <= c.ranges[i].last) return size >= c.ranges[i].first ? &c.ranges[i] : nullptr;
        }
        return nullptr;
    }

    /**
     * The sizes of class @p op (contiguous) the API's fast path may send inline: those
     * below the returned size, served by a fast-path protocol from size 0 (0: none).
     */
    std::size_t fast_path_limit(ProtoOp op) const;

    /** The first size of class @p op served by @p proto, or SIZE_MAX. */
    std::size_t first_size(ProtoOp op, bool contig, const Proto& proto) const;

    /**
     * The table, one line per range, each after @p prefix; the protocols left out and why.
     * @p worker and @p ep: an endpoint this table serves (the details of a range, its
     * scheme and lane, are worked out here, not when the table is built: only
     * LOOM_PROTO_INFO and loom_info print them, and formatting them was a third of a build).
     */
    std::string describe(const Worker& worker, const Ep& ep, const char* prefix) const;

    /** The ranges of one class (for tests and the printout). */
    struct Class {
        unsigned count = 0;
        ProtoRange ranges[kMaxRanges];
    };
    const Class& ranges(ProtoOp op, bool contig) const { return classes_[index(op, contig)]; }

private:
    static unsigned index(ProtoOp op, bool contig) { return static_cast<unsigned>(op) * 2 + (contig ? 0 : 1); }
    std::array<Class, kNumProtoOps * 2> classes_;
    /** Per class, what the protocol of each range found at init (describe() tells it). */
    std::array<std::vector<ProtoCaps>, kNumProtoOps * 2> caps_;
    std::vector<ProtoLeftOut> left_out_;
};

}  // namespace loom::ucp
