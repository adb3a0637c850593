#include "ds_dtype.h"

#include <string.h>

size_t ds_dtype_size(ds_dtype t) {
    switch (t) {
    case DS_F32: return 4;
    case DS_BF16: return 2;
    case DS_F16: return 2;
    case DS_I32: return 4;
    }
    return 0;
}

const char *ds_dtype_name(ds_dtype t) {
    switch (t) {
    case DS_F32: return "fp32";
    case DS_BF16: return "bf16";
    case DS_F16: return "fp16";
    case DS_I32: return "int32";
    }
    return "?";
}

void ds_transpose2d(void *out, const void *in, int64_t rows, int64_t cols, size_t esize) {
    /* The element sizes the engine has, copied as integers; any other byte by byte. */
    if (esize == 4) {
        const uint32_t *src = in;
        uint32_t *dst = out;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
    } else if (esize == 2) {
        const uint16_t *src = in;
        uint16_t *dst = out;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
    } else {
        const unsigned char *src = in;
        unsigned char *dst = out;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                memcpy(dst + (size_t)(j * rows + i) * esize, src + (size_t)(i * cols + j) * esize, esize);
    }
}
