/* The kernels' name (ds_half) for a tensor's 16-bit float dtype. Apart from tensor.h, which
 * the checkpoint part uses without the kernels. */
#ifndef DS_TENSOR_HALF_H
#define DS_TENSOR_HALF_H

#include "kernels.h"
#include "tensor.h"

/* t is DS_BF16 or DS_F16 */
static inline ds_half ds_half_of(ds_dtype t) { return t == DS_BF16 ? DS_HALF_BF16 : DS_HALF_F16; }

#endif
