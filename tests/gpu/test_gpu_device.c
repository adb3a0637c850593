/* The cuda device's contract (kernels/device.h) on a GPU: an index beyond the count is
 * refused with the count; memory comes zeroed (alloc_uninit: as written), 64-byte
 * aligned, counted to the byte and reused without growing the pool; copies and memset are in stream order; a second
 * stream ordered by an event sees the compute stream's writes; out of memory says how
 * much was asked and how much is free; and a kernel that cannot be queued becomes the
 * sticky error of every later wait. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

static gh G;

static void test_index_beyond_count(void) {
    ds_err err = {{0}};
    ds_device *d = ds_device_cuda_open(999, &err);
    gh_expect(&G, "cuda:999 is refused", d == NULL);
    printf("     message: %s\n", err.msg);
    gh_expect(&G, "  and the message says how many GPUs there are", strstr(err.msg, "visible GPU") != NULL);
}

static void test_memory(void) {
    ds_device *d = G.dev;
    ds_device_mem m0, m1, m2;
    d->ops->mem_info(d, &m0);
    size_t n = 3u << 20;
    unsigned char *host = gh_alloc(n);
    memset(host, 0xAB, n);
    void *p = gh_dev_zeros(&G, n);
    d->ops->mem_info(d, &m1);
    gh_expect(&G, "alloc is 64-byte aligned", ((uintptr_t)p & 63) == 0);
    gh_expect(&G, "in_use grows by the bytes asked", m1.in_use - m0.in_use == n);
    gh_expect(&G, "reserved >= in_use", m1.reserved >= m1.in_use);
    gh_expect(&G, "total and free come from the device", m1.total > 0 && m1.free <= m1.total);
    gh_dev_down(&G, host, p, n);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += host[i] != 0;
    gh_expect(&G, "alloc is zeroed", nonzero == 0);

    /* from_host, device copy, memset0 of a middle part, to_host: all in order */
    for (size_t i = 0; i < n; i++) host[i] = (unsigned char)(i * 7);
    void *q = gh_dev_zeros(&G, n);
    ds_err err = {{0}};
    int rc = d->ops->from_host(d, p, host, n, &err);
    d->ops->copy(d, q, p, n);
    d->ops->memset0(d, (char *)q + 1000, 5000);
    unsigned char *back = gh_alloc(n);
    gh_dev_down(&G, back, q, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += back[i] != (i >= 1000 && i < 6000 ? 0 : (unsigned char)(i * 7));
    gh_expect(&G, "from_host, copy, memset0, to_host in stream order", rc == 0 && bad == 0);

    /* free then the same sizes again: the pool hands the blocks back, reserved stays */
    gh_dev_free(&G, p, n);
    gh_dev_free(&G, q, n);
    d->ops->mem_info(d, &m1);
    for (int round = 0; round < 3; round++) {
        void *a = gh_dev_zeros(&G, n), *b = gh_dev_zeros(&G, n);
        gh_dev_free(&G, a, n);
        gh_dev_free(&G, b, n);
    }
    d->ops->mem_info(d, &m2);
    gh_expect(&G, "in_use back to where it was after the frees", m2.in_use == m0.in_use);
    gh_expect(&G, "a repeated pattern does not grow the pool", m2.reserved == m1.reserved);

    /* alloc_uninit: aligned, counted as alloc, holds what is written; the block it leaves
     * dirty comes back zeroed from alloc */
    ds_err e2 = {{0}};
    void *u = d->ops->alloc_uninit(d, n, &e2);
    d->ops->mem_info(d, &m1);
    gh_expect(&G, "alloc_uninit is 64-byte aligned and counted", u && ((uintptr_t)u & 63) == 0 &&
                                                                    m1.in_use - m0.in_use == n);
    if (u) {
        rc = d->ops->from_host(d, u, host, n, &e2);
        gh_dev_down(&G, back, u, n);
        gh_expect(&G, "alloc_uninit holds what is written", rc == 0 && !memcmp(back, host, n));
        gh_dev_free(&G, u, n);
        void *z = gh_dev_zeros(&G, n);
        gh_dev_down(&G, back, z, n);
        nonzero = 0;
        for (size_t i = 0; i < n; i++) nonzero += back[i] != 0;
        gh_expect(&G, "alloc after alloc_uninit is zeroed", nonzero == 0);
        gh_dev_free(&G, z, n);
    }
    free(host), free(back);
}

static void test_streams_and_events(void) {
    ds_device *d = G.dev;
    ds_err err = {{0}};
    ds_stream *s = d->ops->stream_new(d, &err);
    ds_event *e = d->ops->event_new(d, &err), *e2 = d->ops->event_new(d, &err);
    gh_expect(&G, "stream_new and event_new", s && e && e2);
    if (!s || !e || !e2) return;
    size_t n = 64u << 20; /* large enough that the copy on s would overtake an unordered fill */
    float *h = gh_alloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = (float)i;
    float *a = gh_dev_up(&G, h, n * 4), *b = gh_dev_zeros(&G, n * 4);
    /* compute stream: a *= 2; s waits for it and copies a into b; compute waits on s */
    G.dev->k->scale(a, 2.0f, n);
    d->ops->event_record(d, e, NULL);
    d->ops->stream_wait(d, s, e);
    cudaStream_t cs = ds_cuda_device_stream(d, s);
    int rc = cudaMemcpyAsync(b, a, n * 4, cudaMemcpyDeviceToDevice, cs) == cudaSuccess ? 0 : -1;
    d->ops->event_record(d, e2, s);
    d->ops->stream_wait(d, NULL, e2);
    G.dev->k->scale(b, 0.5f, n);
    gh_dev_down(&G, h, b, n * 4);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (float)i;
    gh_expect(&G, "a second stream ordered by events sees the compute stream's writes", rc == 0 && bad == 0);
    gh_expect(&G, "event_sync, then event_done", d->ops->event_sync(d, e2, &err) == 0 && d->ops->event_done(d, e2));
    gh_expect(&G, "sync waits for every stream", d->ops->sync(d, &err) == 0);
    gh_dev_free(&G, a, n * 4);
    gh_dev_free(&G, b, n * 4);
    d->ops->event_free(d, e);
    d->ops->event_free(d, e2);
    d->ops->stream_free(d, s);
    free(h);
}

static void test_out_of_memory(void) {
    ds_device *d = G.dev;
    ds_device_mem m;
    d->ops->mem_info(d, &m);
    ds_err err = {{0}};
    void *p = d->ops->alloc(d, m.total * 2, &err);
    gh_expect(&G, "twice the device's memory is refused", p == NULL);
    printf("     message: %s\n", err.msg);
    gh_expect(&G, "  naming the bytes asked and free",
              strstr(err.msg, "out of device memory") && strstr(err.msg, "asked") && strstr(err.msg, "free"));
    void *q = gh_dev_zeros(&G, 4096);
    gh_expect(&G, "  and the device still works after it", q != NULL && d->ops->sync(d, &err) == 0);
    gh_dev_free(&G, q, 4096);
}

/* last: the device is unusable afterwards */
static void test_sticky_error(void) {
    ds_device *d = G.dev;
    ds_err err = {{0}};
    d->k->matmul_forward(NULL, NULL, NULL, NULL, 0, 4, 4); /* cannot be queued */
    int rc1 = d->ops->sync(d, &err);
    printf("     message: %s\n", err.msg);
    ds_err err2 = {{0}};
    float x = 0;
    void *p = gh_dev_zeros(&G, 4);
    int rc2 = d->ops->to_host(d, &x, p, 4, &err2);
    gh_expect(&G, "a kernel that cannot be queued fails the next sync", rc1 == -1 && strstr(err.msg, "matmul_forward"));
    gh_expect(&G, "  and every later wait, with the same message", rc2 == -1 && !strcmp(err.msg, err2.msg));
}

/* Without a GPU (CI): opening cuda:0 fails with a message that says so; then skip. */
static void check_no_gpu(void) {
    char why[256];
    if (ds_gpu_count(why, sizeof why) > 0) return;
    ds_err err = {{0}};
    int rc = ds_device_open("cuda", 0, &err);
    printf("test_gpu_device: no GPU: ds_device_open(\"cuda\", 0): %s\n", err.msg);
    if (rc != -1 || !strstr(err.msg, "no usable GPU") || ds_device_get()->kind != DS_DEV_CPU) {
        printf("FAIL opening cuda without a GPU must fail with \"no usable GPU\" and leave cpu\n");
        exit(1);
    }
}

int main(void) {
    check_no_gpu();
    gh_init_device(&G, "test_gpu_device");
    test_index_beyond_count();
    test_memory();
    test_streams_and_events();
    test_out_of_memory();
    test_sticky_error();
    printf("%s: %d checks, %d failed\n", G.prog, G.checks, G.failures);
    return G.failures ? 1 : 0;
}
