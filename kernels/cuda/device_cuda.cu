// Placeholder until the cuda device lands (issue 12): the engine cannot run on CUDA yet.
#include <stdio.h>

extern "C" {
#include "device.h"
}

extern "C" ds_device *ds_device_cuda_open(int index, ds_err *err) {
    ds_err_set(err, "device cuda:%d: the CUDA device is not built yet", index);
    return NULL;
}
