/* The engine's part of ds._core: tensors, stages, criterion, optimizer steps, memory,
 * kernel counts. */
#include "ds_lua.h"
#include "lua_engine.h"

void ds_lua_open_engine(lua_State *L) {
    ds_lua_open_options(L);
    ds_lua_open_optim(L);
    ds_lua_open_tensor(L);
    ds_lua_open_stage(L);
    ds_lua_open_criterion(L);
    ds_lua_open_system(L);
    ds_lua_open_loss_scaler(L);
    ds_lua_open_kernel_count(L);
}
