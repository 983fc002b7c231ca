# A second thread for one Decoder: the change-event rows written while the calling
# thread writes the typed tables of the same changes.
#
# A Decoder that builds both outputs does two independent pieces of work per change:
# the typed pass (parse each value into its column) and the event pass (copy or format
# each value as PostgreSQL text into the maps). They read the same messages and write
# disjoint builders (RelBuilders against EvStore), and both run without the GIL on C
# structs only (block_writers.pxi, txn_window.pxi), so on a machine with a second core
# the event pass of a window runs on a helper thread beside the typed pass
# (window_write). One core does the sum of the two; two do about the slower one.
#
# The helpers are plain OS threads started through CPython's portable thread API; they
# never touch a Python object and never take the GIL. Each waits on its `go` lock for a
# job (a C function and its argument), runs it, and releases `done`; the caller waits on
# `done` before it reads anything the job wrote (the lock hand-over orders the
# memory). A Decoder takes a helper from the process's idle list for one feed() and
# gives it back at the end, so a process that makes a Decoder per batch starts a thread
# once, and a process holds as many helpers as it has feeds running at once. A forked
# child has none of its parent's threads: the list is forgotten there (and the child
# starts its own).

cdef extern from *:
    """
    typedef void (*pgo_job_fn)(void *);

    /* The hand-over, both ways: a counter the other side waits to see move. The waiter
       spins a while first (a sleeping thread takes tens of microseconds to wake, and a
       window's job takes a few hundred), then sleeps on a lock; the side that moves the
       counter releases that lock only when the waiter said it sleeps, and exactly one
       of the two takes the "sleeps" flag back (an exchange), so a release is never
       lost and never left over. Without GCC's atomics (MSVC) the waiter sleeps at once:
       the same hand-over on the locks alone. */
    #if defined(__GNUC__)
    #  define PGO_HELPER_SPIN 1
    #  define pgo_ld(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
    #  define pgo_inc(p) __atomic_add_fetch((p), 1, __ATOMIC_SEQ_CST)
    #  define pgo_xchg(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
    #  if defined(__x86_64__) || defined(__i386__)
    #    define pgo_pause() __builtin_ia32_pause()
    #  elif defined(__aarch64__)
    #    define pgo_pause() __asm__ __volatile__("yield" ::: "memory")
    #  else
    #    define pgo_pause() ((void)0)
    #  endif
    #else
    #  define PGO_HELPER_SPIN 0
    #endif
    /* a monotonic clock, for the split of a window's events between the two threads */
    #if defined(_WIN32)
    #  include <windows.h>
    static int64_t pgo_now_ns(void) {
        LARGE_INTEGER f, c;
        QueryPerformanceFrequency(&f);
        QueryPerformanceCounter(&c);
        return (int64_t)((double)c.QuadPart * 1e9 / (double)f.QuadPart);
    }
    #else
    #  include <time.h>
    static int64_t pgo_now_ns(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
    }
    #endif

    /* pauses the helper waits for the next job awake (about 0.1-0.3 ms: the calling
       thread's scan of the next window), and the caller for the job's end (0.2-0.6 ms);
       a waiter awake longer would take a core a busy machine's other work needs */
    #define PGO_SPIN_JOB (1 << 12)
    #define PGO_SPIN_DONE (1 << 13)

    typedef struct pgo_signal {
        PyThread_type_lock lock;        /* held while nobody is woken through it */
        long count;                     /* moved by the signalling side */
        long seen;                      /* the waiting side's: what it saw last */
        int sleeps;                     /* the waiter is (about to be) asleep on lock */
    } pgo_signal;

    static void pgo_signal_raise(pgo_signal *s) {
    #if PGO_HELPER_SPIN
        pgo_inc(&s->count);
        if (pgo_xchg(&s->sleeps, 0) == 1)
            PyThread_release_lock(s->lock);
    #else
        PyThread_release_lock(s->lock);
    #endif
    }

    static void pgo_signal_wait(pgo_signal *s, long spin) {
    #if PGO_HELPER_SPIN
        long want = s->seen + 1, i;
        for (i = 0; i < spin; i++) {
            if (pgo_ld(&s->count) == want)
                goto seen;
            pgo_pause();
        }
        for (;;) {
            pgo_xchg(&s->sleeps, 1);
            if (pgo_ld(&s->count) == want) {
                if (pgo_xchg(&s->sleeps, 0) == 1)
                    goto seen;              /* (taken back: no release is coming) */
                /* the signaller took the flag: its release is coming, take it */
            }
            PyThread_acquire_lock(s->lock, WAIT_LOCK);
            /* every way out sees the count moved, with an acquiring load: the job's
               arguments, written before the count, are this thread's to read (a
               release comes only after the count moved; one that came without it
               would never start a job, the wait goes back to sleep) */
            if (pgo_ld(&s->count) == want)
                goto seen;
        }
    seen:
        s->seen = want;
    #else
        (void)spin;
        PyThread_acquire_lock(s->lock, WAIT_LOCK);
    #endif
    }

    typedef struct pgo_helper {
        pgo_signal go, done;
        pgo_job_fn fn;
        void *arg;
        struct pgo_helper *next;                /* the idle list */
    } pgo_helper;

    static void pgo_helper_main(void *arg) {
        pgo_helper *h = (pgo_helper *)arg;
        for (;;) {
            pgo_signal_wait(&h->go, PGO_SPIN_JOB);
            h->fn(h->arg);
            pgo_signal_raise(&h->done);
        }
    }

    /* A new helper thread, waiting for its first job; NULL when none could be made. */
    static pgo_helper *pgo_helper_new(void) {
        pgo_helper *h = (pgo_helper *)calloc(1, sizeof *h);
        if (h == NULL)
            return NULL;
        h->go.lock = PyThread_allocate_lock();
        h->done.lock = PyThread_allocate_lock();
        if (h->go.lock == NULL || h->done.lock == NULL)
            goto fail;
        /* both held: a wait blocks on them until the other side releases */
        PyThread_acquire_lock(h->go.lock, WAIT_LOCK);
        PyThread_acquire_lock(h->done.lock, WAIT_LOCK);
        if (PyThread_start_new_thread(pgo_helper_main, h) == PYTHREAD_INVALID_THREAD_ID)
            goto fail;
        return h;
    fail:
        if (h->go.lock != NULL) PyThread_free_lock(h->go.lock);
        if (h->done.lock != NULL) PyThread_free_lock(h->done.lock);
        free(h);
        return NULL;
    }

    static inline void pgo_helper_start(pgo_helper *h, pgo_job_fn fn, void *arg) {
        h->fn = fn;
        h->arg = arg;
        pgo_signal_raise(&h->go);
    }

    static inline void pgo_helper_wait(pgo_helper *h) {
        pgo_signal_wait(&h->done, PGO_SPIN_DONE);
    }
    """
    ctypedef void (*pgo_job_fn)(void *) noexcept nogil
    ctypedef struct pgo_helper:
        pgo_helper *next
    pgo_helper *pgo_helper_new() noexcept
    void pgo_helper_start(pgo_helper *h, pgo_job_fn fn, void *arg) noexcept nogil
    void pgo_helper_wait(pgo_helper *h) noexcept nogil
    int64_t pgo_now_ns() noexcept nogil


cdef Py_ssize_t g_helper_min_feed = 256 << 10    # a smaller feed: the calling thread only
cdef Py_ssize_t g_helper_min_changes = 256       # a smaller window: likewise (a hand-over
                                                 # costs a few microseconds, a sleeping
                                                 # helper's wake-up tens)

cdef pgo_helper *g_idle_helpers = NULL       # (touched under the GIL only)
cdef Py_ssize_t g_helpers_started = 0
cdef Py_ssize_t g_helper_jobs = 0            # jobs run on a helper (tests: the path ran)
cdef Py_ssize_t g_own_shares = 0             # windows whose last events the calling thread wrote
cdef Py_ssize_t g_helper_dropped = 0         # feeds that gave their helper back (no gain)
cdef Py_ssize_t g_export_names = 0           # exports whose event names a helper wrote
DEF HELPER_STRIKES = 2                       # hand-overs in a row that gained nothing: the
                                             # feed goes on without its helper


cdef pgo_helper *helper_take() noexcept:
    """An idle helper (a new one when none is idle), or NULL when no thread could be
    started: the caller then does the work itself. Under the GIL."""
    global g_idle_helpers, g_helpers_started
    cdef pgo_helper *h = g_idle_helpers
    if h != NULL:
        g_idle_helpers = h.next
        h.next = NULL
        return h
    h = pgo_helper_new()
    if h != NULL:
        g_helpers_started += 1
    return h


cdef void helper_give(pgo_helper *h) noexcept:
    """Back to the idle list (its job waited for). Under the GIL."""
    global g_idle_helpers
    if h != NULL:
        h.next = g_idle_helpers
        g_idle_helpers = h


def _forget_helpers():
    """In a forked child: the parent's helper threads do not exist here."""
    global g_idle_helpers, g_helpers_started
    g_idle_helpers = NULL
    g_helpers_started = 0


cdef double g_helper_share = -1         # tests: the calling thread's share of a window's
                                        # events, fixed (-1: each Decoder's own, from its times)


def _set_helper_share(double share):
    """Tests: the share of a window's changes whose events the calling thread writes
    (0 to 1), or -1 for each Decoder's own; returns the old setting."""
    global g_helper_share
    old = g_helper_share
    g_helper_share = share
    return old


cdef int g_helper_guard = 1              # 1: a feed gives back a helper that gains nothing;
                                        # tests: 0 keeps it whatever, 2 counts every
                                        # hand-over as gaining nothing


def _set_helper_guard(int mode):
    """Tests: 1 (the default) a feed gives back a helper whose hand-overs gain nothing,
    0 keeps it whatever they take, 2 takes every hand-over as gaining nothing; returns
    the old setting."""
    global g_helper_guard
    old = g_helper_guard
    g_helper_guard = mode
    return old


cdef bint g_helper_append_fault = False  # tests: the calling thread's share of a window's
                                        # events fails to append, as past int32 offsets


def _set_helper_append_fault(bint on):
    """Tests: appending the calling thread's share of a window's events fails as it
    does past 2 GiB of int32 offsets (the writer then goes on over that share row-wise);
    returns the old setting."""
    global g_helper_append_fault
    old = g_helper_append_fault
    g_helper_append_fault = on
    return old


def _set_helper_limits(Py_ssize_t feed_bytes, Py_ssize_t changes):
    """Tests: the smallest feed and window the helper takes; returns the old pair."""
    global g_helper_min_feed, g_helper_min_changes
    old = (g_helper_min_feed, g_helper_min_changes)
    g_helper_min_feed = feed_bytes
    g_helper_min_changes = changes
    return old


def _helper_stats():
    """(helper threads started in this process, jobs run on them, windows whose last
    changes' events the calling thread wrote beside the helper's, feeds that gave their
    helper back because it gained nothing, exports whose change-event names a helper
    wrote): for tests."""
    return g_helpers_started, g_helper_jobs, g_own_shares, g_helper_dropped, g_export_names


import os as _os
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_forget_helpers)


cdef int default_threads():
    """The threads a Decoder uses when not told: 2 when this process may run on two
    CPUs or more, else 1. PGOUTPUT_FAST_DECODER_THREADS sets it for the whole process
    (1: every Decoder on its calling thread only)."""
    cdef object env = _os.environ.get("PGOUTPUT_FAST_DECODER_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"PGOUTPUT_FAST_DECODER_THREADS={env!r} is not a whole number "
                             "(1: no helper thread, 2: one)") from None
    try:
        n = len(_os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = _os.cpu_count() or 1
    return 2 if n >= 2 else 1
