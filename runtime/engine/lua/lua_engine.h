/* The engine's Lua bindings: what the binding files share, and how the other parts'
 * bindings (data, comm, ZeRO) take and give the engine's objects. */
#ifndef DS_LUA_ENGINE_H
#define DS_LUA_ENGINE_H

#include <lua.h>

#include "optim.h"
#include "stage.h"
#include "tensor.h"

/* Tensors are full userdata of metatable "ds.Tensor". push takes ownership of t; check
 * raises a Lua error if idx is not a tensor (or was freed). */
void ds_lua_push_tensor(lua_State *L, ds_tensor *t);
ds_tensor *ds_lua_check_tensor(lua_State *L, int idx);
/* The stage behind a ds.Stage userdata at idx (a Lua error if it is not one, or was
 * freed): how the other parts (ZeRO) reach a script's stages. */
ds_stage *ds_lua_check_stage(lua_State *L, int idx);

/* Pushes a userdata for a tensor the engine owns: not freed with the userdata; the value
 * at owner_idx (the owner's userdata) is kept alive as long as the tensor is. */
void ds_lua_push_tensor_ref(lua_State *L, ds_tensor *t, int owner_idx);
/* Pushes a view struct (freed with the userdata, data not) kept alive with its owner. */
void ds_lua_push_tensor_view(lua_State *L, ds_tensor *view, int owner_idx);
int ds_lua_check_dtype(lua_State *L, int idx);
/* Keeps the value at val alive as long as the userdata at ud, under key in the table that
 * is ud's first user value (stages and criteria both have one). */
void ds_lua_keep(lua_State *L, int ud, const char *key, int val);
/* Raises "what: key was freed" if the tensor kept under key has been finalized. Kept
 * tensors normally live as long as their keeper, but finalizers in one collection run
 * in reverse order of creation, and one that resurrects the keeper (stores it somewhere
 * reachable) can use it after a younger kept tensor was freed. */
void ds_lua_check_kept(lua_State *L, int ud, const char *key, const char *what);
/* 1 if the value at idx is a tensor whose memory was freed (finalized), else 0. */
int ds_lua_tensor_freed(lua_State *L, int idx);

/* An optimizer step's settings from the table at idx ({lr=, beta1=, beta2=, eps=,
 * weight_decay=, t=, grad_scale=} / {lr=, momentum=, weight_decay=, grad_scale=}), with
 * the defaults; a bad value is a Lua error naming the key. */
ds_adamw_cfg ds_lua_adamw_cfg(lua_State *L, int idx, float *grad_scale);
ds_sgd_cfg ds_lua_sgd_cfg(lua_State *L, int idx, float *grad_scale);

void ds_lua_open_tensor(lua_State *L); /* ds.tensor, metatable ds.Tensor */
void ds_lua_open_stage(lua_State *L);  /* stage_new, metatable ds.Stage */
void ds_lua_open_criterion(lua_State *L); /* crossentropy_new, metatable ds.CrossEntropy */
void ds_lua_open_system(lua_State *L);    /* memory, clock, threads, blas */
void ds_lua_open_loss_scaler(lua_State *L); /* loss_scaler, grad_overflow */

#endif
