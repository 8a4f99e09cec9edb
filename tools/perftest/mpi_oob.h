/**
 * loom_perftest under an MPI launcher (mpirun -np 2): MPI carries what the TCP
 * out-of-band connection carries otherwise (parameters, addresses, rkeys, barriers),
 * never anything inside a measured loop. Rank 0 is the client (it measures and prints
 * the results), rank 1 the server.
 *
 * Only this tool links MPI, and only when configure found it (mpi_oob.cc); a build
 * without MPI gets mpi_oob_none.cc, which explains why it cannot run under a launcher.
 * Nothing here calls MPI_Init unless a launcher started the process (or -P 1 asks):
 * Open MPI's singleton start is slow and noisy.
 */
#pragma once

#include "oob.h"

#include <memory>
#include <optional>
#include <string>

namespace loom::perftest {

/** An MPI launcher seen in this process's environment (found without any MPI call). */
struct Launcher {
    std::string name;      ///< for messages, e.g. "Open MPI's mpirun"
    std::string variable;  ///< the variable that showed it, e.g. "OMPI_COMM_WORLD_SIZE"; empty for -P 1
    int size = -1;         ///< processes it started; -1 when its environment does not say
    int rank = -1;         ///< this process's rank; -1 when its environment does not say
};

/**
 * The launcher that started this process, if any: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE),
 * a PMI launcher such as MPICH's hydra or srun --mpi=pmi2 (PMI_SIZE), or a PMIx one such
 * as srun --mpi=pmix (PMIX_RANK), looked for in that order.
 */
std::optional<Launcher> detect_launcher();

/** The MPI this loom_perftest was built with, e.g. "Open MPI 4.1.4"; empty in a build without MPI. */
std::string mpi_library();

/** This process's part of a run started by an MPI launcher. */
struct MpiJob {
    std::unique_ptr<Oob> oob;  ///< the channel to the other rank; null when joining failed
    int rank = -1;             ///< 0 (client) or 1 (server)
    int exit_code = 1;         ///< when oob is null: what the process should exit with
};

/**
 * Joins the job @p launcher started (MPI_Init) and checks it has exactly two ranks.
 * Refuses, before MPI_Init, a launcher the MPI library cannot join (a loom_perftest
 * built with Open MPI under MPICH's mpiexec would otherwise start as two unrelated
 * singletons). On failure one line on stderr (from rank 0 only when the rank is known)
 * and a null oob. The returned channel's destructor calls MPI_Finalize; its fail()
 * calls MPI_Abort.
 */
MpiJob join_mpi_job(const Launcher& launcher, int& argc, char**& argv);

}  // namespace loom::perftest
