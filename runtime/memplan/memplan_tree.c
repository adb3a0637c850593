#include "memplan_tree.h"

#include <stdlib.h>
#include <string.h>

struct mp_arena {
    struct mp_arena *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

static void *arena_get(mp_arena **a, size_t bytes) {
    bytes = (bytes + 15) & ~(size_t)15;
    if (!*a || (*a)->used + bytes > (*a)->cap) {
        size_t cap = bytes > 65536 ? bytes : 65536;
        mp_arena *n = malloc(sizeof *n + cap);
        if (!n) return NULL;
        n->next = *a, n->used = 0, n->cap = cap;
        *a = n;
    }
    void *p = (*a)->mem + (*a)->used;
    (*a)->used += bytes;
    memset(p, 0, bytes);
    return p;
}

void mp_arena_free(mp_arena *a) {
    while (a) {
        mp_arena *n = a->next;
        free(a);
        a = n;
    }
}

typedef struct build {
    mp_arena **arena;
    int (*stage_of)(const void *ctx, const ds_stage *owner);
    const void *ctx;
    ds_err *err;
} build;

static const struct {
    const char *name;
    mp_kind kind;
} KINDS[] = {{"Linear", MP_LINEAR},         {"Embedding", MP_EMBEDDING},
             {"PositionEmbedding", MP_POSEMB}, {"LayerNorm", MP_LAYERNORM},
             {"GELU", MP_GELU},             {"Dropout", MP_DROPOUT},
             {"Attention", MP_ATTENTION},   {"Sequential", MP_SEQUENTIAL},
             {"Residual", MP_RESIDUAL},     {"Checkpoint", MP_CHECKPOINT}};

static mp_node *node_new(build *b, mp_kind kind, int nkids, const char *path) {
    mp_node *n = arena_get(b->arena, sizeof *n);
    if (!n) return ds_err_set(b->err, "planner: out of memory"), NULL;
    n->kind = kind;
    n->path = path;
    if (nkids) {
        n->kids = arena_get(b->arena, (size_t)nkids * sizeof *n->kids);
        if (kind == MP_SEQUENTIAL) n->gbuf = arena_get(b->arena, (size_t)nkids * sizeof *n->gbuf);
        if (!n->kids || (kind == MP_SEQUENTIAL && !n->gbuf))
            return ds_err_set(b->err, "planner: out of memory"), NULL;
    }
    return n;
}

static mp_node *convert(build *b, const ds_layer *l) {
    const char *k = l->ops->kind;
    size_t i = 0;
    while (i < sizeof KINDS / sizeof KINDS[0] && strcmp(KINDS[i].name, k)) i++;
    if (i == sizeof KINDS / sizeof KINDS[0])
        return ds_err_set(b->err, "the memory planner does not know layer kind '%s' (%s)", k,
                          l->path), NULL;
    mp_node *n = node_new(b, KINDS[i].kind, l->nchild, l->path);
    if (!n) return NULL;
    n->in_dim = l->in_dim, n->out_dim = l->out_dim, n->heads = l->heads;
    n->dropout = l->p > 0;
    n->input_only = l->ops->input_only && l->ops->input_only(l);
    n->nparam = l->nparam;
    for (int p = 0; p < l->nparam; p++) {
        n->pnumel[p] = l->param[p]->numel;
        n->powner[p] = b->stage_of(b->ctx, l->param[p]->owner);
        if (n->powner[p] < 0)
            return ds_err_set(b->err, "layer %s: parameter '%s' belongs to a stage outside the "
                                      "model", l->path, l->param[p]->name), NULL;
    }
    for (int c = 0; c < l->nchild; c++)
        if (!(n->kids[n->nkids++] = convert(b, l->child[c]))) return NULL;
    return n;
}

/* stage.c's insert_checkpoints: spans of `every` layers, a span of several wrapped in a
 * Sequential, each span in a Checkpoint. */
static mp_node *root_of(build *b, mp_node **top, int n, int every) {
    int nspans = every > 0 ? (n + every - 1) / every : n;
    mp_node *root = node_new(b, MP_SEQUENTIAL, nspans, "");
    if (!root) return NULL;
    for (int i = 0; i < n; i += every > 0 ? every : 1) {
        if (every <= 0) {
            root->kids[root->nkids++] = top[i];
            continue;
        }
        int m = n - i < every ? n - i : every;
        mp_node *span = top[i];
        if (m > 1) {
            if (!(span = node_new(b, MP_SEQUENTIAL, m, top[i]->path))) return NULL;
            for (int j = 0; j < m; j++) span->kids[span->nkids++] = top[i + j];
        }
        mp_node *ck = node_new(b, MP_CHECKPOINT, 1, top[i]->path);
        if (!ck) return NULL;
        ck->kids[ck->nkids++] = span;
        root->kids[root->nkids++] = ck;
    }
    return root;
}

mp_node *mp_tree_build(mp_arena **arena, const ds_stage *s, int every,
                       int (*stage_of)(const void *ctx, const ds_stage *owner), const void *ctx,
                       ds_err *err) {
    build b = {arena, stage_of, ctx, err};
    mp_node **top = arena_get(arena, (size_t)(s->nlayers ? s->nlayers : 1) * sizeof *top);
    if (!top) return ds_err_set(err, "planner: out of memory"), NULL;
    for (int i = 0; i < s->nlayers; i++)
        if (!(top[i] = convert(&b, s->layers[i]))) return ds_err_prefix(err, "stage '%s'", s->name), NULL;
    return root_of(&b, top, s->nlayers, every);
}
