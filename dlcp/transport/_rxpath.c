/* The UDP driver's receive path in C: recvmmsg and the shared receive core (dlcp/transport/c/rx_core.h,
 * compiled into the ns-3 hosts too), as a CPython extension.
 *
 * `recv(fd)` takes up to `batch` datagrams in one recvmmsg call, each with the TOS byte of its IPv4
 * header (IP_RECVTOS: the ECN bits) and the kernel's receive time (SO_TIMESTAMPNS: how long it
 * waited in the socket buffer). `next()` then hands the batch to the core in order and returns at
 * the first thing the protocol core must see: a datagram the core did not take (the driver passes
 * it to ReceiverCore.on_datagram), or a sender whose FEEDBACK may be due (the mirror asks the core
 * to decide), or None at the end of the batch. `serve(...)` is the receive thread's wait: it sleeps
 * in the driver's epoll set and absorbs the datagrams that come in C, so a datagram the core need
 * not see costs no Python; it returns at the first event, or when another descriptor (control,
 * timers, the wake pipe) needs Python. The methods the mirror (dlcp/transport/rx_mirror.py)
 * calls have the names of the ns-3 host's C++ class (Setup, Open, Close, Budget, Take), so one mirror
 * drives both. `feed` hands the core one datagram without a socket (tests, dlcp bench datapath).
 * The Python driver keeps sockets, threads, control connections and timers (udp_driver.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>

#include "rx_core.h"

#ifndef RXPATH_SOURCE_SHA
#define RXPATH_SOURCE_SHA "unknown"
#endif

#define RECV_SLOT 2048 /* bytes per datagram slot (udpio.RECV_SLOT): a DLCP datagram at 1500 MTU fits */
#define CMSG_ROOM 64   /* IP_TOS (CMSG_SPACE(1) = 24) and SCM_TIMESTAMPNS (CMSG_SPACE(16) = 32) */
#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif

typedef struct {
    PyObject_HEAD
    RxCore core;
    int batch, n, pos;
    PyObject *buffer; /* bytearray: batch slots of RECV_SLOT bytes */
    uint8_t *base;    /* its bytes (never resized), for the core without the GIL */
    struct mmsghdr *mm;
    struct iovec *iov;
    uint8_t *cmsg;
    int32_t *len;   /* per datagram of the batch: length (-1: truncated) */
    uint8_t *ecn;   /* its ECN bits */
    double *queued; /* how long it waited in the socket buffer (0: unknown) */
    double syscall_s, absorb_s;
    uint64_t calls, datagrams;
    uint64_t serve_wakes, serve_returns; /* serve(): epoll wake-ups, returns into Python */
    double timer_at; /* what serve() left the driver's timerfd armed for (CLOCK_MONOTONIC s; INFINITY: off) */
    /* The core and the batch: serve() works on them without the GIL while the driver's other
     * threads may call the mirror's methods, so every method that touches them holds `mu`. */
    pthread_mutex_t mu;
    int mu_ready;
} RxPath;

#define LOCKED(self, stmt)                                                                                             \
    do {                                                                                                               \
        pthread_mutex_lock(&(self)->mu);                                                                               \
        stmt;                                                                                                          \
        pthread_mutex_unlock(&(self)->mu);                                                                             \
    } while (0)

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int RxPath_init(RxPath *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"batch", NULL};
    int batch = 64;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i", names, &batch)) return -1;
    if (batch < 1 || batch > 1024) {
        PyErr_Format(PyExc_ValueError, "batch %d: 1..1024 datagrams", batch);
        return -1;
    }
    if (self->mm) {
        PyErr_SetString(PyExc_RuntimeError, "RxPath is already initialised");
        return -1;
    }
    self->batch = batch;
    self->timer_at = INFINITY;
    if (pthread_mutex_init(&self->mu, NULL) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "RxPath: pthread_mutex_init failed");
        return -1;
    }
    self->mu_ready = 1;
    self->buffer = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)batch * RECV_SLOT);
    self->mm = calloc(batch, sizeof(struct mmsghdr));
    self->iov = calloc(batch, sizeof(struct iovec));
    self->cmsg = calloc(batch, CMSG_ROOM);
    self->len = calloc(batch, sizeof(int32_t));
    self->ecn = calloc(batch, 1);
    self->queued = calloc(batch, sizeof(double));
    if (!self->buffer || !self->mm || !self->iov || !self->cmsg || !self->len || !self->ecn || !self->queued) {
        PyErr_NoMemory();
        return -1;
    }
    uint8_t *buf = self->base = (uint8_t *)PyByteArray_AS_STRING(self->buffer);
    for (int i = 0; i < batch; i++) {
        self->iov[i].iov_base = buf + (size_t)i * RECV_SLOT;
        self->iov[i].iov_len = RECV_SLOT;
        self->mm[i].msg_hdr.msg_iov = &self->iov[i];
        self->mm[i].msg_hdr.msg_iovlen = 1;
        self->mm[i].msg_hdr.msg_control = self->cmsg + (size_t)i * CMSG_ROOM;
        self->mm[i].msg_hdr.msg_controllen = CMSG_ROOM;
    }
    return 0;
}

static void RxPath_dealloc(RxPath *self) {
    rx_free(&self->core);
    if (self->mu_ready) pthread_mutex_destroy(&self->mu);
    Py_XDECREF(self->buffer);
    free(self->mm);
    free(self->iov);
    free(self->cmsg);
    free(self->len);
    free(self->ecn);
    free(self->queued);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ready(RxPath *self) {
    if (!self->core.msgs) {
        PyErr_SetString(PyExc_RuntimeError, "RxPath.Setup has not been called");
        return 0;
    }
    return 1;
}

/* --- the mirror's calls (the names of simulation/ns3/cpp/dlcp_rx.h) ---------------------------- */

static PyObject *RxPath_Setup(RxPath *self, PyObject *args) {
    int enabled;
    unsigned int job, vpp;
    double wall_offset, host_mark_s;
    unsigned long long rows, row_cap, pending;
    if (!PyArg_ParseTuple(args, "pIIddKKK", &enabled, &job, &vpp, &wall_offset, &host_mark_s, &rows, &row_cap,
                          &pending))
        return NULL;
    if (!rows || !pending || !row_cap) {
        PyErr_SetString(PyExc_ValueError, "Setup needs the rows and pending buffers");
        return NULL;
    }
    int r;
    LOCKED(self, r = rx_init(&self->core, enabled, job, vpp, wall_offset, host_mark_s, (double *)(uintptr_t)rows,
                             row_cap, (uint8_t *)(uintptr_t)pending));
    if (r < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *RxPath_Open(RxPath *self, PyObject *args) {
    unsigned int src, iter, phase, msg, n_pkts;
    unsigned long long slot, buf, buf_len, received, recv_us;
    int seen;
    if (!PyArg_ParseTuple(args, "IIIIIKKKKKp", &src, &iter, &phase, &msg, &n_pkts, &slot, &buf, &buf_len, &received,
                          &recv_us, &seen))
        return NULL;
    if (!ready(self)) return NULL;
    int r;
    LOCKED(self, r = rx_open(&self->core, src, iter, phase, msg, n_pkts, slot, (uint8_t *)(uintptr_t)buf, buf_len,
                             (uint8_t *)(uintptr_t)received, (int64_t *)(uintptr_t)recv_us, seen));
    if (r < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *RxPath_Close(RxPath *self, PyObject *args) {
    unsigned int src, iter, phase, msg;
    if (!PyArg_ParseTuple(args, "IIII", &src, &iter, &phase, &msg)) return NULL;
    if (!ready(self)) return NULL;
    LOCKED(self, rx_close(&self->core, src, iter, phase, msg));
    Py_RETURN_NONE;
}

static PyObject *RxPath_Budget(RxPath *self, PyObject *args) {
    unsigned int src;
    long long packets;
    int decide;
    PyObject *delay = Py_None;
    if (!PyArg_ParseTuple(args, "ILp|O", &src, &packets, &decide, &delay)) return NULL;
    int start = delay != Py_None;
    double d = start ? PyFloat_AsDouble(delay) : 0.0;
    if (start && d == -1.0 && PyErr_Occurred()) return NULL;
    LOCKED(self, rx_budget(&self->core, src, packets, decide); rx_delay(&self->core, src, start, d));
    Py_RETURN_NONE;
}

static PyObject *RxPath_Take(RxPath *self, PyObject *Py_UNUSED(ignored)) {
    if (!ready(self)) return NULL;
    uint64_t rows;
    LOCKED(self, rows = rx_take(&self->core));
    return PyLong_FromUnsignedLongLong(rows);
}

static PyObject *RxPath_Absorbed(RxPath *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromUnsignedLongLong(self->core.absorbed);
}

static PyObject *RxPath_Opened(RxPath *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromUnsignedLong(self->core.n);
}

static PyObject *RxPath_DecideSrc(RxPath *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(self->core.decide_src);
}

/* --- the UDP driver's calls ------------------------------------------------------------------ */

/* the TOS byte and the receive time (CLOCK_REALTIME seconds, 0: none) in one datagram's control messages */
static void read_cmsgs(struct msghdr *h, uint8_t *tos, double *arrived) {
    *tos = 0;
    *arrived = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1)) {
            *tos = *(uint8_t *)CMSG_DATA(c);
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS
                   && c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            *arrived = ts.tv_sec + ts.tv_nsec * 1e-9;
        }
    }
}

/* up to `batch` datagrams from fd without waiting (call without the GIL): how many (0: none
 * waiting), or -1 with errno set */
static int recv_batch(RxPath *self, int fd) {
    for (int i = 0; i < self->n; i++) { /* the kernel overwrote what it filled */
        self->mm[i].msg_hdr.msg_controllen = CMSG_ROOM;
        self->mm[i].msg_hdr.msg_flags = 0;
    }
    self->n = self->pos = 0;
    double t0 = clock_s(CLOCK_MONOTONIC);
    int r = recvmmsg(fd, self->mm, (unsigned)self->batch, MSG_DONTWAIT, NULL);
    self->syscall_s += clock_s(CLOCK_MONOTONIC) - t0;
    self->calls++;
    if (r < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
    double wall = clock_s(CLOCK_REALTIME); /* how long each datagram waited: the host's own queue */
    for (int i = 0; i < r; i++) {
        uint8_t tos;
        double arrived;
        read_cmsgs(&self->mm[i].msg_hdr, &tos, &arrived);
        self->len[i] = (self->mm[i].msg_hdr.msg_flags & MSG_TRUNC) ? -1 : (int32_t)self->mm[i].msg_len;
        self->ecn[i] = tos & ECN_MASK;
        self->queued[i] = arrived > 0 ? wall - arrived : 0.0;
    }
    self->n = r;
    self->datagrams += (uint64_t)r;
    return r;
}

static PyObject *RxPath_recv(RxPath *self, PyObject *args) {
    int fd, r, err = 0;
    if (!PyArg_ParseTuple(args, "i", &fd)) return NULL;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->mu);
    r = recv_batch(self, fd);
    if (r < 0) err = errno;
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS if (r < 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(r);
}

/* what the protocol core must see next in the batch (absorb_batch) */
typedef struct {
    int what; /* RX_TAKEN: nothing (the batch is done), RX_UP: datagram i, RX_DECIDE: decide_src */
    int i, decide_src;
    double now;
} RxEvent;

/* The rest of the batch through the core, in order, up to the first thing the protocol core must
 * see (hold mu; no Python). */
static RxEvent absorb_batch(RxPath *self) {
    const uint8_t *buf = self->base;
    RxEvent ev = {RX_TAKEN, -1, -1, 0.0};
    double t0 = clock_s(CLOCK_MONOTONIC);
    while (self->pos < self->n) {
        int i = self->pos++;
        double now = clock_s(CLOCK_MONOTONIC);
        int r = self->len[i] < 0 ? RX_UP
                                 : rx_absorb(&self->core, buf + (size_t)i * RECV_SLOT, (size_t)self->len[i],
                                             self->ecn[i], now, self->queued[i]);
        if (r == RX_TAKEN) continue;
        ev.what = r;
        ev.i = i;
        ev.decide_src = self->core.decide_src;
        ev.now = now;
        break;
    }
    self->absorb_s += clock_s(CLOCK_MONOTONIC) - t0;
    return ev;
}

/* next()'s value for `ev` (with the GIL) */
static PyObject *event_value(RxPath *self, RxEvent ev) {
    if (ev.what == RX_TAKEN) Py_RETURN_NONE;
    if (ev.what == RX_DECIDE) return Py_BuildValue("(iid)", 1, ev.decide_src, ev.now);
    int i = ev.i;
    return Py_BuildValue("(iniidd)", 0, (Py_ssize_t)i * RECV_SLOT, (int)self->len[i], (int)self->ecn[i],
                         self->queued[i], ev.now);
}

static PyObject *RxPath_next(RxPath *self, PyObject *Py_UNUSED(ignored)) {
    if (!ready(self)) return NULL;
    RxEvent ev;
    LOCKED(self, ev = absorb_batch(self));
    return event_value(self, ev);
}

#define SERVE_EVENTS 16

/* Arms timerfd `tfd` (CLOCK_MONOTONIC, absolute) for the earliest FEEDBACK delay the core started
 * since the last look, when that is before what it is armed for (self->timer_at). Holds mu. */
static void arm_for_delays(RxPath *self, int tfd) {
    double due = self->core.new_due;
    self->core.new_due = INFINITY;
    if (tfd < 0 || !(due < self->timer_at)) return;
    struct itimerspec at = {{0, 0}, {0, 0}};
    long long ns = due > 0 ? (long long)(due * 1e9) : 1; /* zero would disarm */
    at.it_value.tv_sec = (time_t)(ns / 1000000000LL);
    at.it_value.tv_nsec = (long)(ns % 1000000000LL);
    if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &at, NULL) == 0) self->timer_at = due;
}

/* The receive thread's wait, in C and without the GIL until Python has work: absorbs the data
 * socket's datagrams as they come (arming the driver's timerfd `tfd`, armed for `timer_at`, -1:
 * none, for the FEEDBACK delays the core starts meanwhile: `timer_at` says what it is armed for
 * after), and returns
 *   - next()'s tuple for the first datagram or decision of a batch the protocol core must see (the
 *     rest of the batch: next());
 *   - None when another descriptor of the epoll set `epfd` is ready (control connections, timers,
 *     the wake pipe: Python's selector finds them), after `timeout_ms` with nothing, or after
 *     `burst` datagrams (control and timers get a turn).
 * The epoll set holds `fd` (level-triggered), as the driver's selector registers it. Without the
 * GIL, a datagram is taken in while another thread of the process runs Python. */
static PyObject *RxPath_serve(RxPath *self, PyObject *args) {
    int epfd, fd, timeout_ms, burst, tfd = -1;
    double timer_at = INFINITY;
    if (!PyArg_ParseTuple(args, "iiii|id", &epfd, &fd, &timeout_ms, &burst, &tfd, &timer_at)) return NULL;
    if (!ready(self)) return NULL;
    self->timer_at = timer_at;
    RxEvent ev = {RX_TAKEN, -1, -1, 0.0};
    int taken = 0, err = 0, drained = 0;
    Py_BEGIN_ALLOW_THREADS for (;;) {
        pthread_mutex_lock(&self->mu);
        ev = absorb_batch(self);
        arm_for_delays(self, tfd);
        pthread_mutex_unlock(&self->mu);
        if (ev.what != RX_TAKEN || taken >= burst) break;
        if (!drained) { /* a short batch drained the socket: epoll says when more comes */
            pthread_mutex_lock(&self->mu);
            int r = recv_batch(self, fd);
            if (r < 0) err = errno;
            pthread_mutex_unlock(&self->mu);
            if (r < 0) break;
            if (r > 0) {
                taken += r;
                drained = r < self->batch;
                continue;
            }
        }
        struct epoll_event evs[SERVE_EVENTS];
        int k = epoll_wait(epfd, evs, SERVE_EVENTS, timeout_ms);
        if (k <= 0) break; /* nothing, or a signal: Python looks */
        self->serve_wakes++;
        int others = 0;
        for (int i = 0; i < k; i++) others |= evs[i].data.fd != fd;
        if (others) break;
        drained = 0;
    }
    Py_END_ALLOW_THREADS self->serve_returns++;
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return event_value(self, ev);
}

static PyObject *RxPath_feed(RxPath *self, PyObject *args) {
    Py_buffer b;
    int ecn;
    double now, queued = 0.0;
    if (!PyArg_ParseTuple(args, "y*id|d", &b, &ecn, &now, &queued)) return NULL;
    if (!ready(self)) {
        PyBuffer_Release(&b);
        return NULL;
    }
    int r;
    LOCKED(self, r = rx_absorb(&self->core, (const uint8_t *)b.buf, (size_t)b.len, ecn & ECN_MASK, now, queued));
    PyBuffer_Release(&b);
    return PyLong_FromLong(r);
}

static PyObject *RxPath_timings(RxPath *self, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("{s:d,s:d,s:K,s:K,s:K,s:K,s:K,s:K}", "syscall_s", self->syscall_s, "absorb_s", self->absorb_s,
                         "calls", (unsigned long long)self->calls, "datagrams", (unsigned long long)self->datagrams,
                         "absorbed", (unsigned long long)self->core.absorbed, "decisions",
                         (unsigned long long)self->core.decisions, "serve_wakes", (unsigned long long)self->serve_wakes,
                         "serve_returns", (unsigned long long)self->serve_returns);
}

static PyObject *RxPath_get_buffer(RxPath *self, void *Py_UNUSED(closure)) {
    Py_INCREF(self->buffer);
    return self->buffer;
}

static PyObject *RxPath_get_timer_at(RxPath *self, void *Py_UNUSED(closure)) {
    return PyFloat_FromDouble(self->timer_at);
}

static PyGetSetDef RxPath_getset[] = {
    {"buffer", (getter)RxPath_get_buffer, NULL, "the batch's datagrams, RECV_SLOT bytes apart", NULL},
    {"timer_at", (getter)RxPath_get_timer_at, NULL, "what the last serve() left its timerfd armed for (inf: off)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef RxPath_methods[] = {
    {"Setup", (PyCFunction)RxPath_Setup, METH_VARARGS,
     "(enabled, job_id, values_per_pkt, wall_offset_s, host_mark_s, rows, row_cap, pending)"},
    {"Open", (PyCFunction)RxPath_Open, METH_VARARGS,
     "(src, iter, phase, msg, n_pkts, slot, buf, buf_len, received, recv_us, seen): take packets of a message"},
    {"Close", (PyCFunction)RxPath_Close, METH_VARARGS, "(src, iter, phase, msg): give a message back"},
    {"Budget", (PyCFunction)RxPath_Budget, METH_VARARGS,
     "(src, packets, decide[, delay_s]): a sender's FEEDBACK budget, and the FEEDBACK delay to start here "
     "(None: none)"},
    {"Take", (PyCFunction)RxPath_Take, METH_NOARGS, "write the deltas into the rows; returns their number"},
    {"Absorbed", (PyCFunction)RxPath_Absorbed, METH_NOARGS, "data packets taken here"},
    {"Opened", (PyCFunction)RxPath_Opened, METH_NOARGS, "messages open here"},
    {"DecideSrc", (PyCFunction)RxPath_DecideSrc, METH_NOARGS, "the sender of the last RX_DECIDE"},
    {"recv", (PyCFunction)RxPath_recv, METH_VARARGS, "(fd): take up to `batch` datagrams; returns how many"},
    {"next", (PyCFunction)RxPath_next, METH_NOARGS,
     "None at the end of the batch, (0, offset, length, ecn, queued_s, now) for a datagram the core must see "
     "(length -1: truncated), (1, src, now) when the core must decide on src's FEEDBACK"},
    {"serve", (PyCFunction)RxPath_serve, METH_VARARGS,
     "(epfd, fd, timeout_ms, burst[, timer_fd, timer_at]): wait and absorb in C; next()'s tuple, or None when "
     "Python has work"},
    {"feed", (PyCFunction)RxPath_feed, METH_VARARGS, "(data, ecn, now[, queued_s]): one datagram; RX_UP/TAKEN/DECIDE"},
    {"timings", (PyCFunction)RxPath_timings, METH_NOARGS, "seconds in recvmmsg and in the core, counts"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RxPathType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlcp.transport._rxpath.RxPath",
    .tp_basicsize = sizeof(RxPath),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RxPath_init,
    .tp_dealloc = (destructor)RxPath_dealloc,
    .tp_methods = RxPath_methods,
    .tp_getset = RxPath_getset,
    .tp_doc = "recvmmsg and the shared receive core of one UDP endpoint.",
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rxpath", "The UDP driver's receive path in C.", -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rxpath(void) {
    if (PyType_Ready(&RxPathType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RxPathType);
    PyModule_AddObject(m, "RxPath", (PyObject *)&RxPathType);
    PyModule_AddStringConstant(m, "SOURCE_SHA", RXPATH_SOURCE_SHA);
    PyModule_AddIntConstant(m, "RX_UP", RX_UP);
    PyModule_AddIntConstant(m, "RX_TAKEN", RX_TAKEN);
    PyModule_AddIntConstant(m, "RX_DECIDE", RX_DECIDE);
    PyModule_AddIntConstant(m, "ROW_LEN", RX_ROW_LEN);
    PyModule_AddIntConstant(m, "WAIT_AREA", RX_WAIT_AREA);
    PyModule_AddIntConstant(m, "RECV_SLOT", RECV_SLOT);
    return m;
}
