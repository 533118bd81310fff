/*
 * clockshim: an LD_PRELOAD library that moves a process's wall clock by an offset
 * read from a file, for fencecheck's `clock-jump` fault on Redis instances.
 *
 * Why not Debian's libfaketime (0.9.10): preloaded into Debian's redis-server it
 * deadlocks before the server listens. Its initialisation dlsym()s "__ftime",
 * which glibc 2.36 no longer exports; the failed lookup mallocs its error
 * message; redis' jemalloc calls clock_gettime() while holding its init lock;
 * libfaketime, not yet initialised, calls dlsym() again -> malloc -> the same
 * jemalloc lock: "libfaketime: Unexpected recursive calls to clock_gettime()
 * without proper initialization", then a futex wait forever. Every knob tried
 * (FAKETIME_DONT_FAKE_MONOTONIC, DONT_FAKE_MONOTONIC, FAKETIME_NO_CACHE,
 * FAKETIME_DISABLE_SHM, FAKETIME_TIMESTAMP_FILE, libfaketimeMT.so.1) hangs the
 * same way.
 *
 * So this shim never calls dlsym, malloc or any libc time function: every clock
 * is read with the raw syscall, and the offset file is read with raw
 * open/read/close. Only the wall clock moves (gettimeofday, time,
 * clock_gettime(CLOCK_REALTIME, CLOCK_REALTIME_COARSE)): Redis 7.0 stamps and
 * checks key expiry with mstime()/ustime(), i.e. gettimeofday(), so a jump
 * forward expires every key set before it early; monotonic clocks are left
 * alone (the event loop's timers keep their pace).
 *
 * CLOCKSHIM_OFFSET_FILE names the file: one decimal integer, nanoseconds to add
 * to the wall clock (missing or unreadable file: 0). It is read again at most
 * once a millisecond of real time, so a change is seen within about 1 ms; the
 * harness writes it atomically (a rename). Without the variable the shim only
 * passes every call through.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char offset_path[4096];
static int64_t cached_offset_ns;   /* accessed with __atomic builtins */
static int64_t last_read_ns = INT64_MIN;

__attribute__((constructor)) static void clockshim_init(void) {
    const char *p = getenv("CLOCKSHIM_OFFSET_FILE");
    if (p && strlen(p) < sizeof offset_path) {
        memcpy(offset_path, p, strlen(p) + 1);
    }
}

static int raw_clock_gettime(clockid_t clk, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

static int64_t parse_ns(const char *s, long n) {
    int64_t v = 0;
    int neg = 0;
    long i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        v = v * 10 + (s[i] - '0');
    }
    return neg ? -v : v;
}

/* The offset now, given the real wall clock now (ns). */
static int64_t offset_ns(int64_t real_ns) {
    if (offset_path[0] == '\0') return 0;
    int64_t last = __atomic_load_n(&last_read_ns, __ATOMIC_RELAXED);
    int64_t since = real_ns - last;
    if (last != INT64_MIN && since >= 0 && since < 1000000) {
        return __atomic_load_n(&cached_offset_ns, __ATOMIC_RELAXED);
    }
    int saved = errno;
    int64_t off = 0;
    long fd = syscall(SYS_openat, AT_FDCWD, offset_path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[64];
        long n = syscall(SYS_read, fd, buf, sizeof buf);
        if (n > 0) off = parse_ns(buf, n);
        syscall(SYS_close, fd);
    }
    errno = saved;
    __atomic_store_n(&cached_offset_ns, off, __ATOMIC_RELAXED);
    __atomic_store_n(&last_read_ns, real_ns, __ATOMIC_RELAXED);
    return off;
}

static void shift(struct timespec *ts) {
    int64_t real = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
    int64_t t = real + offset_ns(real);
    ts->tv_sec = (time_t)(t / 1000000000LL);
    ts->tv_nsec = (long)(t % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int r = raw_clock_gettime(clk, ts);
    if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) shift(ts);
    return r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int r = raw_clock_gettime(CLOCK_REALTIME, &ts);
    if (r != 0) return r;
    shift(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (raw_clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    shift(&ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
