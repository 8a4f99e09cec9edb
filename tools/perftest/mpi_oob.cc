/**
 * The MPI out-of-band channel of loom_perftest (built only when configure found MPI).
 * Only the MPI C API is used: no C++ bindings, no libmpi_cxx.
 */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1

#include "mpi_oob.h"

#include "ucs/debug/log.h"

#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace loom::perftest {

namespace {

constexpr int kBlobTag = 7;
constexpr std::size_t kMaxBlob = 64u << 20;

/** Which launchers the MPI library can join. */
enum class Flavour : std::uint8_t { open_mpi, mpich, other };

#if defined(OPEN_MPI)
constexpr Flavour kFlavour = Flavour::open_mpi;
#elif defined(MPICH)
constexpr Flavour kFlavour = Flavour::mpich;
#else
constexpr Flavour kFlavour = Flavour::other;
#endif

Status check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return Status::ok;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
    LOOM_LOG_ERROR("perftest: {} failed: {}", call, std::string(text, static_cast<std::size_t>(length)));
    return Status::io_error;
}

/** Two ranks of MPI_COMM_WORLD; every message goes to or comes from the other one. */
class MpiOob final : public Oob {
public:
    explicit MpiOob(int peer) : peer_(peer) {}
    ~MpiOob() override { MPI_Finalize(); }

    Status send_blob(const std::vector<std::uint8_t>& blob) override {
        if (blob.size() > kMaxBlob) return too_big(static_cast<long long>(blob.size()));
        int rc = MPI_Send(data(blob), static_cast<int>(blob.size()), MPI_BYTE, peer_, kBlobTag, MPI_COMM_WORLD);
        return check(rc, "MPI_Send");
    }

    Status recv_blob(std::vector<std::uint8_t>& blob) override {
        MPI_Status status;
        int count = 0;
        if (Status s = check(MPI_Probe(peer_, kBlobTag, MPI_COMM_WORLD, &status), "MPI_Probe"); s != Status::ok) {
            return s;
        }
        if (Status s = check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count"); s != Status::ok) return s;
        if (count < 0 || static_cast<std::size_t>(count) > kMaxBlob) return too_big(count);
        blob.resize(static_cast<std::size_t>(count));
        int rc = MPI_Recv(blob.empty() ? &dummy_ : blob.data(), count, MPI_BYTE, peer_, kBlobTag, MPI_COMM_WORLD,
                          MPI_STATUS_IGNORE);
        return check(rc, "MPI_Recv");
    }

    // Both ranks send at once: a blocking send of a blob above the eager limit would
    // wait for the other's receive, and both would wait.
    Status exchange(const std::vector<std::uint8_t>& mine, std::vector<std::uint8_t>& peer) override {
        if (mine.size() > kMaxBlob) return too_big(static_cast<long long>(mine.size()));
        MPI_Request request;
        int rc = MPI_Isend(data(mine), static_cast<int>(mine.size()), MPI_BYTE, peer_, kBlobTag, MPI_COMM_WORLD,
                           &request);
        if (Status s = check(rc, "MPI_Isend"); s != Status::ok) return s;
        Status received = recv_blob(peer);
        Status sent = check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
        return received != Status::ok ? received : sent;
    }

    Status barrier() override { return check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

    // The peer may be waiting in a measured loop or in an MPI call, where it would wait
    // for a message that never comes; MPI_Abort ends it and this process.
    void fail() noexcept override {
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

private:
    void* data(const std::vector<std::uint8_t>& blob) {
        return blob.empty() ? &dummy_ : const_cast<std::uint8_t*>(blob.data());
    }

    static Status too_big(long long size) {
        LOOM_LOG_ERROR("perftest: out-of-band message of {} bytes is not ours", size);
        return Status::malformed_packet;
    }

    int peer_;
    std::uint8_t dummy_ = 0;
};

/** Why the MPI library cannot join @p launcher's job, or an empty string when it can. */
std::string incompatible(const Launcher& launcher) {
    // Open MPI joins through its own launcher or PMIx, not PMI-1/2 (hydra): under
    // MPICH's mpiexec each process would start as a singleton of its own. MPICH does
    // not know Open MPI's runtime.
    const bool pmi_only = launcher.variable == "PMI_SIZE";
    const bool ompi_only = launcher.variable == "OMPI_COMM_WORLD_SIZE" && !std::getenv("PMI_SIZE");
    if ((kFlavour == Flavour::open_mpi && pmi_only) || (kFlavour == Flavour::mpich && ompi_only)) {
        return fmt::format("started by {} ({} is set), but this loom_perftest was built with {}, which cannot join "
                           "its job. Launch it with {} ({}), or run a server and a client by hand "
                           "(loom_perftest -h)",
                           launcher.name, launcher.variable, mpi_library(),
                           kFlavour == Flavour::open_mpi ? "Open MPI's mpirun" : "MPICH's mpiexec",
                           kFlavour == Flavour::open_mpi ? "mpirun -np 2 loom_perftest ..."
                                                         : "mpiexec.mpich -n 2 loom_perftest ...");
    }
    return {};
}

}  // namespace

std::string mpi_library() {
#if defined(OPEN_MPI)
    return fmt::format("Open MPI {}.{}.{}", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#elif defined(MPICH)
    return fmt::format("MPICH {}", MPICH_VERSION);
#else
    return fmt::format("an MPI-{}.{} library", MPI_VERSION, MPI_SUBVERSION);
#endif
}

MpiJob join_mpi_job(const Launcher& launcher, int& argc, char**& argv) {
    MpiJob job;
    const bool speak = launcher.rank <= 0;  // one message per job when the ranks are known
    if (std::string why = incompatible(launcher); !why.empty()) {
        if (speak) std::fprintf(stderr, "loom_perftest: %s\n", why.c_str());
        return job;
    }
    // Only the main thread calls MPI; Loom's own threads (async events) never do.
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        std::fprintf(stderr, "loom_perftest: MPI_Init failed under %s\n", launcher.name.c_str());
        return job;
    }
    auto finalize = [&](int exit_code) {
        MPI_Finalize();
        job.exit_code = exit_code;
        return std::move(job);
    };
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int size = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (launcher.size > 0 && size != launcher.size) {
        if (speak) {
            std::fprintf(stderr,
                         "loom_perftest: %s started %d processes (%s=%d) but %s sees a job of %d: the launcher "
                         "and the MPI library loom_perftest was built with do not belong together\n",
                         launcher.name.c_str(), launcher.size, launcher.variable.c_str(), launcher.size,
                         mpi_library().c_str(), size);
        }
        return finalize(1);
    }
    if (size != 2) {
        if (rank == 0) {
            std::fprintf(stderr,
                         "loom_perftest: under an MPI launcher it needs exactly 2 processes (rank 0 measures and "
                         "prints, rank 1 answers), not %d: mpirun -np 2 loom_perftest ...\n",
                         size);
        }
        return finalize(2);
    }
    job.rank = rank;
    job.exit_code = 0;
    job.oob = std::make_unique<MpiOob>(1 - rank);
    return job;
}

}  // namespace loom::perftest
