/* The engine's Lua bindings: what the binding files share, and how the other parts'
 * bindings (data, comm, ZeRO) take and give the engine's objects. */
#ifndef DS_LUA_ENGINE_H
#define DS_LUA_ENGINE_H

#include <lua.h>

#include "engine_opts.h"
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

/* An optimizer's settings from the table at idx, checked in one place for every caller
 * (ds.optim, stage steps, ZeRO steps): AdamW {lr=, betas = {b1, b2} or beta1=, beta2=,
 * eps=, weight_decay=}, SGD {lr=, momentum=, weight_decay=}; absent ones take the
 * defaults (AdamW 1e-3, 0.9, 0.999, 1e-8, 0; SGD 1e-2, 0, 0). A value out of range or a
 * key that is neither a setting nor in extra (NULL-terminated, may be NULL) raises
 * "what: ...". The _step forms read a step's table: the settings (other keys are let
 * be), its t (AdamW, required, 1-based) and grad_scale (default 1). */
ds_adamw_cfg ds_lua_adamw_cfg(lua_State *L, int idx, const char *what, const char *const *extra);
ds_sgd_cfg ds_lua_sgd_cfg(lua_State *L, int idx, const char *what, const char *const *extra);
ds_adamw_cfg ds_lua_adamw_step(lua_State *L, int idx, const char *what, float *grad_scale);
ds_sgd_cfg ds_lua_sgd_step(lua_State *L, int idx, const char *what, float *grad_scale);
void ds_lua_open_optim(lua_State *L); /* adamw_config, sgd_config */

/* A script's value for engine option o (an integer, an enum name, a checkpoint choice) as
 * ds_engine_opts stores it; raises "what: name must be ..., got ..." at the script's
 * line when it does not fit. */
int64_t ds_lua_engine_opt_int(lua_State *L, int idx, const ds_engine_opt *o, const char *what);
double ds_lua_engine_opt_num(lua_State *L, int idx, const ds_engine_opt *o, const char *what);
/* The job's engine options from DS_ENGINE_*; raises naming a variable that does not fit. */
void ds_lua_engine_defaults(lua_State *L, ds_engine_opts *out);

void ds_lua_open_options(lua_State *L); /* engine_options, engine_defaults, engine_option */
void ds_lua_open_tensor(lua_State *L); /* ds.tensor, metatable ds.Tensor */
void ds_lua_open_stage(lua_State *L);  /* stage_new, metatable ds.Stage */
void ds_lua_open_criterion(lua_State *L); /* crossentropy_new, metatable ds.CrossEntropy */
void ds_lua_open_system(lua_State *L);    /* memory, clock, threads, blas */
void ds_lua_open_loss_scaler(lua_State *L); /* loss_scaler, grad_overflow */
void ds_lua_open_kernel_count(lua_State *L); /* kernel_counts */

#endif
