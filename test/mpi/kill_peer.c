/*
 * A rank dies by SIGKILL while its peers are inside MPI calls with it: rank 1 starts
 * sending rank 0 a large message (rendezvous on every transport) and kills itself before
 * the transfer can finish; rank 0 waits in MPI_Recv. The survivors must not hang: Open
 * MPI and MPICH abort the job (their launcher sees the death) or rank 0's call fails.
 * run_kill_test.sh runs it and checks that the job ends, with a failure, in bounded time.
 */
#include <mpi.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const size_t len = 64u << 20;
    char* buf = malloc(len);
    memset(buf, rank, len);
    /* Everyone is connected and warm first: the death happens mid-traffic, not at start-up. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        MPI_Request req;
        MPI_Isend(buf, (int)len, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &req);
        int flag = 0;
        MPI_Test(&req, &flag, MPI_STATUS_IGNORE); /* the rendezvous request is on its way */
        fprintf(stderr, "kill_peer: rank 1 (pid %d) kills itself with SIGKILL\n", (int)getpid());
        raise(SIGKILL);
    } else if (rank == 0) {
        int rc = MPI_Recv(buf, (int)len, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        fprintf(stderr, "kill_peer: rank 0's MPI_Recv returned %d\n", rc);
        if (rc == MPI_SUCCESS) {
            /* Fine if the whole message really came across before the sender died (a
             * zero-copy get can finish first); a success with wrong bytes is data loss. */
            size_t bad = 0;
            for (size_t i = 0; i < len; ++i) bad += buf[i] != 1;
            fprintf(stderr, "kill_peer: %s\n", bad ? "CORRUPT: the received message is wrong" : "the message arrived whole");
            if (bad) return 3;
        }
        MPI_Finalize();
        return 0;
    }
    /* Other ranks wait for the outcome inside MPI too. */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
