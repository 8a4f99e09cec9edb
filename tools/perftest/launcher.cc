#include "mpi_oob.h"

#include <cerrno>
#include <cstdlib>

namespace loom::perftest {

namespace {

/** The integer value of @p name, or -1 when it is unset or not a number. */
int env_int(const char* name) {
    const char* text = std::getenv(name);
    if (!text || !*text) return -1;
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(text, &end, 10);
    return errno == 0 && *end == '\0' && v >= 0 && v <= 1 << 30 ? static_cast<int>(v) : -1;
}

}  // namespace

std::optional<Launcher> detect_launcher() {
    // Open MPI's mpirun also sets PMIX_RANK: its own variables come first.
    if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
        return Launcher{"Open MPI's mpirun", "OMPI_COMM_WORLD_SIZE", env_int("OMPI_COMM_WORLD_SIZE"),
                        env_int("OMPI_COMM_WORLD_RANK")};
    }
    if (std::getenv("PMI_SIZE")) {
        return Launcher{"a PMI launcher such as MPICH's mpiexec (hydra) or srun --mpi=pmi2", "PMI_SIZE",
                        env_int("PMI_SIZE"), env_int("PMI_RANK")};
    }
    if (std::getenv("PMIX_RANK")) {
        return Launcher{"a PMIx launcher such as prterun or srun --mpi=pmix", "PMIX_RANK", -1,
                        env_int("PMIX_RANK")};
    }
    return std::nullopt;
}

}  // namespace loom::perftest
