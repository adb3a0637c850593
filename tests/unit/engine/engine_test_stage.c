#include "engine_test_stage.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ds_layer *eng_named(ds_layer *l, const char *name) {
    assert_non_null(l);
    snprintf(l->name, sizeof l->name, "%s", name);
    return l;
}

ds_tensor *eng_input(int64_t B, int64_t T, int64_t C) {
    ds_err err = {{0}};
    int64_t shape[3] = {B, T, C};
    ds_tensor *x = ds_tensor_new_host(DS_F32, DS_MEM_DATA, 3, shape, &err);
    assert_non_null(x);
    uint32_t st = 11;
    for (int64_t i = 0; i < x->numel; i++) {
        st = st * 1664525u + 1013904223u;
        ((float *)x->data)[i] = (float)(st >> 8) / 8388608.0f - 1.0f;
    }
    return x;
}

unsigned char *eng_bytes(const ds_tensor *t) {
    ds_err err = {{0}};
    unsigned char *b = malloc(ds_tensor_nbytes(t) + 1);
    assert_non_null(b);
    if (ds_tensor_to_host(t, 0, (size_t)t->numel, b, &err) != 0) fail_msg("%s", err.msg);
    return b;
}

int eng_open_device(void) {
    const char *dev = getenv("DS_ENGINE_DEVICE");
    ds_err err = {{0}};
    if (dev && *dev && strcmp(dev, "auto") && ds_device_open(dev, 0, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}
