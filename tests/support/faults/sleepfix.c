/*
 * Preloaded before libfaketime in the clock-skew fault's processes (tests/support/fakeclock.py).
 *
 * Why: Debian bookworm's libfaketime 0.9.10, with FAKETIME_DONT_FAKE_MONOTONIC=1, turns
 * clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...) into a negative time and the kernel
 * answers EINVAL (wolfcw/libfaketime#426, fixed after 0.9.10): Python 3.11's time.sleep
 * raises OSError. A sleep on a clock left unfaked needs no translation, so it goes straight
 * to the kernel here; a sleep on any other clock goes on to libfaketime's definition.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*sleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *request,
                    struct timespec *remain) {
    if (clock_id == CLOCK_MONOTONIC || clock_id == CLOCK_BOOTTIME) {
        /* clock_nanosleep returns the error number; the raw syscall sets errno */
        return syscall(SYS_clock_nanosleep, clock_id, flags, request, remain) ? errno : 0;
    }
    static sleep_fn next;
    if (next == NULL) {
        next = (sleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
    }
    return next(clock_id, flags, request, remain);
}
