/* Loading the CUDA backend (cuda_module.h): only a rank that opens a cuda device (or
 * `dsrun --devices`) pays for mapping cuBLAS and NCCL. */
#include "cuda_module.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ds_cuda_interface.h"

/* Defined (kernels/cuda/module_entry.c) in programs linked with the backend; absent, so
 * NULL, in dsrun. A weak reference: which copy a program uses is decided at link time. */
extern const ds_cuda_module *ds_cuda_module_entry(void) __attribute__((weak));

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static const ds_cuda_module *g_module;
static void *g_handle; /* the dlopen'ed module; NULL when linked or not loaded */
static char g_path[PATH_MAX + 32];

int ds_cuda_module_path(char *buf, size_t len, ds_err *err) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return ds_err_errno(err, errno, "CUDA backend: readlink /proc/self/exe");
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    if ((size_t)snprintf(buf, len, "%s/%s", exe, DS_CUDA_MODULE_FILE) >= len)
        return ds_err_set(err, "CUDA backend: the path %s/%s is too long", exe, DS_CUDA_MODULE_FILE);
    return 0;
}

static const ds_cuda_module *checked(const ds_cuda_module *m, const char *from, ds_err *err) {
    if (!m || m->abi != DS_CUDA_MODULE_ABI || m->size != sizeof *m)
        return ds_err_set(err, "CUDA backend %s: built for another dsrun (interface %d, %zu bytes; "
                          "this dsrun has %d, %zu bytes): rebuild it with this dsrun",
                          from, m ? m->abi : -1, m ? m->size : 0, DS_CUDA_MODULE_ABI, sizeof *m),
               NULL;
    ds_cuda_layout want = DS_CUDA_LAYOUT, got = m->layout;
    if (got.kernel_table != want.kernel_table || got.device_ops != want.device_ops ||
        got.device != want.device || got.err != want.err)
        return ds_err_set(err, "CUDA backend %s: built from other sources than this dsrun (kernel "
                          "table %zu bytes, device ops %zu, device %zu, error %zu; this dsrun "
                          "has %zu, %zu, %zu, %zu): copy dsrun and its module from one build",
                          from, got.kernel_table, got.device_ops, got.device, got.err,
                          want.kernel_table, want.device_ops, want.device, want.err),
               NULL;
    if (strncmp(m->interface, DS_CUDA_INTERFACE, sizeof m->interface))
        return ds_err_set(err, "CUDA backend %s: built from other sources than this dsrun (its "
                          "interface headers hash to %.16s, this dsrun's to %s): copy dsrun and "
                          "its module from one build",
                          from, m->interface, DS_CUDA_INTERFACE),
               NULL;
    return m;
}

static const ds_cuda_module *load(ds_err *err) {
    if (ds_cuda_module_entry) return checked(ds_cuda_module_entry(), "(linked)", err);
    if (ds_cuda_module_path(g_path, sizeof g_path, err) != 0) return NULL;
    /* RTLD_NOW: a symbol it lacks is an error here, not a crash in the middle of a step */
    void *h = dlopen(g_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* the loader names the module itself only when the module is what is missing */
        const char *why = dlerror();
        size_t n = strlen(g_path);
        if (!strncmp(why, g_path, n) && !strncmp(why + n, ": ", 2)) why += n + 2;
        return ds_err_set(err, "cannot load the CUDA backend %s: %s", g_path, why), NULL;
    }
    const ds_cuda_module *(*entry)(void) =
        (const ds_cuda_module *(*)(void))dlsym(h, "ds_cuda_module_entry");
    const ds_cuda_module *m = entry ? checked(entry(), g_path, err) : NULL;
    if (!entry) ds_err_set(err, "CUDA backend %s: %s", g_path, dlerror());
    if (m) g_handle = h;
    else dlclose(h);
    return m;
}

const ds_cuda_module *ds_cuda_module_get(ds_err *err) {
    pthread_mutex_lock(&g_mu);
    if (!g_module) g_module = load(err);
    const ds_cuda_module *m = g_module;
    pthread_mutex_unlock(&g_mu);
    return m;
}

void *ds_cuda_module_symbol(const char *name, ds_err *err) {
    pthread_mutex_lock(&g_mu);
    void *h = g_handle;
    int linked = g_module != NULL; /* with no handle: the program's own linked copy */
    pthread_mutex_unlock(&g_mu);
    if (!h)
        return ds_err_set(err, "%s: %s", name,
                          linked ? "not linked into this program with its CUDA backend"
                                   : "the CUDA backend is not loaded (no cuda device was opened)"),
               NULL;
    void *f = dlsym(h, name);
    if (!f) ds_err_set(err, "CUDA backend %s: %s", g_path, dlerror());
    return f;
}
