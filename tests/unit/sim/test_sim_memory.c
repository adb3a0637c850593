/* The simulated device's memory: the host cannot read it, allocations are aligned and
 * zeroed (those asked for not zeroed: 0xff, NaN in every float format), a free is stream-ordered (queued work never sees the block reused), running
 * out says how much was asked and what is free, and misuse (a freed buffer, a host
 * pointer, a double free) is reported. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "device.h"
#include "sim_testutil.h"

#define MiB ((size_t)1 << 20)

static void *g_fault_at;

static void on_segv(int sig, siginfo_t *si, void *ctx) {
    (void)sig, (void)ctx;
    /* SEGV_ACCERR: the page is mapped but may not be read (not merely unmapped) */
    _exit(si->si_addr == g_fault_at && si->si_code == SEGV_ACCERR ? 42 : 43);
}

/* A host read of a device pointer faults at once, at that address; the same bytes are
 * there for to_host. */
static void test_host_read_faults(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    float want = 3.5f, got = 0;
    float *p = dev_alloc(d, 64 * sizeof(float));
    dev_put(d, p + 5, &want, sizeof want);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction sa = {0};
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        g_fault_at = p + 5;
        sigaction(SIGSEGV, &sa, NULL);
        volatile float x = *(volatile float *)(p + 5);
        (void)x;
        _exit(0); /* read without a fault: the test fails */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 42);
    dev_get(d, &got, p + 5, sizeof got);
    assert_true(got == want);
    d->ops->free(d, p, 64 * sizeof(float));
    close_sim(d);
}

/* Aligned, zeroed on first use and again when a used block is handed out anew. */
static void test_alloc_aligned_and_zeroed(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    size_t sizes[] = {1, 3, 64, 1000, 4096, MiB + 4};
    unsigned char *p[6];
    for (int i = 0; i < 6; i++) {
        p[i] = dev_alloc(d, sizes[i]);
        assert_int_equal((uintptr_t)p[i] % 64, 0);
    }
    unsigned char *ones = malloc(MiB + 4), *back = malloc(MiB + 4);
    memset(ones, 0x5a, MiB + 4);
    for (int i = 0; i < 6; i++) {
        memset(back, 1, sizes[i]);
        dev_get(d, back, p[i], sizes[i]);
        for (size_t k = 0; k < sizes[i]; k++) assert_int_equal(back[k], 0);
        dev_put(d, p[i], ones, sizes[i]);
    }
    for (int i = 0; i < 6; i++) d->ops->free(d, p[i], sizes[i]);
    dev_sync_ok(d);
    for (int i = 0; i < 6; i++) { /* the same sizes again: the dirty blocks come back */
        unsigned char *q = dev_alloc(d, sizes[i]);
        memset(back, 1, sizes[i]);
        dev_get(d, back, q, sizes[i]);
        for (size_t k = 0; k < sizes[i]; k++) assert_int_equal(back[k], 0);
        d->ops->free(d, q, sizes[i]);
    }
    dev_sync_ok(d);
    free(ones), free(back);
    close_sim(d);
}

/* While work queued before a free has not run, the freed block is not handed out again,
 * and that work reads the buffer as it was; afterwards the block is reused, zeroed. */
static void test_free_is_stream_ordered(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    size_t n = 4 * MiB / sizeof(float);
    float *host = malloc(n * sizeof *host), *back = malloc(n * sizeof *back);
    for (size_t i = 0; i < n; i++) host[i] = (float)i;
    float *a = dev_alloc(d, n * sizeof(float)), *b = dev_alloc(d, n * sizeof(float));
    dev_put(d, a, host, n * sizeof(float));
    latch gate;
    latch_init(&gate);
    ds_err err = {{0}};
    assert_int_equal(d->ops->launch_host(d, NULL, gate_fn, &gate, &err), 0);
    d->ops->copy(d, b, a, n * sizeof(float)); /* queued behind the gate: reads a */
    d->ops->free(d, a, n * sizeof(float));
    ds_device_mem m;
    d->ops->mem_info(d, &m);
    assert_int_equal(m.in_use, n * sizeof(float)); /* a no longer counts */
    assert_true(m.reserved >= 2 * n * sizeof(float)); /* but is still held */
    for (int i = 0; i < 4; i++) { /* new buffers of a's size land elsewhere */
        float *c = dev_alloc(d, n * sizeof(float));
        assert_true(c + n <= a || c >= a + n);
        d->ops->memset0(d, c, n * sizeof(float));
        d->ops->free(d, c, n * sizeof(float));
    }
    latch_set(&gate);
    dev_sync_ok(d);
    dev_get(d, back, b, n * sizeof(float));
    assert_memory_equal(back, host, n * sizeof(float));
    float *again = dev_alloc(d, n * sizeof(float)); /* best fit: a's block, now free */
    assert_ptr_equal(again, a);
    dev_get(d, back, again, n * sizeof(float));
    for (size_t i = 0; i < n; i++) assert_true(back[i] == 0.0f);
    d->ops->free(d, again, n * sizeof(float));
    d->ops->free(d, b, n * sizeof(float));
    dev_sync_ok(d);
    latch_destroy(&gate);
    free(host), free(back);
    close_sim(d);
}

typedef struct late_read {
    ds_device *d;
    float *x;
    uint32_t bits;
} late_read;

static int late_read_fn(void *arg, ds_err *err) {
    (void)err;
    late_read *r = arg;
    memcpy(&r->bits, r->d->ops->alias(r->d, r->x), sizeof r->bits);
    return 0;
}

/* Work that reads a buffer after its free has been reached (here a host function on a
 * second stream) sees NaN bytes, not the buffer's old values. Under AddressSanitizer the
 * freed block is poisoned and that read is ASan's report instead: skipped there. */
static void test_freed_memory_reads_as_nan(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    skip();
#endif
    ds_device *d = open_sim("64MiB", NULL);
    ds_err err = {{0}};
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = 2.0f;
    float *x = dev_alloc(d, sizeof v);
    dev_put(d, x, v, sizeof v);
    d->ops->free(d, x, sizeof v);
    ds_stream *s2 = d->ops->stream_new(d, &err);
    ds_event *e = d->ops->event_new(d, &err);
    d->ops->event_record(d, e, NULL); /* after the free */
    d->ops->stream_wait(d, s2, e);
    late_read r = {d, x, 0};
    assert_int_equal(d->ops->launch_host(d, s2, late_read_fn, &r, &err), 0);
    dev_sync_ok(d);
    assert_int_equal(r.bits, 0xffffffffu);
    d->ops->event_free(d, e);
    d->ops->stream_free(d, s2);
    close_sim(d);
}

static void *dev_alloc_uninit(ds_device *d, size_t bytes) {
    ds_err err = {{0}};
    void *p = d->ops->alloc_uninit(d, bytes, &err);
    if (!p) fprintf(stderr, "alloc_uninit %zu: %s\n", bytes, err.msg);
    assert_non_null(p);
    return p;
}

static void expect_all(const unsigned char *b, size_t n, unsigned char byte) {
    for (size_t k = 0; k < n; k++)
        if (b[k] != byte) fail_msg("byte %zu of %zu is 0x%02x, not 0x%02x", k, n, b[k], byte);
}

/* An allocation not zeroed (alloc_uninit) reads as 0xff bytes, fresh pages and recycled
 * blocks alike (never a block's old values): NaN as fp32, bf16 and fp16, -1 as int32. A
 * kernel that reads it before anything wrote it gives NaN; one that writes it wholly
 * gives its exact values; a zeroed allocation of the same block reads as zeros. */
static void test_uninit_reads_as_poison(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    size_t sizes[] = {4, 1000, MiB + 4}; /* MiB + 4: fresh pages never handed out */
    unsigned char *back = malloc(MiB + 4), *old = malloc(MiB + 4);
    memset(old, 0x5a, MiB + 4);
    float f;
    int32_t id;
    for (int i = 0; i < 3; i++) {
        unsigned char *p = dev_alloc_uninit(d, sizes[i]);
        assert_int_equal((uintptr_t)p % 64, 0);
        dev_get(d, back, p, sizes[i]);
        expect_all(back, sizes[i], 0xff);
        memcpy(&f, back, sizeof f), memcpy(&id, back, sizeof id);
        assert_true(isnan(f));
        assert_int_equal(id, -1);
        dev_put(d, p, old, sizes[i]); /* then freed and, once reclaimed, handed out again */
        d->ops->free(d, p, sizes[i]);
        dev_sync_ok(d);
        unsigned char *q = dev_alloc_uninit(d, sizes[i]);
        assert_ptr_equal(q, p);
        dev_get(d, back, q, sizes[i]);
        expect_all(back, sizes[i], 0xff);
        dev_put(d, q, old, sizes[i]);
        d->ops->free(d, q, sizes[i]);
        dev_sync_ok(d);
        q = dev_alloc(d, sizes[i]);
        assert_ptr_equal(q, p);
        dev_get(d, back, q, sizes[i]);
        expect_all(back, sizes[i], 0);
        d->ops->free(d, q, sizes[i]);
        dev_sync_ok(d);
    }

    enum { N = 256 };
    float ones[N], got[N];
    for (int i = 0; i < N; i++) ones[i] = 1.0f;
    float *a = dev_alloc_uninit(d, sizeof ones), *b = dev_alloc_uninit(d, sizeof ones);
    float *out = dev_alloc_uninit(d, sizeof ones);
    dev_put(d, b, ones, sizeof ones);
    d->k->add_forward(out, a, b, N); /* a read before any write */
    dev_get(d, got, out, sizeof got);
    for (int i = 0; i < N; i++) assert_true(isnan(got[i]));
    d->k->add_forward(out, b, b, N); /* out written wholly */
    dev_get(d, got, out, sizeof got);
    for (int i = 0; i < N; i++) assert_true(got[i] == 2.0f);
    uint16_t *h = dev_alloc_uninit(d, N * sizeof(uint16_t));
    for (int fmt = DS_HALF_BF16; fmt <= DS_HALF_F16; fmt++) { /* 16-bit formats: NaN too */
        d->k->half_to_f32((ds_half)fmt, out, h, N);
        dev_get(d, got, out, sizeof got);
        for (int i = 0; i < N; i++) assert_true(isnan(got[i]));
    }
    d->ops->free(d, h, N * sizeof(uint16_t));
    d->ops->free(d, a, sizeof ones), d->ops->free(d, b, sizeof ones), d->ops->free(d, out, sizeof ones);
    dev_sync_ok(d);
    free(back), free(old);
    close_sim(d);
}

/* An allocation that fits only once the queued frees have run waits for them. */
static void test_alloc_waits_for_queued_frees(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    ds_err err = {{0}};
    void *a = dev_alloc(d, 40 * MiB);
    assert_int_equal(d->ops->launch_host(d, NULL, slow_fn, NULL, &err), 0);
    d->ops->free(d, a, 40 * MiB);
    void *b = dev_alloc(d, 40 * MiB);
    d->ops->free(d, b, 40 * MiB);
    dev_sync_ok(d);
    close_sim(d);
}

/* Out of memory: NULL and a message with the bytes asked, the bytes free and the
 * largest free block (here smaller than what is free: the memory is fragmented). */
static void test_out_of_memory_message(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    void *a = dev_alloc(d, 16 * MiB), *b = dev_alloc(d, 16 * MiB), *c = dev_alloc(d, 16 * MiB);
    d->ops->free(d, b, 16 * MiB);
    dev_sync_ok(d);
    ds_err err = {{0}};
    assert_null(d->ops->alloc(d, 20 * MiB, &err));
    assert_non_null(strstr(err.msg, "out of memory"));
    assert_non_null(strstr(err.msg, "20.00 MiB asked (20971520 bytes)"));
    assert_non_null(strstr(err.msg, "free of 64.00 MiB"));
    const char *lf = strstr(err.msg, "largest free block");
    assert_non_null(lf);
    const char *paren = strchr(lf, '(');
    assert_non_null(paren);
    size_t largest = strtoull(paren + 1, NULL, 10);
    ds_device_mem m;
    d->ops->mem_info(d, &m);
    assert_true(largest >= 16 * MiB && largest < 20 * MiB);
    assert_true(m.free >= 20 * MiB);
    assert_int_equal(m.total, 64 * MiB);
    assert_int_equal(m.in_use, 32 * MiB);
    /* nothing changed: what fits still fits */
    void *e = dev_alloc(d, 16 * MiB);
    d->ops->free(d, e, 16 * MiB);
    assert_null(d->ops->alloc(d, 65 * MiB, &err));
    assert_non_null(strstr(err.msg, "65.00 MiB asked"));
    d->ops->free(d, a, 16 * MiB);
    d->ops->free(d, c, 16 * MiB);
    dev_sync_ok(d);
    d->ops->mem_info(d, &m);
    assert_int_equal(m.in_use, 0);
    assert_int_equal(m.free, 64 * MiB);
    close_sim(d);
}

/* A kernel on a buffer freed before its launch fails at the next sync, for good. */
static void test_use_after_free_reported(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    float *x = dev_alloc(d, 100 * sizeof(float));
    d->ops->free(d, x, 100 * sizeof(float));
    d->k->scale(x, 2.0f, 100);
    /* "freed before this call", or "free device memory" once the free has been reached */
    expect_sync_error(d, "kernel scale: argument x: ");
    expect_sync_error(d, "freed");
    close_sim(d);
}

static void test_double_free_reported(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    float *x = dev_alloc(d, 100 * sizeof(float));
    d->ops->free(d, x, 100 * sizeof(float));
    d->ops->free(d, x, 100 * sizeof(float));
    expect_sync_error(d, "not the start of an allocation (freed twice");
    close_sim(d);
}

/* free's size is the size asked: a mismatch is an accounting bug in the caller. */
static void test_free_size_mismatch_reported(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    float *x = dev_alloc(d, 100 * sizeof(float));
    d->ops->free(d, x, 99 * sizeof(float));
    expect_sync_error(d, "the allocation asked for 400 bytes");
    close_sim(d);
}

/* Copies name which side is wrong; the device stays usable (these fail at once). */
static void test_copy_misuse(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    float host[16] = {0}, *x = dev_alloc(d, sizeof host), *y = dev_alloc(d, sizeof host);
    ds_err err = {{0}};
    assert_int_equal(d->ops->to_host(d, host, host, sizeof host, &err), -1);
    assert_non_null(strstr(err.msg, "to_host: source"));
    assert_non_null(strstr(err.msg, "is not device memory"));
    assert_int_equal(d->ops->to_host(d, y, x, sizeof host, &err), -1);
    assert_non_null(strstr(err.msg, "is device memory"));
    assert_int_equal(d->ops->from_host(d, x, host, sizeof host + 4, &err), -1);
    assert_non_null(strstr(err.msg, "runs past the end of its allocation (64 bytes"));
    dev_put(d, x, host, sizeof host);
    d->ops->copy(d, y, x, sizeof host);
    dev_sync_ok(d);
    d->ops->copy(d, y, host, sizeof host); /* queued: reported at the next sync */
    expect_sync_error(d, "copy: source");
    close_sim(d);
}

/* alias() is the address a stream's host function uses; host pointers pass unchanged. */
static void test_alias(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    float *x = dev_alloc(d, 16 * sizeof(float)), v = 7.0f, host = 1.0f;
    dev_put(d, x + 3, &v, sizeof v);
    dev_sync_ok(d);
    float *a = d->ops->alias(d, x);
    assert_true(a != x);
    assert_true(a[3] == 7.0f);
    assert_ptr_equal(d->ops->alias(d, &host), &host);
    assert_null(d->ops->alias(d, NULL));
    d->ops->free(d, x, 16 * sizeof(float));
    close_sim(d);
}

/* Under AddressSanitizer the alias is poisoned outside live allocations, so a kernel that
 * reads past its buffer (here an embedding id beyond the table, an extent the launch
 * check cannot know) is reported by ASan in the stream's thread. Other builds skip. */
static void test_asan_sees_overrun_through_alias(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* its own device: a child inherits no stream threads */
        dup2(pfd[1], 2);
        close(pfd[0]);
        signal(SIGSEGV, SIG_DFL);
        ds_device *d = open_sim("64MiB", NULL);
        int32_t ids[2] = {0, 4}; /* the table has 4 rows */
        float *table = dev_alloc(d, 4 * 8 * sizeof(float)), *out = dev_alloc(d, 2 * 8 * 4);
        int32_t *dids = dev_alloc(d, sizeof ids);
        dev_put(d, dids, ids, sizeof ids);
        d->k->embedding_forward(out, dids, table, 2, 8);
        ds_err err = {{0}};
        d->ops->sync(d, &err);
        _exit(0); /* not reported: the test fails */
    }
    close(pfd[1]);
    char report[8192] = {0};
    size_t got = 0;
    ssize_t r;
    while ((r = read(pfd[0], report + got, sizeof report - 1 - got)) > 0) got += (size_t)r;
    close(pfd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!strstr(report, "use-after-poison")) fprintf(stderr, "child said: %s\n", report);
    assert_non_null(strstr(report, "use-after-poison"));
#else
    skip();
#endif
}

static void expect_open_error(const char *var, const char *value, const char *want) {
    setenv(var, value, 1);
    ds_err err = {{0}};
    assert_null(ds_device_sim_open(&err));
    if (!strstr(err.msg, want)) fprintf(stderr, "'%s' lacks '%s'\n", err.msg, want);
    assert_non_null(strstr(err.msg, want));
    unsetenv(var);
}

static void test_settings(void **state) {
    (void)state;
    expect_open_error("DS_SIM_MEMORY", "12XB", "DS_SIM_MEMORY='12XB': expected a positive size");
    expect_open_error("DS_SIM_MEMORY", "0", "DS_SIM_MEMORY='0'");
    expect_open_error("DS_SIM_MEMORY", "-5MiB", "DS_SIM_MEMORY='-5MiB'");
    expect_open_error("DS_SIM_DELAY", "fast", "DS_SIM_DELAY='fast'");
    expect_open_error("DS_SIM_SEED", "x1", "DS_SIM_SEED='x1'");
    ds_device *d = open_sim("3MiB", NULL);
    ds_device_mem m;
    d->ops->mem_info(d, &m);
    assert_int_equal(m.total, 3 * MiB);
    assert_string_equal(d->name, "sim");
    assert_int_equal(d->kind, DS_DEV_SIM);
    assert_false(ds_device_is_host(d));
    ds_err err = {{0}};
    assert_null(ds_device_sim_open(&err)); /* one per process */
    assert_non_null(strstr(err.msg, "already open"));
    close_sim(d);
    d = open_sim("1024KiB", NULL);
    d->ops->mem_info(d, &m);
    assert_int_equal(m.total, MiB);
    close_sim(d);
    d = open_sim(NULL, NULL); /* the default: 16 GiB, sparse */
    d->ops->mem_info(d, &m);
    assert_int_equal(m.total, (size_t)16 << 30);
    close_sim(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_host_read_faults, close_left_open),
        cmocka_unit_test_teardown(test_alloc_aligned_and_zeroed, close_left_open),
        cmocka_unit_test_teardown(test_free_is_stream_ordered, close_left_open),
        cmocka_unit_test_teardown(test_alloc_waits_for_queued_frees, close_left_open),
        cmocka_unit_test_teardown(test_freed_memory_reads_as_nan, close_left_open),
        cmocka_unit_test_teardown(test_uninit_reads_as_poison, close_left_open),
        cmocka_unit_test_teardown(test_out_of_memory_message, close_left_open),
        cmocka_unit_test_teardown(test_use_after_free_reported, close_left_open),
        cmocka_unit_test_teardown(test_double_free_reported, close_left_open),
        cmocka_unit_test_teardown(test_free_size_mismatch_reported, close_left_open),
        cmocka_unit_test_teardown(test_copy_misuse, close_left_open),
        cmocka_unit_test_teardown(test_alias, close_left_open),
        cmocka_unit_test_teardown(test_asan_sees_overrun_through_alias, close_left_open),
        cmocka_unit_test_teardown(test_settings, close_left_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
