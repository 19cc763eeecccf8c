/* An MPI check for the drop-in library (crates/roce-cli/tests/mpi.rs,
 * docs/dropin.md "MPI").
 *
 *   mpi_check [MAX_SIZE [ITERS [ALLREDUCE_BYTES [ALLTOALL_BYTES]]]]
 *
 * Ranks 0 and 1 ping-pong messages of 1 B, 2 B, 4 B ... MAX_SIZE
 * (default 4 MiB), ITERS round trips each (default 100; fewer above
 * 64 KiB), and print the one-way latency in OSU's form (osu_latency:
 * half the round trip, µs); then they stream windows of 64 messages of
 * each size from 0 to 1 (osu_bw: bytes sent over the time until the
 * receiver's acknowledgement, MB/s = 10^6 bytes per second). Every rank
 * then does an MPI_Allreduce (sum) of ALLREDUCE_BYTES of doubles
 * (default 8 MiB) whose values are integers, so the sum is exact and
 * checked element by element, and an MPI_Alltoall of ALLTOALL_BYTES per
 * destination (default 1 MiB) whose every word names its source,
 * destination and position. Ping-pong payloads are checked too. Exit
 * status 0 only when every check passed on every rank; mismatches are
 * reported on stderr.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static int rank, nranks;

static long arg(int argc, char **argv, int i, long dflt)
{
    return argc > i ? strtol(argv[i], NULL, 0) : dflt;
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(seed + i * 7);
}

static long check_bytes(const unsigned char *b, size_t n, unsigned seed,
                        const char *what, size_t size)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(seed + i * 7)) {
            fprintf(stderr, "rank %d: %s size %zu: byte %zu is %u, not %u\n",
                    rank, what, size, i, b[i],
                    (unsigned char)(seed + i * 7));
            return 1;
        }
    return 0;
}

static long iters_for(size_t size, long iters)
{
    if (size > 65536) {
        long n = iters / 10;
        return n < 2 ? 2 : n;
    }
    return iters;
}

/* osu_latency: one-way latency, half the average round trip. */
static long latency(size_t max, long iters, unsigned char *s, unsigned char *r)
{
    long bad = 0;
    if (rank == 0)
        printf("# OSU-style MPI Latency Test (mpi_check, %d ranks)\n"
               "# Size          Latency (us)\n", nranks);
    for (size_t size = 1; size <= max; size *= 2) {
        /* Warm-up round trips first (OSU skips 100, 10 above 8 KiB;
         * fewer here to keep the tests short): UCX wires up its lanes
         * on the first messages. */
        long n = iters_for(size, iters), warm = size > 8192 ? 2 : 10;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            fill(s, size, (unsigned)size);
            for (long i = 0; i < n + warm; i++) {
                if (i == warm)
                    t0 = MPI_Wtime();
                MPI_Send(s, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(r, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            }
            double us = (MPI_Wtime() - t0) * 1e6 / (2.0 * n);
            bad += check_bytes(r, size, (unsigned)size + 1, "pong", size);
            printf("%-10zu%18.2f\n", size, us);
            fflush(stdout);
        } else if (rank == 1) {
            fill(s, size, (unsigned)size + 1);
            for (long i = 0; i < n + warm; i++) {
                MPI_Recv(r, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                MPI_Send(s, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
            bad += check_bytes(r, size, (unsigned)size, "ping", size);
        }
    }
    return bad;
}

/* osu_bw: windows of WINDOW non-blocking sends, then an acknowledgement. */
static long bandwidth(size_t max, long iters, unsigned char *s, unsigned char *r)
{
    long bad = 0;
    MPI_Request req[WINDOW];
    MPI_Status st[WINDOW];
    char ack = 0;
    if (rank == 0)
        printf("# OSU-style MPI Bandwidth Test (mpi_check, %d ranks)\n"
               "# Size      Bandwidth (MB/s)\n", nranks);
    for (size_t size = 1; size <= max; size *= 2) {
        long n = iters_for(size, iters) / 5 + 1, warm = 1;
        /* Each message of the window has its own slice of the buffer
         * when it fits, as osu_bw's do not (they share one). */
        size_t stride = size * WINDOW <= max ? size : 0;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            fill(s, stride ? size * WINDOW : size, (unsigned)size + 2);
            for (long i = 0; i < n + warm; i++) {
                if (i == warm)
                    t0 = MPI_Wtime();
                for (int w = 0; w < WINDOW; w++)
                    MPI_Isend(s + w * stride, (int)size, MPI_BYTE, 1, 2,
                              MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(WINDOW, req, st);
                MPI_Recv(&ack, 1, MPI_CHAR, 1, 3, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            }
            double secs = MPI_Wtime() - t0;
            printf("%-10zu%18.2f\n", size,
                   (double)size * WINDOW * n / secs / 1e6);
            fflush(stdout);
        } else if (rank == 1) {
            for (long i = 0; i < n + warm; i++) {
                memset(r, 0, stride ? size * WINDOW : size);
                for (int w = 0; w < WINDOW; w++)
                    MPI_Irecv(r + w * stride, (int)size, MPI_BYTE, 0, 2,
                              MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(WINDOW, req, st);
                MPI_Send(&ack, 1, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
            }
            /* With a slice each, the whole window is the pattern. */
            bad += check_bytes(r, stride ? size * WINDOW : size,
                               (unsigned)size + 2, "bw", size);
        }
    }
    return bad;
}

/* Rank r contributes (r + 1) * (i % 1024) + r at i: integers far below
 * 2^53, so the sum is exact in any order. */
static long allreduce(size_t bytes)
{
    size_t n = bytes / sizeof(double);
    double *in = malloc(n * sizeof(double)), *out = malloc(n * sizeof(double));
    long bad = 0;
    if (!in || !out) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        in[i] = (double)(rank + 1) * (double)(i % 1024) + rank;
        out[i] = -1;
    }
    double t0 = MPI_Wtime();
    MPI_Allreduce(in, out, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double secs = MPI_Wtime() - t0;
    double p = nranks;
    for (size_t i = 0; i < n; i++) {
        double want = (double)(i % 1024) * p * (p + 1) / 2 + p * (p - 1) / 2;
        if (out[i] != want) {
            if (bad < 5)
                fprintf(stderr, "rank %d: allreduce element %zu is %.17g, not %.17g\n",
                        rank, i, out[i], want);
            bad++;
        }
    }
    if (rank == 0) {
        printf("# MPI_Allreduce sum of %zu doubles (%zu bytes): %.2f ms\n",
               n, n * sizeof(double), secs * 1e3);
        fflush(stdout);
    }
    free(in);
    free(out);
    return bad;
}

static uint32_t word(int src, int dst, size_t k)
{
    return (uint32_t)src * 0x01000193u ^ (uint32_t)dst * 0x9e3779b9u ^ (uint32_t)k;
}

/* Block d of rank s's send buffer goes to rank d: word(s, d, k). */
static long alltoall(size_t bytes)
{
    size_t m = bytes / sizeof(uint32_t);
    size_t total = m * (size_t)nranks;
    uint32_t *in = malloc(total * sizeof(uint32_t));
    uint32_t *out = malloc(total * sizeof(uint32_t));
    long bad = 0;
    if (!in || !out) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        return 1;
    }
    for (int d = 0; d < nranks; d++)
        for (size_t k = 0; k < m; k++)
            in[(size_t)d * m + k] = word(rank, d, k);
    memset(out, 0, total * sizeof(uint32_t));
    double t0 = MPI_Wtime();
    MPI_Alltoall(in, (int)m, MPI_UINT32_T, out, (int)m, MPI_UINT32_T,
                 MPI_COMM_WORLD);
    double secs = MPI_Wtime() - t0;
    for (int s = 0; s < nranks; s++)
        for (size_t k = 0; k < m; k++)
            if (out[(size_t)s * m + k] != word(s, rank, k)) {
                if (bad < 5)
                    fprintf(stderr,
                            "rank %d: alltoall word %zu from rank %d is %#x, not %#x\n",
                            rank, k, s, out[(size_t)s * m + k], word(s, rank, k));
                bad++;
            }
    if (rank == 0) {
        printf("# MPI_Alltoall of %zu bytes per rank pair: %.2f ms\n",
               m * sizeof(uint32_t), secs * 1e3);
        fflush(stdout);
    }
    free(in);
    free(out);
    return bad;
}

int main(int argc, char **argv)
{
    size_t max = (size_t)arg(argc, argv, 1, 4 << 20);
    long iters = arg(argc, argv, 2, 100);
    size_t ar = (size_t)arg(argc, argv, 3, 8 << 20);
    size_t a2a = (size_t)arg(argc, argv, 4, 1 << 20);

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks < 2) {
        if (rank == 0)
            fprintf(stderr, "mpi_check needs at least 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    size_t buf = max;
    unsigned char *s = malloc(buf), *r = malloc(buf);
    if (!s || !r) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long bad = 0;
    bad += latency(max, iters, s, r);
    bad += bandwidth(max, iters, s, r);
    bad += allreduce(ar);
    bad += alltoall(a2a);

    long all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# mpi_check: %d ranks, %s (%ld mismatches)\n", nranks,
               all ? "FAILED" : "all checks passed", all);
    free(s);
    free(r);
    MPI_Finalize();
    return all ? 1 : 0;
}
