/*
 * Preloaded before libfaketime when the test suites run with a shifted wall clock
 * (tests/timeshift/run). libfaketime shifts CLOCK_REALTIME only (FAKETIME_DONT_FAKE_MONOTONIC),
 * but two of its gaps would hang or break the tests:
 *
 *  - its clock_nanosleep wrapper rejects absolute CLOCK_MONOTONIC deadlines when the monotonic
 *    clock is not shifted (Python's time.sleep fails with EINVAL): such sleeps go straight to the
 *    kernel here;
 *  - it does not wrap C11 cnd_timedwait, whose deadline librdkafka computes from the shifted
 *    realtime clock (a +400 day shift makes every wait last 400 days): the deadline is moved
 *    back onto the real clock here.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_nanosleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);
typedef int (*cnd_timedwait_fn)(cnd_t *, mtx_t *, const struct timespec *);

int clock_nanosleep(clockid_t clock, int flags, const struct timespec *request,
                    struct timespec *remain) {
    if (clock == CLOCK_MONOTONIC || clock == CLOCK_BOOTTIME) {
        long rc = syscall(SYS_clock_nanosleep, clock, flags, request, remain);
        return rc == 0 ? 0 : errno;
    }
    static clock_nanosleep_fn next;
    if (next == NULL) next = (clock_nanosleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
    return next(clock, flags, request, remain);
}

int cnd_timedwait(cnd_t *cond, mtx_t *mutex, const struct timespec *deadline) {
    static cnd_timedwait_fn next;
    if (next == NULL) next = (cnd_timedwait_fn)dlsym(RTLD_NEXT, "cnd_timedwait");
    struct timespec shifted, real;
    clock_gettime(CLOCK_REALTIME, &shifted);          /* through libfaketime */
    syscall(SYS_clock_gettime, CLOCK_REALTIME, &real); /* the kernel's */
    long long offset = (long long)(shifted.tv_sec - real.tv_sec) * 1000000000LL
                       + (shifted.tv_nsec - real.tv_nsec);
    long long at = (long long)deadline->tv_sec * 1000000000LL + deadline->tv_nsec - offset;
    if (at < 0) at = 0;
    struct timespec converted = {at / 1000000000LL, at % 1000000000LL};
    return next(cond, mutex, &converted);
}
