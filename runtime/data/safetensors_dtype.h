/* Engine dtypes and safetensors dtypes, both ways (the export tool and the Lua binding
 * both cross between them). -1 when the other side has no such dtype. */
#ifndef DS_SAFETENSORS_DTYPE_H
#define DS_SAFETENSORS_DTYPE_H

#include "safetensors.h"
#include "ds_dtype.h"

int ds_st_dtype_of(ds_dtype t, ds_st_dtype *out);
int ds_dtype_of_st(ds_st_dtype t, ds_dtype *out);

#endif
