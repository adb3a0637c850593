/* A GPT-2 training step built from the kernels alone (llm.c's loop): what the kernels
 * can do without any engine around them. */
#ifndef BENCH_GPT_STEP_H
#define BENCH_GPT_STEP_H

#include <stddef.h>
#include <stdint.h>

typedef struct gpt_step_cfg {
    int V, maxT, L, NH, C; /* model */
    int B, T;              /* batch */
} gpt_step_cfg;

typedef struct gpt_step gpt_step;

/* NULL when out of memory. */
gpt_step *gpt_step_new(gpt_step_cfg cfg);
void gpt_step_free(gpt_step *g);
size_t gpt_step_params(const gpt_step *g);
/* One forward + backward + AdamW step on (ids, targets) [B*T]; returns the mean loss.
 * times_ms[0..3] (may be NULL) receive forward, backward, grad-norm+AdamW and zeroing. */
double gpt_step_run(gpt_step *g, const int32_t *ids, const int32_t *targets, int step,
                    double times_ms[4]);

#endif
