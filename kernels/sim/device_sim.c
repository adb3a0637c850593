/* Placeholder until the simulated device lands (kernels/sim). */
#include "device.h"

ds_device *ds_device_sim_open(ds_err *err) {
    return ds_err_set(err, "device sim: not built yet"), NULL;
}
