/* Workloads of the profiler's end-to-end test, named so their frames are unmistakable.
 *   busy spin <seconds>  - a pure user-space loop
 *   busy stat <seconds>  - stat() of non-existent paths in a loop (kernel path walk)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long jitterscope_busy_spin(double secs) {
    volatile unsigned long x = 0;
    double end = now() + secs;
    while (now() < end)
        for (int i = 0; i < 100000; i++)
            x += i;
    return x;
}

__attribute__((noinline)) unsigned long jitterscope_stat_storm(double secs) {
    struct stat st;
    char path[64];
    unsigned long n = 0;
    double end = now() + secs;
    while (now() < end)
        for (int i = 0; i < 1000; i++, n++) {
            /* Relative: in the test's own directory, whose removal prunes the negative
               dentries. Names in /tmp stayed for good, millions a run, and a later lab
               scenario's diagnosis saw them. */
            snprintf(path, sizeof path, "absent-%lu", n);
            stat(path, &st);
        }
    return n;
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    double secs = atof(argv[2]);
    if (!strcmp(argv[1], "spin"))
        printf("%lu\n", jitterscope_busy_spin(secs));
    else if (!strcmp(argv[1], "stat"))
        printf("%lu\n", jitterscope_stat_storm(secs));
    else
        return 2;
    return 0;
}
