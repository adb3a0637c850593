/* The process's device: cpu until a worker opens the one its job asked for. */
#include "device.h"

#include <string.h>

static ds_device *g_device;

#ifdef DS_HAVE_CUDA
#include "cuda_module.h"

/* Through the CUDA backend, loaded now (kernels/cuda_module.h): no cpu or sim rank maps it. */
static ds_device *cuda_open(int index, ds_err *err) {
    const ds_cuda_module *m = ds_cuda_module_get(err);
    if (!m) return ds_err_prefix(err, "device cuda:%d", index), NULL;
    return m->device_open(index, err);
}
#else
ds_device *ds_device_cuda_open(int index, ds_err *err) {
    return ds_err_set(err, "device cuda:%d: this build has no CUDA (built without nvcc)", index), NULL;
}

static ds_device *cuda_open(int index, ds_err *err) { return ds_device_cuda_open(index, err); }
#endif

ds_device *ds_device_get(void) { return g_device ? g_device : ds_device_cpu(); }

int ds_device_open(const char *kind, int index, ds_err *err) {
    if (g_device && strcmp(kind, g_device->name) && strncmp(g_device->name, kind, strlen(kind)))
        return ds_err_set(err, "device: this process already runs on %s", g_device->name);
    if (g_device) return 0;
    ds_device *d = NULL;
    if (!strcmp(kind, "cpu")) d = ds_device_cpu();
    else if (!strcmp(kind, "sim")) d = ds_device_sim_open(err);
    else if (!strcmp(kind, "cuda")) d = cuda_open(index, err);
    else return ds_err_set(err, "device '%s': expected cpu, sim or cuda", kind);
    if (!d) return -1;
    g_device = d;
    return 0;
}

