/* OpenBLAS's cores ranked by the instruction set their kernels use, and the decision to
 * override the core OpenBLAS picked. OpenBLAS 0.3.21 picks by CPU family and model, and a
 * model it does not know gets its generic core: on a Xeon of family 6, model 207
 * (AVX-512 with BF16) it runs Prescott's SSE kernels, 2.7x slower on a GPT step than
 * SkylakeX's. The flags say what the CPU can run whatever its model. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "blas_core.h"

enum { SSE, AVX, AVX2, AVX512, AVX512_BF16 };

static const struct {
    const char *name;
    int level;
} CORES[] = {
    {"Katmai", SSE},        {"Coppermine", SSE},   {"Northwood", SSE},   {"Prescott", SSE},
    {"Banias", SSE},        {"Atom", SSE},         {"Core2", SSE},       {"Penryn", SSE},
    {"Dunnington", SSE},    {"Nehalem", SSE},      {"Athlon", SSE},      {"Opteron", SSE},
    {"Opteron_SSE3", SSE},  {"Barcelona", SSE},    {"Nano", SSE},        {"Bobcat", SSE},
    {"Sandybridge", AVX},   {"Bulldozer", AVX},    {"Piledriver", AVX},  {"Steamroller", AVX},
    {"Excavator", AVX},     {"Haswell", AVX2},     {"Zen", AVX2},        {"SkylakeX", AVX512},
    {"Cooperlake", AVX512_BF16},
};

/* The core dsrun sets for each level: names OpenBLAS 0.3.21 accepts in OPENBLAS_CORETYPE
 * (it has no SapphireRapids). */
static const char *const BEST[] = {[AVX] = "Sandybridge", [AVX2] = "Haswell",
                                   [AVX512] = "SkylakeX", [AVX512_BF16] = "Cooperlake"};

static const struct {
    unsigned flag;
    const char *name;
} FLAG_NAMES[] = {{DS_CPU_AVX, "avx"},           {DS_CPU_AVX2, "avx2"},
                  {DS_CPU_FMA, "fma"},           {DS_CPU_AVX512F, "avx512f"},
                  {DS_CPU_AVX512BW, "avx512bw"}, {DS_CPU_AVX512VL, "avx512vl"},
                  {DS_CPU_AVX512DQ, "avx512dq"}, {DS_CPU_AVX512BF16, "avx512_bf16"}};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static int has(unsigned flags, unsigned want) { return (flags & want) == want; }

/* The highest level the flags support, or -1 when not even AVX. */
static int cpu_level(unsigned flags) {
    const unsigned avx512 = DS_CPU_AVX512F | DS_CPU_AVX512BW | DS_CPU_AVX512VL | DS_CPU_AVX512DQ;
    const unsigned avx2 = DS_CPU_AVX | DS_CPU_AVX2 | DS_CPU_FMA;
    if (has(flags, avx2 | avx512 | DS_CPU_AVX512BF16)) return AVX512_BF16;
    if (has(flags, avx2 | avx512)) return AVX512;
    if (has(flags, avx2)) return AVX2;
    if (has(flags, DS_CPU_AVX)) return AVX;
    return -1;
}

/* A core's level, or -1 for a name not in the table. */
static int core_level(const char *core) {
    for (size_t i = 0; core && i < N_OF(CORES); i++)
        if (!strcasecmp(core, CORES[i].name)) return CORES[i].level;
    return -1;
}

const char *ds_blas_core_best(unsigned flags) {
    int level = cpu_level(flags);
    return level > SSE ? BEST[level] : NULL;
}

int ds_blas_core_supported(unsigned flags, const char *core) {
    for (int level = AVX; level <= cpu_level(flags); level++)
        if (core && !strcasecmp(core, BEST[level])) return 1;
    return 0;
}

const char *ds_blas_core_choice(unsigned flags, const char *openblas_core,
                                const char *user_coretype) {
    if (user_coretype) return NULL;
    int picked = core_level(openblas_core), best = cpu_level(flags);
    if (picked < 0 || best <= picked) return NULL;
    return BEST[best];
}

void ds_cpu_flags_names(unsigned flags, char *buf, size_t cap) {
    size_t used = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < N_OF(FLAG_NAMES) && used < cap; i++)
        if (flags & FLAG_NAMES[i].flag) {
            int n = snprintf(buf + used, cap - used, "%s%s", used ? " " : "", FLAG_NAMES[i].name);
            if (n < 0) return;
            used += (size_t)n;
        }
}

unsigned ds_cpu_flags(void) {
    unsigned f = 0;
#if defined(__x86_64__) || defined(__i386__)
    /* libgcc's checks include the OS's: AVX-512 counts only when XCR0 enables its state. */
    __builtin_cpu_init();
    f |= __builtin_cpu_supports("avx") ? DS_CPU_AVX : 0;
    f |= __builtin_cpu_supports("avx2") ? DS_CPU_AVX2 : 0;
    f |= __builtin_cpu_supports("fma") ? DS_CPU_FMA : 0;
    f |= __builtin_cpu_supports("avx512f") ? DS_CPU_AVX512F : 0;
    f |= __builtin_cpu_supports("avx512bw") ? DS_CPU_AVX512BW : 0;
    f |= __builtin_cpu_supports("avx512vl") ? DS_CPU_AVX512VL : 0;
    f |= __builtin_cpu_supports("avx512dq") ? DS_CPU_AVX512DQ : 0;
    f |= __builtin_cpu_supports("avx512bf16") ? DS_CPU_AVX512BF16 : 0;
#endif
    return f;
}
