#include "gpu_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A fresh harness, or the program's end (skipped) where there is no GPU. */
static void start(gh *g, const char *prog) {
    memset(g, 0, sizeof *g);
    g->prog = prog;
    g->rng = 0x9E3779B97F4A7C15ull;
    char why[512] = "";
    if (ds_gpu_count(why, sizeof why) == 0) {
        printf("%s: skipped: no CUDA device (%s)\n", prog, why);
        exit(GH_SKIP);
    }
}

void gh_init(gh *g, const char *prog) {
    start(g, prog);
    char why[512] = "";
    g->ctx = ds_cuda_ctx_create(0, why, sizeof why);
    if (!g->ctx) {
        fprintf(stderr, "%s: %s\n", prog, why);
        exit(1);
    }
    ds_gpu dev;
    if (ds_gpu_info(0, &dev, why, sizeof why) == 0)
        printf("%s: device 0: %s (sm_%d%d, %d SMs)\n", prog, dev.name, dev.cc_major,
               dev.cc_minor, dev.multiprocessors);
}

void gh_init_device(gh *g, const char *prog) {
    start(g, prog);
    ds_err err = {{0}};
    if (ds_device_open("cuda", 0, &err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        exit(1);
    }
    g->dev = ds_device_get();
    g->ctx = ds_cuda_device_ctx(g->dev);
    char why[512] = "";
    ds_gpu dev;
    if (ds_gpu_info(0, &dev, why, sizeof why) == 0)
        printf("%s: device %s: %s (sm_%d%d, %d SMs)\n", prog, g->dev->name, dev.name,
               dev.cc_major, dev.cc_minor, dev.multiprocessors);
}

static void dev_check(gh *g, int rc, const ds_err *err, const char *what) {
    if (rc == 0) return;
    fprintf(stderr, "%s: %s: %s\n", g->prog, what, err->msg);
    exit(1);
}

void *gh_dev_zeros(gh *g, size_t bytes) {
    ds_err err = {{0}};
    void *p = g->dev->ops->alloc(g->dev, bytes, &err);
    dev_check(g, p ? 0 : -1, &err, "alloc");
    return p;
}

void *gh_dev_up(gh *g, const void *host, size_t bytes) {
    ds_err err = {{0}};
    void *p = gh_dev_zeros(g, bytes);
    dev_check(g, g->dev->ops->from_host(g->dev, p, host, bytes, &err), &err, "from_host");
    return p;
}

void gh_dev_down(gh *g, void *host, const void *dev, size_t bytes) {
    ds_err err = {{0}};
    dev_check(g, g->dev->ops->to_host(g->dev, host, dev, bytes, &err), &err, "to_host");
}

void gh_dev_free(gh *g, void *dev, size_t bytes) { g->dev->ops->free(g->dev, dev, bytes); }

int gh_finish(gh *g) {
    if (g->dev) {
        ds_err err = {{0}};
        int rc = g->dev->ops->sync(g->dev, &err);
        printf("%s: %d checks, %d failed%s%s\n", g->prog, g->checks, g->failures,
               rc ? "; device error: " : "", rc ? err.msg : "");
        return g->failures || rc ? 1 : 0;
    }
    GH_OK(g, ds_cuda_sync(g->ctx));
    ds_cuda_ctx_free(g->ctx);
    printf("%s: %d checks, %d failed\n", g->prog, g->checks, g->failures);
    return g->failures ? 1 : 0;
}

void gh_ok_(gh *g, int rc, const char *call, const char *file, int line) {
    if (rc == 0) return;
    fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, ds_cuda_ctx_error(g->ctx));
    exit(1);
}

void *gh_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

uint32_t gh_rand_u32(gh *g) { /* xorshift64* */
    g->rng ^= g->rng >> 12;
    g->rng ^= g->rng << 25;
    g->rng ^= g->rng >> 27;
    return (uint32_t)((g->rng * 0x2545F4914F6CDD1Dull) >> 32);
}

float *gh_randf(gh *g, size_t n, float lo, float hi) {
    float *p = gh_alloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)(gh_rand_u32(g) >> 8) / 16777216.0f;
    return p;
}

float *gh_copyf(const float *src, size_t n) {
    float *p = gh_alloc(n * sizeof *p);
    memcpy(p, src, n * sizeof *p);
    return p;
}

void *gh_up(gh *g, const void *host, size_t bytes) {
    void *d = NULL;
    GH_OK(g, ds_cuda_malloc(g->ctx, &d, bytes));
    GH_OK(g, ds_cuda_to_device(g->ctx, d, host, bytes));
    return d;
}

void *gh_zeros(gh *g, size_t bytes) {
    void *d = NULL;
    GH_OK(g, ds_cuda_malloc(g->ctx, &d, bytes));
    GH_OK(g, ds_cuda_memset0(g->ctx, d, bytes));
    return d;
}

void gh_down(gh *g, void *host, const void *dev, size_t bytes) {
    GH_OK(g, ds_cuda_to_host(g->ctx, host, dev, bytes));
}

float *gh_downf(gh *g, const float *dev, size_t n) {
    float *h = gh_alloc(n * sizeof *h);
    gh_down(g, h, dev, n * sizeof *h);
    return h;
}

void gh_close(gh *g, const char *what, const float *gpu, const float *cpu, size_t n, float atol,
              float rtol) {
    size_t worst = 0, bad = 0;
    double worst_excess = -INFINITY, max_abs = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - (double)cpu[i]);
        double lim = atol + rtol * fabs((double)cpu[i]);
        if (!(d <= lim)) bad++;
        double excess = isnan(d) ? INFINITY : d - lim;
        if (excess > worst_excess) worst_excess = excess, worst = i;
        if (d > max_abs) max_abs = d;
    }
    g->checks++;
    if (bad) g->failures++;
    printf("%s %-44s n=%-9zu max|diff|=%.3g (atol %.1g rtol %.1g) worst [%zu] gpu %.9g cpu %.9g\n",
           bad ? "FAIL" : "ok  ", what, n, max_abs, atol, rtol, worst, n ? gpu[worst] : 0.0,
           n ? cpu[worst] : 0.0);
    if (bad) printf("     %zu of %zu elements out of tolerance\n", bad, n);
}

void gh_same_bits(gh *g, const char *what, const void *a, const void *b, size_t bytes) {
    const unsigned char *x = a, *y = b;
    size_t first = bytes, diff = 0;
    for (size_t i = 0; i < bytes; i++)
        if (x[i] != y[i]) {
            if (first == bytes) first = i;
            diff++;
        }
    g->checks++;
    if (diff) {
        g->failures++;
        printf("FAIL %-44s %zu of %zu bytes differ, first at byte %zu\n", what, diff, bytes, first);
    } else {
        printf("ok   %-44s %zu bytes identical\n", what, bytes);
    }
}

void gh_expect(gh *g, const char *what, int ok) {
    g->checks++;
    if (!ok) g->failures++;
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}
