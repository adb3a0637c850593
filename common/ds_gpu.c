#include "ds_gpu.h"

#include <stdio.h>
#include <string.h>

#ifdef DS_HAVE_CUDA
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

/* The driver, opened with dlopen on first use: linking it (or the CUDA runtime, which
 * probes for it on every start) would make the programs fail to start, or start slower,
 * on the nodes that have no GPU. Asking the driver is also what makes `device = auto`
 * cheap: the CUDA backend (cuBLAS, NCCL) is loaded only once a GPU is there. */
static struct {
    pthread_once_t once;
    char why[256]; /* why there is no driver to ask; "" when there is */
    __typeof__(cuDeviceGetCount) *count;
    __typeof__(cuDeviceGet) *get;
    __typeof__(cuDeviceGetName) *name;
    __typeof__(cuDeviceTotalMem) *total_mem;
    __typeof__(cuDeviceGetAttribute) *attribute;
    __typeof__(cuGetErrorString) *error_string;
} drv = {.once = PTHREAD_ONCE_INIT};

static const char *cu_error(CUresult rc) {
    const char *s = NULL;
    if (!drv.error_string || drv.error_string(rc, &s) != CUDA_SUCCESS || !s) s = "unknown error";
    return s;
}

static void *cu_symbol(void *h, const char *name) {
    void *f = dlsym(h, name);
    if (!f && !drv.why[0])
        snprintf(drv.why, sizeof drv.why, "the CUDA driver has no %s (too old)", name);
    return f;
}

static void open_driver(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(drv.why, sizeof drv.why, "no CUDA driver (%s)", dlerror());
        return;
    }
    __typeof__(cuInit) *init = (__typeof__(cuInit) *)cu_symbol(h, "cuInit");
    drv.count = (__typeof__(cuDeviceGetCount) *)cu_symbol(h, "cuDeviceGetCount");
    drv.get = (__typeof__(cuDeviceGet) *)cu_symbol(h, "cuDeviceGet");
    drv.name = (__typeof__(cuDeviceGetName) *)cu_symbol(h, "cuDeviceGetName");
    drv.total_mem = (__typeof__(cuDeviceTotalMem) *)cu_symbol(h, "cuDeviceTotalMem_v2");
    drv.attribute = (__typeof__(cuDeviceGetAttribute) *)cu_symbol(h, "cuDeviceGetAttribute");
    drv.error_string = (__typeof__(cuGetErrorString) *)cu_symbol(h, "cuGetErrorString");
    if (drv.why[0]) return;
    CUresult rc = init(0); /* no device, a stub driver, a bad CUDA_VISIBLE_DEVICES */
    if (rc != CUDA_SUCCESS) snprintf(drv.why, sizeof drv.why, "%s (cuda error %d)", cu_error(rc), (int)rc);
}

int ds_gpu_count(char *why, size_t why_len) {
    pthread_once(&drv.once, open_driver);
    int n = 0;
    CUresult rc = drv.why[0] ? CUDA_SUCCESS : drv.count(&n);
    if (drv.why[0] || rc != CUDA_SUCCESS) {
        if (why) snprintf(why, why_len, "%s", drv.why[0] ? drv.why : cu_error(rc));
        return 0;
    }
    if (n == 0 && why) snprintf(why, why_len, "none visible");
    return n;
}

int ds_gpu_info(int i, ds_gpu *g, char *why, size_t why_len) {
    char reason[256] = "";
    int n = ds_gpu_count(reason, sizeof reason);
    if (i < 0 || i >= n) {
        if (why) snprintf(why, why_len, "device %d: %s", i, n > 0 ? "no such device" : reason);
        return -1;
    }
    CUdevice dev;
    CUresult rc = drv.get(&dev, i);
    memset(g, 0, sizeof *g);
    g->index = i;
    if (rc == CUDA_SUCCESS) rc = drv.name(g->name, (int)sizeof g->name, dev);
    if (rc == CUDA_SUCCESS) rc = drv.total_mem(&g->total_mem, dev);
    if (rc == CUDA_SUCCESS)
        rc = drv.attribute(&g->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    if (rc == CUDA_SUCCESS)
        rc = drv.attribute(&g->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    if (rc == CUDA_SUCCESS)
        rc = drv.attribute(&g->multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (rc != CUDA_SUCCESS) {
        if (why) snprintf(why, why_len, "device %d: %s", i, cu_error(rc));
        return -1;
    }
    return 0;
}

#else

int ds_gpu_count(char *why, size_t why_len) {
    if (why) snprintf(why, why_len, "built without CUDA");
    return 0;
}

int ds_gpu_info(int i, ds_gpu *g, char *why, size_t why_len) {
    (void)g;
    if (why) snprintf(why, why_len, "device %d: built without CUDA", i);
    return -1;
}

#endif
