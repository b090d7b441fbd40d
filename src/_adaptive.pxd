# The thread count of each run of a multi-threaded plan, chosen from measured
# run times so that CPU contention cannot make it slower than one thread.
#
# An OpenMP parallel region ends in a barrier that waits for every thread of
# the team.  When another busy process shares the cores, a worker thread is
# often descheduled for a whole scheduler slice, and each region of the run
# then waits for it: a 2-thread run became 1.5-7x slower than the same plan on
# one thread.  A run with one thread has no barrier to wait at.
#
# A run context therefore times its runs (one monotonic clock read on each
# side of the launch loop) and keeps the last RING run times of each option,
# "full" (the plan's thread count) and "single" (one thread).  It runs the
# chosen option; every `interval` runs it probes the other option for up to
# PROBE_RUNS runs and switches when the other's mean time is clearly lower
# (below SWITCH_RATIO times the chosen one's).  A probe run slower than
# ABORT_RATIO times the chosen option's mean ends the probe there, so a
# probe that is plainly losing costs one run.  A probe that confirms the
# choice doubles the interval (up to MAX_INTERVAL runs); a switch resets it to
# MIN_INTERVAL.  When the chosen option's mean drifts above DRIFT_RATIO
# times its value at the last decision (a competitor arrived), the next run
# probes at once.  On a quiet machine the only cost is one single-thread run
# every MAX_INTERVAL runs.
#
# Results do not depend on the choice: launches are bound (partitions, scratch,
# blocking) for the plan's thread count, and every kernel computes each output
# element in an order fixed at bind time, whichever thread runs it
# (tests/test_threads.py checks this bitwise for every op family).

cdef extern from *:
    """
    #if defined(_WIN32)
    #include <windows.h>
    static double rlx_monotonic_seconds(void) {
        LARGE_INTEGER f, c;
        QueryPerformanceFrequency(&f);
        QueryPerformanceCounter(&c);
        return (double)c.QuadPart / (double)f.QuadPart;
    }
    #else
    #include <time.h>
    static double rlx_monotonic_seconds(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
    #endif
    #define RLX_SWITCH_RATIO 0.9
    #define RLX_DRIFT_RATIO 1.5
    #define RLX_ABORT_RATIO 1.25
    """
    double rlx_monotonic_seconds() noexcept nogil
    const double SWITCH_RATIO "RLX_SWITCH_RATIO"
    const double DRIFT_RATIO "RLX_DRIFT_RATIO"
    const double ABORT_RATIO "RLX_ABORT_RATIO"

cdef enum:
    RING = 5
    PROBE_RUNS = 6
    MIN_INTERVAL = 16
    MAX_INTERVAL = 512


cdef struct Chooser:
    int full               # the plan's thread count (> 1 for the chooser to matter)
    int cur                # chosen option: 0 = full, 1 = single
    int probing            # runs left in the current probe of the other option
    int since              # runs of the chosen option since the last decision
    int interval           # runs of the chosen option between probes
    double ref             # the chosen option's mean at the last decision (0: none yet)
    double ring[2][RING]   # the last run times of each option
    int count[2]
    int pos[2]
    long long runs         # statistics: runs, runs on one thread, switches
    long long single_runs
    long long switches


cdef inline void chooser_init(Chooser* ch, int full) noexcept nogil:
    cdef int i, j
    ch.full = full
    ch.cur = 0
    ch.probing = 0
    ch.since = 0
    ch.interval = MIN_INTERVAL
    ch.ref = 0
    for i in range(2):
        ch.count[i] = 0
        ch.pos[i] = 0
        for j in range(RING):
            ch.ring[i][j] = 0
    ch.runs = 0
    ch.single_runs = 0
    ch.switches = 0


cdef inline int chooser_option(const Chooser* ch) noexcept nogil:
    """The option (0 full, 1 single) the next run uses."""
    return 1 - ch.cur if ch.probing > 0 else ch.cur


cdef inline int chooser_threads(const Chooser* ch) noexcept nogil:
    """The thread count of the next run."""
    return 1 if chooser_option(ch) == 1 else ch.full


cdef inline double _ring_mean(const Chooser* ch, int opt) noexcept nogil:
    # The mean, not the median: under contention a multi-threaded run's
    # median can look fine while a few descheduled runs take many times it,
    # and throughput pays for those.
    cdef double t = 0
    cdef int n = ch.count[opt], i
    if n == 0:
        return 0
    for i in range(n):
        t += ch.ring[opt][i]
    return t / n


cdef inline void _ring_push(Chooser* ch, int opt, double seconds) noexcept nogil:
    ch.ring[opt][ch.pos[opt]] = seconds
    ch.pos[opt] = (ch.pos[opt] + 1) % RING
    if ch.count[opt] < RING:
        ch.count[opt] += 1


cdef inline void _chooser_decide(Chooser* ch) noexcept nogil:
    cdef int other = 1 - ch.cur
    cdef double m_other = _ring_mean(ch, other)
    cdef double m_cur = _ring_mean(ch, ch.cur)
    if m_other < SWITCH_RATIO * m_cur:
        ch.cur = other
        ch.interval = MIN_INTERVAL
        ch.switches += 1
    else:
        ch.interval = ch.interval * 2 if ch.interval * 2 <= MAX_INTERVAL else MAX_INTERVAL
    ch.since = 0
    ch.ref = _ring_mean(ch, ch.cur)


cdef inline void chooser_record(Chooser* ch, int opt, double seconds) noexcept nogil:
    """Account a run of option `opt` (as chooser_option returned) that took
    `seconds`, and plan the next ones."""
    ch.runs += 1
    if opt == 1:
        ch.single_runs += 1
    _ring_push(ch, opt, seconds)
    if ch.probing > 0:
        ch.probing -= 1
        # A probe run clearly slower than the chosen option ends the probe at
        # once: under contention a 2-thread run can take many times a
        # 1-thread one, and on a quiet machine the 1-thread probe is the cost.
        if ch.probing == 0 or seconds > ABORT_RATIO * _ring_mean(ch, ch.cur):
            ch.probing = 0
            _chooser_decide(ch)
        return
    ch.since += 1
    if ch.since >= ch.interval or (ch.ref > 0 and ch.count[ch.cur] == RING
                                   and _ring_mean(ch, ch.cur) > DRIFT_RATIO * ch.ref):
        ch.count[1 - ch.cur] = 0          # the other option's old times are stale
        ch.pos[1 - ch.cur] = 0
        ch.probing = PROBE_RUNS


cdef inline int chooser_begin(Chooser* ch, int nthreads, int* opt, double* t0) noexcept nogil:
    """Start a run asked for `nthreads` (> 1): returns the thread count to
    use; `opt` and `t0` go to chooser_end when the run has finished."""
    if ch.full != nthreads:
        chooser_init(ch, nthreads)
    opt[0] = chooser_option(ch)
    t0[0] = rlx_monotonic_seconds()
    return chooser_threads(ch)


cdef inline void chooser_end(Chooser* ch, int opt, double t0) noexcept nogil:
    chooser_record(ch, opt, rlx_monotonic_seconds() - t0)
