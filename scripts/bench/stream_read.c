// The machine's streaming-read bandwidth: THREADS threads each sum their share of a 768 MiB
// buffer five times, as a decode step reads its weights once per token. A one-row decode that
// reads B bytes per token cannot pass GB/s / B tokens per second on this machine, whichever
// program runs it. Usage:
//   gcc -O3 -march=native -pthread scripts/bench/stream_read.c -o /tmp/stream_read
//   /tmp/stream_read 2
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BYTES (768UL << 20)
#define PASSES 5
static uint64_t *buf;
static int threads;

static void *sum_share(void *arg) {
    // Whole runs of four words, so that the last share stays inside the buffer.
    size_t per = BYTES / 8 / threads / 4 * 4, first = (size_t)arg * per;
    // Four independent sums, so the adds never wait on each other.
    uint64_t s[4] = {0, 0, 0, 0};
    for (int pass = 0; pass < PASSES; pass++)
        for (size_t i = first; i < first + per; i += 4)
            for (int j = 0; j < 4; j++) s[j] += buf[i + j];
    return (void *)(uintptr_t)(s[0] + s[1] + s[2] + s[3]);
}

int main(int argc, char **argv) {
    threads = argc > 1 ? atoi(argv[1]) : 1;
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "usage: %s THREADS (1-64)\n", argv[0]);
        return 2;
    }
    buf = aligned_alloc(64, BYTES);
    memset(buf, 1, BYTES);
    for (int run = 0; run < 3; run++) {
        struct timespec a, b;
        pthread_t th[64];
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long t = 0; t < threads; t++) pthread_create(&th[t], 0, sum_share, (void *)t);
        for (int t = 0; t < threads; t++) pthread_join(th[t], 0);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
        printf("%d threads: %.1f GB/s\n", threads, (double)PASSES * BYTES / s / 1e9);
    }
    return 0;
}
