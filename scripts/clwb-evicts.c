/* Whether this CPU's clwb keeps the line it writes back: the cycles of one load of a line just
 * stored to and written back (clwb, then sfence), against a line only stored to, and one flushed
 * with clflushopt (which evicts by definition). Where clwb evicts too (this project's AMD EPYC:
 * ~420 cycles against ~60), every commit that reads a metadata line an earlier commit wrote back
 * (the pinode, an extent record, a bitmap word) waits for memory. docs/benchmarks.md
 * ("Where a log record's commit waits", 2026-11-27):
 * cc -O2 -mclwb -mclflushopt -o clwb-evicts scripts/clwb-evicts.c && ./clwb-evicts */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

#define LINES 4096

static inline uint64_t ticks(void) {
    unsigned aux;
    return __rdtscp(&aux);
}

/* The cycles of one load of `p`, fenced so that nothing else overlaps it. */
static uint64_t load_cycles(volatile char *p, uint64_t *sink) {
    _mm_lfence();
    uint64_t start = ticks();
    *sink += *p;
    uint64_t end = ticks();
    return end - start;
}

int main(void) {
    char *buf = aligned_alloc(64, LINES * 64);
    if (!buf)
        return 1;
    for (int i = 0; i < LINES * 64; i++)
        buf[i] = (char)i;
    uint64_t after_clwb = 0, cached = 0, after_clflushopt = 0, sink = 0;
    for (int i = 0; i < LINES; i++) {
        char *p = buf + i * 64;
        p[0]++;
        _mm_clwb(p);
        _mm_sfence();
        after_clwb += load_cycles(p, &sink);
        p[1]++;
        _mm_sfence();
        cached += load_cycles(p, &sink);
        p[2]++;
        _mm_clflushopt(p);
        _mm_sfence();
        after_clflushopt += load_cycles(p, &sink);
    }
    printf("cycles per load: after clwb %.0f, cached %.0f, after clflushopt %.0f (%llu)\n",
           (double)after_clwb / LINES, (double)cached / LINES, (double)after_clflushopt / LINES,
           (unsigned long long)(sink & 1));
    free(buf);
    return 0;
}
