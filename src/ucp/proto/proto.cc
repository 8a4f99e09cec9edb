#include "ucp/proto/proto.h"

#include "ucp/core/worker.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace loom::ucp {

namespace {

/** Every protocol registered so far, in registration order. */
std::vector<const Proto*>& registry() {
    static std::vector<const Proto*> protos;
    return protos;
}

struct Candidate {
    const Proto* proto;
    ProtoCaps caps;

    bool serves(std::size_t size) const { return caps.min_size <= size && size <= caps.max_size; }
};

/**
 * Whether @p a beats @p b at @p size (both serve it): a forced protocol beats an unforced
 * one, a priced one a fallback; then the lower cost, on equal costs the lower per-byte
 * cost (it wins from there on), then the preference.
 */
bool beats(const Candidate& a, const Candidate& b, std::size_t size) {
    if ((a.caps.forced != nullptr) != (b.caps.forced != nullptr)) return a.caps.forced != nullptr;
    if (a.caps.fallback != b.caps.fallback) return !a.caps.fallback;
    if (!a.caps.forced && !a.caps.fallback) {
        const double ca = a.caps.cost.at(size), cb = b.caps.cost.at(size);
        if (ca != cb) return ca < cb;
        if (a.caps.cost.per_byte != b.caps.cost.per_byte) return a.caps.cost.per_byte < b.caps.cost.per_byte;
    }
    return a.proto->preference < b.proto->preference;
}

/**
 * The last size from @p start on where @p best (chosen at @p start) stays the choice:
 * until it stops serving, another protocol starts serving, or a cheaper-per-byte one
 * overtakes it (where the cost lines cross, rounded up: rendezvous from the first size
 * where it costs no more).
 */
std::size_t range_end(const std::vector<Candidate>& cands, const Candidate& best, std::size_t start) {
    std::size_t end = best.caps.max_size;
    for (const Candidate& o : cands) {
        if (&o == &best || o.caps.max_size < start) continue;
        if (o.caps.min_size > start) {
            end = std::min(end, o.caps.min_size - 1);
            continue;
        }
        if (best.caps.forced || o.caps.forced || best.caps.fallback || o.caps.fallback) continue;
        const double saved_per_byte = best.caps.cost.per_byte - o.caps.cost.per_byte;
        if (!(saved_per_byte > 0)) continue;
        const double cross = std::ceil((o.caps.cost.fixed - best.caps.cost.fixed) / saved_per_byte);
        if (!(cross < static_cast<double>(SIZE_MAX))) continue;
        const auto at = cross <= static_cast<double>(start) ? start + 1 : static_cast<std::size_t>(cross);
        end = std::min(end, at - 1);
    }
    return end;
}

static_assert(static_cast<unsigned>(ProtoOp::rndv_recv) == kNumProtoOps - 1, "build_order takes the last class first");

/**
 * The class built @p k-th: rndv_recv first, because the senders' rendezvous protocols
 * read which schemes the receiver runs (ProtoInit::table), then the others in order.
 */
ProtoOp build_order(unsigned k) { return k == 0 ? ProtoOp::rndv_recv : static_cast<ProtoOp>(k - 1); }

std::string size_text(std::size_t size) { return size == SIZE_MAX ? "inf" : std::to_string(size); }

std::string cost_text(const ProtoCaps& caps) {
    if (caps.forced) return caps.forced;
    if (caps.fallback) return "not priced: only where nothing else serves";
    return fmt::format("model {:.3f} us + {:.4f} ns/B", caps.cost.fixed * 1e6, caps.cost.per_byte * 1e9);
}

}  // namespace

void proto_register(const Proto& proto) { registry().push_back(&proto); }

bool proto_is_first_step(ProtoProgress progress) {
    return progress != nullptr && std::any_of(registry().begin(), registry().end(),
                                              [progress](const Proto* p) { return p->progress == progress; });
}

const char* proto_op_name(ProtoOp op) {
    switch (op) {
    case ProtoOp::tag: return "tag";
    case ProtoOp::tag_sync: return "tag sync";
    case ProtoOp::am: return "am";
    case ProtoOp::am_eager: return "am, flag eager";
    case ProtoOp::am_rndv: return "am, flag rndv";
    case ProtoOp::stream: return "stream";
    case ProtoOp::put: return "put";
    case ProtoOp::get: return "get";
    case ProtoOp::atomic: return "atomic";
    case ProtoOp::rndv_recv: return "rndv receive";
    }
    return "?";
}

const WorkerIface& ProtoInit::lane_iface(std::uint8_t lane) const { return worker.ifaces[ep.lanes[lane].iface]; }

std::unique_ptr<ProtoTable> ProtoTable::build(const Worker& worker, const Ep& ep) {
    auto table = std::make_unique<ProtoTable>();
    const ContextConfig& cfg = worker.context.config();
    const bool user_thresh = cfg.rndv_thresh != ucs::config::kSizeAuto;
    for (unsigned k = 0; k < kNumProtoOps; ++k) {
        const ProtoOp op = build_order(k);
        for (bool contig : {true, false}) {
            const ProtoInit init{worker, ep, cfg, op, contig, user_thresh, cfg.rndv_thresh, *table};
            std::vector<Candidate> cands;
            for (const Proto* proto : registry()) {
                if (!(proto->ops & proto_op_bit(op)) || (!contig && !proto->noncontig)) continue;
                Candidate c{proto, {}};
                if (const char* why = proto->init(init, c.caps)) {
                    // Said once per protocol and reason, not per class.
                    const bool said = std::any_of(table->left_out_.begin(), table->left_out_.end(),
                                                  [&](const ProtoLeftOut& l) { return l.proto == proto && l.why == why; });
                    if (!said) table->left_out_.push_back({proto, op, contig, why});
                    continue;
                }
                if (c.caps.min_size > c.caps.max_size) continue;  // its sizes all went to others
                cands.push_back(std::move(c));
            }
            Class& cls = table->classes_[index(op, contig)];
            std::vector<ProtoCaps>& caps = table->caps_[index(op, contig)];
            std::size_t size = 0;
            for (;;) {
                const Candidate* best = nullptr;
                for (const Candidate& c : cands) {
                    if (c.serves(size) && (best == nullptr || beats(c, *best, size))) best = &c;
                }
                if (best == nullptr) {
                    // A gap: nothing serves this size; go on where something starts.
                    std::size_t next = SIZE_MAX;
                    for (const Candidate& c : cands) {
                        if (c.caps.min_size > size) next = std::min(next, c.caps.min_size);
                    }
                    if (next == SIZE_MAX) break;
                    size = next;
                    continue;
                }
                const std::size_t end = range_end(cands, *best, size);
                ProtoRange* last = cls.count != 0 ? &cls.ranges[cls.count - 1] : nullptr;
                if (last != nullptr && last->proto == best->proto && last->lane == best->caps.lane &&
                    last->last + 1 == size) {
                    last->last = end;  // the same protocol again (another candidate began and lost)
                } else if (cls.count < kMaxRanges) {
                    cls.ranges[cls.count++] =
                        ProtoRange{size, end, best->proto, best->proto->progress, best->caps.cost, best->caps.lane};
                    caps.push_back(best->caps);
                } else {
                    // Cannot happen with the protocols there are (at most 4 per class).
                    cls.ranges[cls.count - 1].last = SIZE_MAX;
                    break;
                }
                if (end == SIZE_MAX) break;
                size = end + 1;
            }
        }
    }
    return table;
}

std::size_t ProtoTable::fast_path_limit(ProtoOp op) const {
    const Class& c = classes_[index(op, true)];
    if (c.count == 0 || !c.ranges[0].proto->fast_path || c.ranges[0].first != 0) return 0;
    return c.ranges[0].last == SIZE_MAX ? SIZE_MAX : c.ranges[0].last + 1;
}

std::size_t ProtoTable::first_size(ProtoOp op, bool contig, const Proto& proto) const {
    const Class& c = classes_[index(op, contig)];
    for (unsigned i = 0; i < c.count; ++i) {
        if (c.ranges[i].proto == &proto) return c.ranges[i].first;
    }
    return SIZE_MAX;
}

std::string ProtoTable::describe(const Worker& worker, const Ep& ep, const char* prefix) const {
    const ContextConfig& cfg = worker.context.config();
    const bool user_thresh = cfg.rndv_thresh != ucs::config::kSizeAuto;
    std::string out;
    for (unsigned op_index = 0; op_index < kNumProtoOps; ++op_index) {
        const auto op = static_cast<ProtoOp>(op_index);
        for (bool contig : {true, false}) {
            const Class& c = classes_[index(op, contig)];
            const std::vector<ProtoCaps>& caps = caps_[index(op, contig)];
            const ProtoInit init{worker, ep, cfg, op, contig, user_thresh, cfg.rndv_thresh, *this};
            if (c.count == 0) {
                // Only worth a line when some protocol would serve the class elsewhere.
                const bool served = std::any_of(registry().begin(), registry().end(), [&](const Proto* p) {
                    return (p->ops & proto_op_bit(op)) && (contig || p->noncontig);
                });
                if (served) out += fmt::format("{}  {}, {}: no protocol\n", prefix, proto_op_name(op),
                                               contig ? "contiguous" : "iov/generic");
                continue;
            }
            out += fmt::format("{}  {}, {}:\n", prefix, proto_op_name(op), contig ? "contiguous" : "iov/generic");
            for (unsigned i = 0; i < c.count; ++i) {
                const ProtoRange& r = c.ranges[i];
                const WorkerIface& wi = init.lane_iface(caps[i].lane);
                std::string detail =
                    r.proto->describe != nullptr ? r.proto->describe(init, caps[i]) : std::string{};
                detail += fmt::format(" on {}/{} [{}]", wi.rsc->tl.tl_name, wi.rsc->tl.dev_name,
                                      cost_text(caps[i]));
                out += fmt::format("{}  {:>10} .. {:<10} {}{}\n", prefix, r.first, size_text(r.last),
                                   r.proto->name, detail);
            }
        }
    }
    // What each protocol in the table does, once.
    for (const Proto* p : registry()) {
        const bool used = std::any_of(classes_.begin(), classes_.end(), [&](const Class& c) {
            return std::any_of(c.ranges, c.ranges + c.count, [&](const ProtoRange& r) { return r.proto == p; });
        });
        if (used) out += fmt::format("{}  {}: {}\n", prefix, p->name, p->description);
    }
    for (const ProtoLeftOut& l : left_out_) {
        out += fmt::format("{}  not used: {}: {}\n", prefix, l.proto->name, l.why);
    }
    return out;
}

}  // namespace loom::ucp
