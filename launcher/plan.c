/* plan: see plan.h and docs/plan.md. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include "ds_buf.h"
#include "ds_hostname.h"
#include "ds_json.h"
#include "launch_method.h"

int ds_host_is_local(const char *host) {
    if (!strcmp(host, "localhost") || !strcmp(host, "127.0.0.1") || !strcmp(host, "::1"))
        return 1;
    char me[256];
    return !strcmp(host, ds_hostname(me, sizeof me, ""));
}

/* localhost, 127.0.0.0/8, ::1: names no other machine can reach this one by. */
static int is_loopback(const char *host) {
    return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1") ||
           !strcmp(host, "[::1]");
}

int ds_plan_check_master_addr(const ds_plan *plan, ds_err *err) {
    if (!is_loopback(plan->master_addr)) return 0;
    for (int i = 0; i < plan->nnodes; i++) {
        const char *h = plan->nodes[i].host;
        if (is_loopback(h) || ds_host_is_local(h)) continue;
        char me[256];
        ds_hostname(me, sizeof me, "");
        return ds_err_set(err, "MASTER_ADDR would be '%s', a loopback address that node %d (%s) "
                               "cannot reach: name this node in the hostfile by an address the "
                               "other nodes reach (its hostname '%s'?), or give --master_addr",
                          plan->master_addr, i, h, me);
    }
    return 0;
}

static int copy_host(ds_host *dst, const ds_host *src) {
    *dst = *src;
    dst->name = strdup(src->name);
    dst->slots = malloc((size_t)(src->nkept ? src->nkept : 1) * sizeof *dst->slots);
    if (!dst->name || !dst->slots) {
        free(dst->name);
        free(dst->slots);
        dst->name = NULL;
        dst->slots = NULL;
        return -1;
    }
    memcpy(dst->slots, src->slots, (size_t)src->nkept * sizeof *dst->slots);
    return 0;
}

void ds_plan_free(ds_plan *plan) {
    if (!plan) return;
    for (int i = 0; i < plan->nnodes; i++) {
        free(plan->nodes[i].host);
        free(plan->nodes[i].alias);
        free(plan->nodes[i].slots);
    }
    free(plan->nodes);
    free(plan->ranks);
    free(plan->master_addr);
    free(plan->hosts_from);
    ds_hostlist_free(&plan->spares);
    memset(plan, 0, sizeof *plan);
}

static int add_node(ds_plan *plan, const ds_host *h) {
    ds_plan_node *n = &plan->nodes[plan->nnodes];
    memset(n, 0, sizeof *n);
    n->host = strdup(h->name);
    n->slots = malloc((size_t)h->nkept * sizeof *n->slots);
    if (!n->host || !n->slots) {
        free(n->host);
        free(n->slots);
        return -1;
    }
    memcpy(n->slots, h->slots, (size_t)h->nkept * sizeof *n->slots);
    n->nslots = h->nkept;
    n->node_rank = plan->nnodes;
    n->first_rank = plan->world_size;
    n->local = ds_host_is_local(h->name);
    plan->nnodes++;
    plan->world_size += h->nkept;
    return 0;
}

int ds_plan_build(ds_plan *plan, const ds_hostlist *hl, const ds_jobspec *spec,
                  const char *master_addr, int master_port, ds_err *err) {
    memset(plan, 0, sizeof *plan);
    int nworld = 0;
    for (int i = 0; i < hl->nhosts; i++) nworld += !hl->hosts[i].spare && hl->hosts[i].nkept > 0;
    int held = spec ? spec->spares : 0;
    if (nworld == 0) return ds_err_set(err, "no slot to run on (every host is a spare or empty)");
    if (held >= nworld)
        return ds_err_set(err, "[restart] spares = %d leaves no node to run on (%d node%s after "
                               "filtering)", held, nworld, nworld == 1 ? "" : "s");
    if (master_port < 0 || master_port > 65535)
        return ds_err_set(err, "master port %d: expected 1..65535 (0: a free one)", master_port);
    plan->nodes = calloc((size_t)nworld, sizeof *plan->nodes);
    plan->spares.hosts = calloc((size_t)hl->nhosts, sizeof *plan->spares.hosts);
    if (!plan->nodes || !plan->spares.hosts) goto oom;
    int seen = 0;
    for (int i = 0; i < hl->nhosts; i++) {
        const ds_host *h = &hl->hosts[i];
        if (h->nkept == 0) continue;
        int to_spares = h->spare || seen++ >= nworld - held;
        if (to_spares) {
            if (copy_host(&plan->spares.hosts[plan->spares.nhosts], h) != 0) goto oom;
            plan->spares.nhosts++;
        } else if (add_node(plan, h) != 0) {
            goto oom;
        }
    }
    plan->ranks = calloc((size_t)plan->world_size, sizeof *plan->ranks);
    if (!plan->ranks) goto oom;
    for (int n = 0; n < plan->nnodes; n++) {
        const ds_plan_node *node = &plan->nodes[n];
        for (int l = 0; l < node->nslots; l++) {
            ds_plan_rank *r = &plan->ranks[node->first_rank + l];
            r->rank = node->first_rank + l;
            r->node_rank = n;
            r->local_rank = l;
            r->slot = node->slots[l];
        }
    }
    plan->master_addr = strdup(master_addr && *master_addr ? master_addr : plan->nodes[0].host);
    if (!plan->master_addr) goto oom;
    plan->master_port = master_port;
    plan->gpus = spec && spec->device == DS_DEVICE_CUDA;
    return 0;
oom:
    ds_plan_free(plan);
    return ds_err_set(err, "out of memory");
}

/* ---- environment ---- */

static int push_env(char **env, int *n, const char *key, const char *value) {
    size_t len = strlen(key) + strlen(value) + 2;
    char *kv = malloc(len);
    if (!kv) return -1;
    snprintf(kv, len, "%s=%s", key, value);
    env[(*n)++] = kv;
    return 0;
}

static int push_int(char **env, int *n, const char *key, long long v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    return push_env(env, n, key, b);
}

/* The job's [engine] section reaches every rank as DS_ENGINE_<OPTION>, one variable per
 * option of common/engine_opts.h, written as a job spec writes it (the ranks parse them
 * with the same table). */
static int push_engine_defaults(char **env, int *n, const ds_jobspec *spec) {
    int bad = 0;
    for (int i = 0; i < DS_EO_COUNT; i++) {
        char name[64], value[64];
        ds_engine_opt_env_name(&DS_ENGINE_OPTS[i], name, sizeof name);
        ds_engine_opt_format(&DS_ENGINE_OPTS[i], &spec->engine, value, sizeof value);
        bad |= push_env(env, n, name, value);
    }
    /* the options the job states ([engine], --set, a DeepSpeed config), by name: where a
     * script's own value differs from one of these, the ds library says so */
    ds_buf given = {0};
    for (int i = 0; i < DS_EO_COUNT; i++)
        if (spec->engine_given[i]) ds_buf_printf(&given, "%s%s", given.len ? "," : "", DS_ENGINE_OPTS[i].name);
    if (given.len) bad |= given.oom ? -1 : push_env(env, n, "DS_ENGINE_GIVEN", ds_buf_str(&given));
    ds_buf_free(&given);
    return bad;
}

static int push_node_slots(char **env, int *n, const ds_plan_node *node) {
    ds_buf b = {0};
    for (int i = 0; i < node->nslots; i++) ds_buf_printf(&b, "%s%d", i ? "," : "", node->slots[i]);
    int rc = b.oom ? -1 : push_env(env, n, "CUDA_VISIBLE_DEVICES", ds_buf_str(&b));
    ds_buf_free(&b);
    return rc;
}

/* The rest of what torchrun's elastic agent gives each worker, so torch.distributed's
 * env:// and what reads it (DeepSpeed, Accelerate) find everything they look for. */
static int push_torchrun_env(char **env, int *n, const ds_plan *plan, const ds_plan_rank *rk,
                             const ds_jobspec *spec, const char *job_id, int attempt) {
    int bad = 0;
    bad |= push_int(env, n, "GROUP_RANK", rk->node_rank);
    bad |= push_int(env, n, "GROUP_WORLD_SIZE", plan->nnodes);
    bad |= push_int(env, n, "ROLE_RANK", rk->rank);
    bad |= push_int(env, n, "ROLE_WORLD_SIZE", plan->world_size);
    bad |= push_env(env, n, "ROLE_NAME", "default");
    bad |= push_int(env, n, "TORCHELASTIC_RESTART_COUNT", attempt);
    bad |= push_int(env, n, "TORCHELASTIC_MAX_RESTARTS", spec ? spec->max_restarts : 0);
    bad |= push_env(env, n, "TORCHELASTIC_RUN_ID", job_id ? job_id : "");
    return bad;
}

char **ds_plan_rank_env(const ds_plan *plan, const ds_jobspec *spec, int r, const char *job_id,
                        int attempt) {
    if (r < 0 || r >= plan->world_size) return NULL;
    const ds_plan_rank *rk = &plan->ranks[r];
    const ds_plan_node *node = &plan->nodes[rk->node_rank];
    int nenv = spec ? spec->nenv : 0;
    /* 9 job variables, 8 more of torchrun's, CUDA_VISIBLE_DEVICES, the DS_ENGINE_* and
     * DS_ENGINE_GIVEN, the [env] entries, NULL */
    char **env = calloc((size_t)(20 + DS_EO_COUNT + nenv), sizeof *env);
    if (!env) return NULL;
    int n = 0, bad = 0;
    bad |= push_int(env, &n, "RANK", rk->rank);
    bad |= push_int(env, &n, "WORLD_SIZE", plan->world_size);
    bad |= push_int(env, &n, "LOCAL_RANK", rk->local_rank);
    bad |= push_int(env, &n, "LOCAL_WORLD_SIZE", node->nslots);
    bad |= push_int(env, &n, "NODE_RANK", rk->node_rank);
    bad |= push_env(env, &n, "MASTER_ADDR", plan->master_addr);
    /* 0: node 0's agent picks a free port when the job starts and sets it */
    if (plan->master_port) bad |= push_int(env, &n, "MASTER_PORT", plan->master_port);
    else bad |= push_env(env, &n, "MASTER_PORT", "auto");
    bad |= push_env(env, &n, "DS_JOB_ID", job_id ? job_id : "");
    bad |= push_int(env, &n, "DS_ATTEMPT", attempt);
    bad |= push_torchrun_env(env, &n, plan, rk, spec, job_id, attempt);
    /* one device per rank, named by its physical index (the slot); a program that is not
     * Lua sees its node's slots in local-rank order and takes device LOCAL_RANK, as under
     * torchrun and deepspeed */
    if (plan->gpus && spec && !ds_jobspec_is_lua(spec)) bad |= push_node_slots(env, &n, node);
    else if (plan->gpus) bad |= push_int(env, &n, "CUDA_VISIBLE_DEVICES", rk->slot);
    if (spec) bad |= push_engine_defaults(env, &n, spec);
    for (int i = 0; i < nenv && !bad; i++)
        bad |= push_env(env, &n, spec->env[i].key, spec->env[i].value);
    if (bad) {
        ds_plan_env_free(env);
        return NULL;
    }
    return env;
}

void ds_plan_env_free(char **env) {
    if (!env) return;
    for (char **e = env; *e; e++) free(*e);
    free(env);
}

/* ---- JSON ---- */

static void json_slots(ds_json *j, const int *slots, int n) {
    ds_json_arr(j);
    for (int i = 0; i < n; i++) ds_json_int(j, slots[i]);
    ds_json_end(j);
}

static void json_job(ds_json *j, const ds_plan *plan, const ds_jobspec *spec, const char *job_id,
                     int attempt) {
    static const char *DEVICES[] = {"auto", "cpu", "cuda"};
    ds_json_key(j, "job");
    ds_json_obj(j);
    ds_json_kstr(j, "name", spec->name);
    ds_json_kstr(j, "id", job_id);
    ds_json_kint(j, "attempt", attempt);
    ds_json_kstr(j, "spec", spec->path);
    ds_json_kstr(j, "script", spec->script);
    ds_json_key(j, "args");
    ds_json_arr(j);
    for (int i = 0; i < spec->nargs; i++) ds_json_str(j, spec->args[i]);
    ds_json_end(j);
    ds_json_kstr(j, "workdir", spec->workdir);
    ds_json_kstr(j, "dsrun", spec->dsrun);
    ds_json_kstr(j, "device", DEVICES[spec->device]);
    ds_json_kstr(j, "log_dir", spec->log_dir);
    ds_json_kstr(j, "tee", spec->tee);
    ds_json_kstr(j, "launch", ds_launch_name(spec->launch_method));
    if (plan->hosts_from) ds_json_kstr(j, "hosts_from", plan->hosts_from);
    ds_json_end(j);
}

static void json_env(ds_json *j, const ds_plan *plan, const ds_jobspec *spec, int r,
                     const char *job_id, int attempt) {
    char **env = ds_plan_rank_env(plan, spec, r, job_id, attempt);
    ds_json_key(j, "env");
    if (!env) {
        j->bad = 1;
        return;
    }
    ds_json_obj(j);
    for (char **e = env; *e; e++) {
        char *eq = strchr(*e, '=');
        *eq = '\0';
        ds_json_kstr(j, *e, eq + 1);
    }
    ds_json_end(j);
    ds_plan_env_free(env);
}

static void write_plan(ds_json *j, const ds_plan *plan, const ds_jobspec *spec,
                       const char *job_id, int attempt) {
    ds_json_obj(j);
    if (spec) json_job(j, plan, spec, job_id, attempt);
    ds_json_kint(j, "world_size", plan->world_size);
    ds_json_kstr(j, "master_addr", plan->master_addr);
    ds_json_kint(j, "master_port", plan->master_port);
    ds_json_kbool(j, "gpus", plan->gpus);
    ds_json_key(j, "nodes");
    ds_json_arr(j);
    for (int i = 0; i < plan->nnodes; i++) {
        const ds_plan_node *n = &plan->nodes[i];
        ds_json_obj(j);
        ds_json_kstr(j, "host", n->host);
        if (n->alias) ds_json_kstr(j, "alias", n->alias);
        ds_json_kint(j, "node_rank", n->node_rank);
        ds_json_key(j, "slots");
        json_slots(j, n->slots, n->nslots);
        ds_json_kint(j, "first_rank", n->first_rank);
        ds_json_kbool(j, "local", n->local);
        ds_json_end(j);
    }
    ds_json_end(j);
    ds_json_key(j, "ranks");
    ds_json_arr(j);
    for (int r = 0; r < plan->world_size; r++) {
        const ds_plan_rank *rk = &plan->ranks[r];
        ds_json_obj(j);
        ds_json_kint(j, "rank", rk->rank);
        ds_json_kstr(j, "host", plan->nodes[rk->node_rank].host);
        ds_json_kint(j, "node_rank", rk->node_rank);
        ds_json_kint(j, "local_rank", rk->local_rank);
        ds_json_kint(j, "slot", rk->slot);
        if (spec) json_env(j, plan, spec, r, job_id, attempt);
        ds_json_end(j);
    }
    ds_json_end(j);
    ds_json_key(j, "spares");
    ds_json_arr(j);
    for (int i = 0; i < plan->spares.nhosts; i++) {
        const ds_host *h = &plan->spares.hosts[i];
        ds_json_obj(j);
        ds_json_kstr(j, "host", h->name);
        ds_json_key(j, "slots");
        json_slots(j, h->slots, h->nkept);
        ds_json_end(j);
    }
    ds_json_end(j);
    ds_json_end(j);
    ds_json_newline(j);
}

void ds_plan_write_json_spec(const ds_plan *plan, const ds_jobspec *spec, const char *job_id,
                             int attempt, int pretty, FILE *out) {
    ds_json j;
    ds_json_init_file(&j, out, pretty);
    write_plan(&j, plan, spec, job_id, attempt);
}

void ds_plan_write_json(const ds_plan *plan, FILE *out) {
    ds_plan_write_json_spec(plan, NULL, NULL, 0, 1, out);
}

char *ds_plan_json(const ds_plan *plan, const ds_jobspec *spec, const char *job_id, int attempt,
                   int pretty) {
    ds_json j;
    ds_json_init_buf(&j, pretty);
    write_plan(&j, plan, spec, job_id, attempt);
    if (j.bad) {
        ds_buf_free(&j.text);
        return NULL;
    }
    return (char *)j.text.data; /* the caller frees it */
}
