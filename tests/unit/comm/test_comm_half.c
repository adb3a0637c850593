/* 16-bit (bf16, fp16) collectives over real processes at world 1, 2 and 4: all-reduce
 * and reduce-scatter, SUM and AVG, on
 *  - integer-valued data whose every partial sum is exact in 16 bits: the result is
 *    exact whatever the order, so it compares bitwise with the reference;
 *  - arbitrary data: all-reduce leaves the same bits on every rank, and every element
 *    is within world * u * sum|x_r| (+ a subnormal slack) of the fp32 sum rounded once,
 *    where u is the unit roundoff (2^-8 bf16, 2^-11 fp16): each of the world - 1
 *    additions rounds once, the reference rounds once. AVG is the SUM's bits scaled by
 *    1/world (exactly: the worlds here are powers of two);
 * and all-gather / broadcast of 16-bit payloads, NaN bit patterns included, as bytes.
 * Counts 1, 3 and 1000003 (the Gloo ring moves 1 MiB segments: 524288 elements, so the
 * last one is partial) and a reduce-scatter shard of 2500001 (more segments per ring
 * step than its four scratch buffers). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "comm_test_util.h"
#include "kernels.h"
#include "tensor_half.h"

static const ds_dtype kTypes[] = {DS_BF16, DS_F16};


/* Unit roundoff of the format: half the spacing of the numbers in [1, 2). */
static double unit_roundoff(ds_dtype dt) { return dt == DS_BF16 ? 0x1p-8 : 0x1p-11; }

static uint32_t mix(int r, size_t i) {
    return (uint32_t)i * 2654435761u ^ (uint32_t)(r + 1) * 40503u;
}

/* Integers in [-32, 32]: partial sums over 4 ranks stay within 128, exact in bf16's 8
 * significant bits, and so are their quarters (the average). */
static float exact_val(int r, size_t i) { return (float)(int)(mix(r, i) % 65u) - 32.0f; }

/* Arbitrary signs and magnitudes from about 1e-4 to 1e3. */
static float noisy_val(int r, size_t i) {
    return sinf((float)i * 0.37f + (float)r) * 1e3f / (float)(mix(r, i) % 9973u + 1u);
}

typedef float (*val_fn)(int r, size_t i);

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    RANK_CHECK(p != NULL, "out of memory");
    return p;
}

/* Rank r's 16-bit input: elements [first, first + n) of its stream. */
static uint16_t *make_input(ds_dtype dt, val_fn f, int r, size_t first, size_t n) {
    float *x = xmalloc(n * sizeof *x);
    uint16_t *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) x[i] = f(r, first + i);
    ds_half_from_f32(ds_half_of(dt), h, x, n);
    free(x);
    return h;
}

/* The reference over elements [first, first + n): the fp32 sum of every rank's 16-bit
 * input rounded once to 16 bits (want), and the sum of magnitudes (for the bound). */
typedef struct ref {
    uint16_t *want;
    float *abssum;
} ref;

static ref make_ref(ds_dtype dt, val_fn f, int world, size_t first, size_t n) {
    float *sum = xmalloc(n * sizeof *sum), *x = xmalloc(n * sizeof *x);
    ref R = {.want = xmalloc(n * sizeof *R.want), .abssum = xmalloc(n * sizeof *R.abssum)};
    for (size_t i = 0; i < n; i++) sum[i] = R.abssum[i] = 0;
    for (int r = 0; r < world; r++) {
        uint16_t *h = make_input(dt, f, r, first, n);
        ds_half_to_f32(ds_half_of(dt), x, h, n);
        for (size_t i = 0; i < n; i++) {
            sum[i] += x[i];
            R.abssum[i] += fabsf(x[i]);
        }
        free(h);
    }
    ds_half_from_f32(ds_half_of(dt), R.want, sum, n);
    free(sum);
    free(x);
    return R;
}

static void free_ref(ref *R) {
    free(R->want);
    free(R->abssum);
}

/* exact: the bits of want; else within the bound of want. */
static void check_result(ds_dtype dt, const uint16_t *got, const ref *R, size_t n, int world,
                         int exact, const char *what) {
    float *g = xmalloc(n * sizeof *g), *w = xmalloc(n * sizeof *w);
    ds_half_to_f32(ds_half_of(dt), g, got, n);
    ds_half_to_f32(ds_half_of(dt), w, R->want, n);
    for (size_t i = 0; i < n; i++) {
        if (exact) {
            RANK_CHECK(got[i] == R->want[i], "%s %s n=%zu i=%zu: %g != %g", what,
                       ds_dtype_name(dt), n, i, (double)g[i], (double)w[i]);
            continue;
        }
        double bound = world * unit_roundoff(dt) * R->abssum[i] * 1.05 + world * 0x1p-24;
        RANK_CHECK(fabs((double)g[i] - (double)w[i]) <= bound,
                   "%s %s n=%zu i=%zu: %g vs %g, bound %g", what, ds_dtype_name(dt), n, i,
                   (double)g[i], (double)w[i], bound);
    }
    free(g);
    free(w);
}

/* AVG must be the SUM's bits scaled by 1/world. */
static void check_avg(ds_dtype dt, const uint16_t *avg, const uint16_t *sum, size_t n,
                      int world, const char *what) {
    uint16_t *want = xmalloc(n * sizeof *want);
    memcpy(want, sum, n * sizeof *want);
    ds_half_scale(ds_half_of(dt), want, 1.0f / (float)world, n);
    for (size_t i = 0; i < n; i++)
        RANK_CHECK(avg[i] == want[i], "%s avg %s n=%zu i=%zu: %04x != %04x", what,
                   ds_dtype_name(dt), n, i, avg[i], want[i]);
    free(want);
}

/* Every rank holds the same bits: gather everyone's result and compare. */
static void check_same_everywhere(ds_comm *c, const uint16_t *b, size_t n, int world) {
    ds_err err = {{0}};
    uint16_t *all = xmalloc(n * (size_t)world * sizeof *all);
    RANK_CHECK(ds_comm_allgather(c, b, all, n, DS_F16, &err) == 0, "%s", err.msg);
    for (int r = 0; r < world; r++)
        RANK_CHECK(memcmp(all + (size_t)r * n, b, n * sizeof *b) == 0,
                   "rank %d's all-reduce bits differ (n=%zu)", r, n);
    free(all);
}

static void allreduce_case(ds_comm *c, ds_dtype dt, val_fn f, int exact, size_t n) {
    int rank = ds_comm_rank(c), world = ds_comm_size(c);
    ds_err err = {{0}};
    uint16_t *sum = make_input(dt, f, rank, 0, n), *avg = make_input(dt, f, rank, 0, n);
    RANK_CHECK(ds_comm_allreduce(c, sum, n, dt, DS_COMM_SUM, &err) == 0, "%s", err.msg);
    ds_comm_handle *h = ds_comm_iallreduce(c, avg, n, dt, DS_COMM_AVG, &err);
    RANK_CHECK(h != NULL, "%s", err.msg);
    RANK_CHECK(ds_comm_wait(h, &err) == 0, "%s", err.msg);
    ref R = make_ref(dt, f, world, 0, n);
    check_result(dt, sum, &R, n, world, exact, "allreduce");
    check_avg(dt, avg, sum, n, world, "allreduce");
    check_same_everywhere(c, sum, n, world);
    check_same_everywhere(c, avg, n, world);
    free_ref(&R);
    free(sum);
    free(avg);
}

/* SUM out of place, AVG in place. */
static void reduce_scatter_case(ds_comm *c, ds_dtype dt, val_fn f, int exact, size_t shard) {
    int rank = ds_comm_rank(c), world = ds_comm_size(c);
    ds_err err = {{0}};
    size_t n = shard * (size_t)world;
    uint16_t *in = make_input(dt, f, rank, 0, n), *sum = xmalloc(shard * sizeof *sum);
    RANK_CHECK(ds_comm_reduce_scatter(c, in, sum, shard, dt, DS_COMM_SUM, &err) == 0, "%s",
               err.msg);
    free(in);
    in = make_input(dt, f, rank, 0, n);
    uint16_t *avg = in + (size_t)rank * shard;
    RANK_CHECK(ds_comm_reduce_scatter(c, in, avg, shard, dt, DS_COMM_AVG, &err) == 0, "%s",
               err.msg);
    ref R = make_ref(dt, f, world, (size_t)rank * shard, shard);
    check_result(dt, sum, &R, shard, world, exact, "reduce-scatter");
    check_avg(dt, avg, sum, shard, world, "reduce-scatter");
    free_ref(&R);
    free(in);
    free(sum);
}

/* Payload bits that are not numbers must travel untouched too. */
static uint16_t payload(int r, size_t k) {
    return (uint16_t)(0x7E01u + (unsigned)r * 977u + k * 31u);
}

static void payload_case(ds_comm *c, ds_dtype dt, size_t shard) {
    int rank = ds_comm_rank(c), world = ds_comm_size(c);
    ds_err err = {{0}};
    uint16_t *in = xmalloc(shard * 2), *out = xmalloc(shard * 2 * (size_t)world);
    for (size_t k = 0; k < shard; k++) in[k] = payload(rank, k);
    RANK_CHECK(ds_comm_allgather(c, in, out, shard, dt, &err) == 0, "%s", err.msg);
    for (int r = 0; r < world; r++)
        for (size_t k = 0; k < shard; k++)
            RANK_CHECK(out[(size_t)r * shard + k] == payload(r, k), "allgather r=%d k=%zu", r, k);
    int root = world - 1;
    RANK_CHECK(ds_comm_broadcast(c, in, shard, dt, root, &err) == 0, "%s", err.msg);
    for (size_t k = 0; k < shard; k++)
        RANK_CHECK(in[k] == payload(root, k), "broadcast k=%zu", k);
    free(in);
    free(out);
}

static int half_rank(rank_env *env) {
    ds_comm *c = rank_open(env);
    static const size_t sizes[] = {1, 3, 1000003};
    for (size_t t = 0; t < 2; t++) {
        ds_dtype dt = kTypes[t];
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            allreduce_case(c, dt, exact_val, 1, sizes[s]);
            allreduce_case(c, dt, noisy_val, 0, sizes[s]);
            reduce_scatter_case(c, dt, exact_val, 1, sizes[s]);
            reduce_scatter_case(c, dt, noisy_val, 0, sizes[s]);
            payload_case(c, dt, sizes[s]);
        }
    }
    reduce_scatter_case(c, DS_BF16, exact_val, 1, 2500001);
    reduce_scatter_case(c, DS_F16, noisy_val, 0, 2500001);
    ds_comm_close(c);
    return 0;
}

static void test_half_world1(void **state) {
    (void)state;
    assert_int_equal(run_ranks(1, 1, 20000, 120, half_rank, NULL), 0);
}

static void test_half_world2(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, 20000, 120, half_rank, NULL), 0);
}

static void test_half_world4(void **state) {
    (void)state;
    assert_int_equal(run_ranks(4, 4, 20000, 120, half_rank, NULL), 0);
}

/* fp16 overflow is the sum's, not an error: 65504 on two ranks is inf; inf stays inf. */
static int overflow_rank(rank_env *env) {
    ds_comm *c = rank_open(env);
    int world = ds_comm_size(c);
    ds_err err = {{0}};
    uint16_t big[3] = {0x7BFF, 0x3C00, 0x7C00}; /* fp16 65504, 1, +inf */
    RANK_CHECK(ds_comm_allreduce(c, big, 3, DS_F16, DS_COMM_SUM, &err) == 0, "%s", err.msg);
    RANK_CHECK(big[0] == 0x7C00, "65504 * %d = %04x, not inf", world, big[0]);
    RANK_CHECK(big[1] == (world == 2 ? 0x4000 : 0x4400), "1 * %d = %04x", world, big[1]);
    RANK_CHECK(big[2] == 0x7C00, "inf * %d = %04x", world, big[2]);
    ds_comm_close(c);
    return 0;
}

static void test_half_overflow(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, 20000, 60, overflow_rank, NULL), 0);
    assert_int_equal(run_ranks(4, 4, 20000, 60, overflow_rank, NULL), 0);
}

/* The checks that used to refuse 16-bit reductions now refuse only what is wrong. */
static void test_half_args(void **state) {
    (void)state;
    ds_context ctx;
    ds_context_single(&ctx);
    ds_err err = {{0}};
    ds_comm *c = ds_comm_open(&ctx, &err);
    assert_non_null(c);
    uint16_t b[2] = {0x3F80, 0x4000};
    assert_int_equal(ds_comm_allreduce(c, b, 2, DS_BF16, DS_COMM_AVG, &err), 0);
    assert_int_equal(b[0], 0x3F80); /* the average over one rank is the value itself */
    assert_int_equal(ds_comm_allreduce(c, b, 2, DS_F16, (ds_comm_reduce)7, &err), -1);
    assert_non_null(strstr(err.msg, "unknown reduction"));
    assert_int_equal(ds_comm_allreduce(c, b, 2, DS_I32, DS_COMM_AVG, &err), -1);
    assert_non_null(strstr(err.msg, "int32"));
    ds_comm_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_args),
        cmocka_unit_test(test_half_world1),
        cmocka_unit_test(test_half_world2),
        cmocka_unit_test(test_half_world4),
        cmocka_unit_test(test_half_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
