/* Time compiled CSR SpMV kernel libraries (``ij,j->i``, csr x dense, float64, int32 indices)
 * against SciPy's loop (csr_matvec, written out here) in one C process: no Python call, no
 * result allocation, the min of many calls each, so a shared machine's load moves the
 * ratios little.  Used for docs/performance.md "Where the guarded SpMV's time goes".
 *
 *   python -c "import sparsecc as sc, numpy as np, scipy.sparse as sp; \
 *              A = sp.random_array((99, 99), density=0.1, format='csr'); \
 *              A.indices = A.indices.astype(np.int32); A.indptr = A.indptr.astype(np.int32); \
 *              sc.compile('ij,j->i', 'csr', 'dense')(A, np.ones(99))"     # (SPARSECC_CACHE_DIR=DIR)
 *   gcc -O2 -march=native -ffp-contract=off benchmarks/spmv_harness.c -o /tmp/spmv_harness -ldl
 *   LD_LIBRARY_PATH=$(python -c "import importlib.metadata as m; \
 *       print(m.distribution('cmeel-libomp').locate_file('cmeel.prefix/lib'))") \
 *       /tmp/spmv_harness ROWS CALLS DIR/<key>.so [more libraries ...]
 *
 * Each row holds 10 uniformly random columns; every library's first result must equal the
 * written-out loop's bit for bit (same order of additions).  A library runs on the thread
 * count it was loaded with (its sparsecc_num_threads global: 1).  The argument block is the
 * one runtime/memref.py packs for this kernel: the two sizes, pos/crd/val descriptors, the
 * storage specifier {lvlSizes[2], memSizes[3]}, x and the output. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { void *alloc, *aligned; int64_t offset, size, stride; } desc;
typedef int (*entry_t)(void **);

__attribute__((noinline)) static void scipy_loop(int64_t m, const int32_t *Ap, const int32_t *Aj, const double *Ax,
                                                 const double *X, double *Y) {
    for (int64_t i = 0; i < m; i++) {
        double s = Y[i];
        for (int32_t jj = Ap[i]; jj < Ap[i + 1]; jj++) s += Ax[jj] * X[Aj[jj]];
        Y[i] = s;
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static uint64_t state = 88172645463325252ull;
static uint64_t next(void) { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state; }

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s ROWS CALLS LIBRARY.so [...]\n", argv[0]); return 2; }
    int64_t m = atol(argv[1]), per = 10, nnz = m * per;
    int calls = atoi(argv[2]), nlib = argc - 3;
    int32_t *pos = malloc(4 * (m + 1)), *crd = malloc(4 * nnz);
    double *val = malloc(8 * nnz), *x = malloc(8 * m), *y = malloc(8 * m), *ref = malloc(8 * m);
    for (int64_t i = 0; i <= m; i++) pos[i] = (int32_t)(i * per);
    for (int64_t p = 0; p < nnz; p++) { crd[p] = (int32_t)(next() % m); val[p] = (next() % 1000) / 1000.0; }
    for (int64_t i = 0; i < m; i++) x[i] = (next() % 1000) / 7.0;
    entry_t *fns = malloc(sizeof(entry_t) * nlib);
    for (int l = 0; l < nlib; l++) {
        void *h = dlopen(argv[3 + l], RTLD_NOW | RTLD_LOCAL);
        if (!h || !(fns[l] = (entry_t)dlsym(h, "sparsecc_entry"))) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    }
    int64_t si = m, sj = m, spec[5] = {m, m, m + 1, nnz, nnz};
    desc dp = {pos, pos, 0, m + 1, 1}, dc = {crd, crd, 0, nnz, 1}, dv = {val, val, 0, nnz, 1};
    desc dx = {x, x, 0, m, 1}, dy = {y, y, 0, m, 1};
    void *args[8] = {&si, &sj, &dp, &dc, &dv, spec, &dx, &dy};
    double *best = malloc(sizeof(double) * (nlib + 1));
    for (int v = 0; v <= nlib; v++) best[v] = 1e30;
    memset(ref, 0, 8 * m);
    scipy_loop(m, pos, crd, val, x, ref);
    for (int r = 0; r < calls; r++)
        for (int v = 0; v <= nlib; v++) {           /* interleaved: every library in each round */
            memset(y, 0, 8 * m);                     /* the runtime hands a zeroed output */
            double t = now();
            int rc = v ? fns[v - 1](args) : (scipy_loop(m, pos, crd, val, x, y), 0);
            t = now() - t;
            if (t < best[v]) best[v] = t;
            if (r == 0 && (rc || memcmp(y, ref, 8 * m))) { fprintf(stderr, "%s: wrong result (rc %d)\n", v ? argv[2 + v] : "loop", rc); return 1; }
        }
    for (int v = 0; v <= nlib; v++)
        printf("%8ld rows  %-48s %9.1f us  %.3f x SciPy's loop\n", (long)m, v ? argv[2 + v] : "SciPy's loop (gcc)",
               best[v] * 1e6, best[v] / best[0]);
    return 0;
}
