/* A host whose wall clock is off: LD_PRELOAD this into a process and set SKEWED_CLOCK_SECONDS.
 * Only the wall clock (CLOCK_REALTIME, gettimeofday, time) moves; the monotonic clock, which
 * sleeps and timeouts wait on, stays true. Debian's libfaketime moves both, and hangs Python
 * 3.11's time.sleep. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long skew(void) {
    const char *seconds = getenv("SKEWED_CLOCK_SECONDS");
    return seconds ? atol(seconds) : 0;
}

int clock_gettime(clockid_t clock, struct timespec *now) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int failed = real(clock, now);
    if (!failed && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        now->tv_sec += skew();
    return failed;
}

int gettimeofday(struct timeval *now, void *zone) {
    static int (*real)(struct timeval *, void *);
    if (!real) real = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
    int failed = real(now, zone);
    if (!failed && now) now->tv_sec += skew();
    return failed;
}

time_t time(time_t *out) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (out) *out = now.tv_sec;
    return now.tv_sec;
}
