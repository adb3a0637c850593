#include "safetensors_dtype.h"

int ds_st_dtype_of(ds_dtype t, ds_st_dtype *out) {
    switch (t) {
    case DS_F32: *out = DS_ST_F32; return 0;
    case DS_BF16: *out = DS_ST_BF16; return 0;
    case DS_F16: *out = DS_ST_F16; return 0;
    case DS_I32: *out = DS_ST_I32; return 0;
    }
    return -1;
}

int ds_dtype_of_st(ds_st_dtype t, ds_dtype *out) {
    switch (t) {
    case DS_ST_F32: *out = DS_F32; return 0;
    case DS_ST_BF16: *out = DS_BF16; return 0;
    case DS_ST_F16: *out = DS_F16; return 0;
    case DS_ST_I32: *out = DS_I32; return 0;
    default: return -1;
    }
}
