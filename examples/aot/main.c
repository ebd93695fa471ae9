/* Calls kernels compiled ahead of time by sparsecc (see build.py), with no Python and no MLIR.
 *   python build.py OUTDIR       (builds OUTDIR/libmykernels.so and OUTDIR/mykernels.h), then
 *   cc -std=c99 main.c -I OUTDIR -L OUTDIR -lmykernels '-Wl,-rpath,$ORIGIN' -o OUTDIR/main && OUTDIR/main
 */
#include <stdio.h>
#include "mykernels.h"

int main(void) {
    /* A = [[1 0 2]
     *      [0 3 0]
     *      [4 0 5]] in CSR */
    int32_t indptr[] = {0, 2, 3, 5};
    int32_t indices[] = {0, 2, 1, 0, 2};
    double data[] = {1, 2, 3, 4, 5};
    double x[] = {1, 1, 1};
    double y[3];

    /* y = A x */
    mykernels_spmv(3, 3, indptr, 4, indices, 5, data, 5, x, y);
    printf("spmv: %g %g %g\n", y[0], y[1], y[2]);

    /* C = A A, a sparse result: buffers[0] = row pointers, [1] = column indices, [2] = values */
    mykernels_sparse_result C;
    mykernels_spgemm(3, 3, 3, indptr, 4, indices, 5, data, 5, indptr, 4, indices, 5, data, 5, &C);
    const int32_t *cp = C.buffers[0], *ci = C.buffers[1];
    const double *cv = C.buffers[2];
    printf("spgemm: %lld stored\n", (long long)C.lengths[2]);
    for (int i = 0; i < 3; i++)
        for (int p = cp[i]; p < cp[i + 1]; p++)
            printf("  C[%d,%d] = %g\n", i, ci[p], cv[p]);
    mykernels_free_result(&C);
    return 0;
}
