/** loom_perftest built without MPI: it says so when an MPI launcher starts it. */
#include "mpi_oob.h"

#include <cstdio>
#include <string>

namespace loom::perftest {

std::string mpi_library() { return {}; }

MpiJob join_mpi_job(const Launcher& launcher, int& /*argc*/, char**& /*argv*/) {
    // Without this, both processes would start as servers and the second one fail with
    // "address already in use".
    if (launcher.rank <= 0) {
        const std::string shown = launcher.variable.empty() ? "" : " (" + launcher.variable + " is set)";
        std::fprintf(stderr,
                     "loom_perftest: started by %s%s, but this loom_perftest was built without MPI (the MPI "
                     "line of configure's summary says why; Debian: libopenmpi-dev). Run a server and a "
                     "client by hand instead (loom_perftest -h)\n",
                     launcher.name.c_str(), shown.c_str());
    }
    return {};
}

}  // namespace loom::perftest
