/* The built-in switch's C engine: the C pipeline core (dlcp/switch/c/switch_core.h, shared with
 * the ns-3 switch) driven by the egress queues, the link and the batched AF_PACKET I/O loop, as a
 * CPython extension.
 *
 * What the pipeline does (parser, tables, admission, ECN, telemetry, queue disciplines, counters)
 * is the core's; this file keeps the I/O: port sockets, the queues' storage, each port's rate,
 * delay and loss, the clock, pcap, and the Python module. Python compiles the tables into flat
 * arrays (set_tables) and keeps the control plane: runtime file, counter dump, control socket,
 * signals. tests/unit/test_builtin_switch_fastpath.py runs this engine and the Python reference
 * (dlcp/switch/pipeline.py, dlcp/queueing) on the same frames and compares every byte, choice and
 * counter.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "switch_core.h"

#define VNET_LEN       10
#define SLOT           (VNET_LEN + 65550)
#define CONTROL_POLL_S 0.05
/* the read lag histogram: the bins of dlcp/transport/core/waits.py (4 per doubling from 1 us) */
#define LAG_BINS_PER_OCTAVE 4
#define LAG_BINS            (30 * LAG_BINS_PER_OCTAVE)
#define RXCTL               64 /* room for one SCM_TIMESTAMPNS control message (CMSG_SPACE(16) = 32) */
#ifndef FASTPATH_SOURCE_SHA
#define FASTPATH_SOURCE_SHA "unknown"
#endif

typedef struct Pkt {
    double t_enq;
    double in_tx; /* transmission time on the host link it came in on (queues.py IN_TX) */
    uint32_t len;
    uint32_t enq_depth;
    int16_t tel;
    uint8_t qid;
    uint8_t has_vnet;
    uint8_t vnet[VNET_LEN];
    uint8_t data[];
} Pkt;

typedef struct {
    Pkt **items;
    uint32_t head, count, cap;
} Ring;

typedef struct {
    int used, fd, gone;
    uint32_t depth;
    Ring q[N_QUEUES];
    uint32_t backlog;
    double byte_time, pkt_time, t_free, max_lag, delay, loss;
    double ideal;        /* t_free without the catch-up limit: when an ideal switch's link is free */
    double in_byte_time; /* host_nic: the host link's time per byte of an arriving frame, else 0 */
    double t_in;         /* host_nic: when the host link would be free of the frames that came in so far */
    int unlimited;
    Ring flight; /* packets on the emulated wire */
    double *due; /* due time of flight items, same indexing */
    Ring txq;    /* dequeued, waiting for the kernel to take them */
    uint64_t rx_pkts, rx_bytes, tx_pkts, tx_bytes, tx_errors, overflow, lost, truncated;
    FILE *pcap;
} Port;

typedef struct {
    PyObject_HEAD
    int batch;
    SwCore core; /* the pipeline: tables, registers, counters, queue disciplines */
    /* how long frames waited in the kernel before the switch read them (SO_TIMESTAMPNS) */
    uint64_t lag_bins[LAG_BINS], lag_n;
    double lag_max;
    /* how late after its slot began each packet started on a rate-limited port (the switch woke late) */
    uint64_t late_bins[LAG_BINS], late_n;
    double late_max;
    /* bytes still on a host's link when its next frame came (host_nic ports): a host's NIC sends at
     * most its rate, so more than a frame or two means the kernel delivered its frames in a burst;
     * waits.py's bins with one byte in place of one microsecond */
    uint64_t burst_bins[LAG_BINS], burst_n;
    double burst_max;
    /* ports and I/O */
    Port ports[MAX_PORTS];
    int port_list[MAX_PORTS], n_ports;
    uint8_t *rxbuf, *rxctl;
    struct mmsghdr *rxmsgs, *txmsgs;
    struct iovec *rxiov, *txiov;
} Engine;

static const uint8_t ZERO_VNET[VNET_LEN];

static inline double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* --- rings ------------------------------------------------------------------------------------- */

static int ring_init(Ring *r, uint32_t cap) {
    r->items = calloc(cap ? cap : 1, sizeof(Pkt *));
    r->head = r->count = 0;
    r->cap = cap ? cap : 1;
    return r->items ? 0 : -1;
}

static int ring_grow(Ring *r, double **due) {
    uint32_t cap = r->cap * 2;
    Pkt **items = malloc(cap * sizeof(Pkt *));
    double *d = due ? malloc(cap * sizeof(double)) : NULL;
    if (!items || (due && !d)) {
        free(items);
        free(d);
        return -1;
    }
    for (uint32_t i = 0; i < r->count; i++) {
        items[i] = r->items[(r->head + i) % r->cap];
        if (due) d[i] = (*due)[(r->head + i) % r->cap];
    }
    free(r->items);
    r->items = items;
    if (due) {
        free(*due);
        *due = d;
    }
    r->head = 0;
    r->cap = cap;
    return 0;
}

static inline void ring_push(Ring *r, Pkt *p) { r->items[(r->head + r->count++) % r->cap] = p; }

static inline Pkt *ring_pop(Ring *r) {
    Pkt *p = r->items[r->head];
    r->head = (r->head + 1) % r->cap;
    r->count--;
    return p;
}

static void ring_free(Ring *r) {
    if (!r->items) return;
    while (r->count) free(ring_pop(r));
    free(r->items);
    r->items = NULL;
}

/* --- queues and the link ----------------------------------------------------------------------- */

/* The head packet of the queue the port's discipline picks (sw_qdisc_pick), or NULL. */
static Pkt *pop_next(Engine *e, Port *pt, int port) {
    uint32_t count[N_QUEUES], head_len[N_QUEUES];
    for (int q = 0; q < N_QUEUES; q++) {
        count[q] = pt->q[q].count;
        head_len[q] = count[q] ? pt->q[q].items[pt->q[q].head]->len : 0;
    }
    int q = sw_qdisc_pick(&e->core.qdisc[port], count, head_len);
    if (q < 0) return NULL;
    pt->backlog--;
    return ring_pop(&pt->q[q]);
}

static void pcap_write(FILE *fp, const uint8_t *data, uint32_t len) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint32_t cap = len > 65535 ? 65535 : len;
    uint32_t rec[4] = {(uint32_t)ts.tv_sec, (uint32_t)(ts.tv_nsec / 1000), cap, len};
    fwrite(rec, sizeof rec, 1, fp);
    fwrite(data, 1, cap, fp);
}

/* A wait into waits.py's bins (a negative one, from a clock step, counts as none). */
static void record_wait(uint64_t *bins, uint64_t *n, double *max, double s) {
    (*n)++;
    if (s > *max) *max = s;
    if (s <= 1e-6) {
        bins[0]++;
        return;
    }
    int b = (int)(log2(s / 1e-6) * LAG_BINS_PER_OCTAVE);
    bins[b < LAG_BINS ? b : LAG_BINS - 1]++;
}

/* Dequeue what is due (egress + loss + delay), move what finished its propagation delay to txq. */
static int schedule(Engine *e, Port *pt, int port, double now) {
    int moved = 0;
    if (pt->backlog && !pt->txq.count) {
        if (!pt->unlimited && pt->t_free < now - pt->max_lag) pt->t_free = now;
        for (int k = 0; k < e->batch && pt->backlog && (pt->unlimited || pt->t_free <= now); k++) {
            Pkt *p = pop_next(e, pt, port);
            /* store-and-forward: on a rate-limited port the packet reaches the wire's far end when its
               transmission ends (queues.py) */
            double end = now;
            if (!pt->unlimited) {
                double tx = pt->byte_time > 0 ? p->len * pt->byte_time : pt->pkt_time;
                double slot =
                    pt->ideal > p->t_enq ? pt->ideal : p->t_enq; /* when an ideal switch would have started it */
                record_wait(e->late_bins, &e->late_n, &e->late_max, now - slot);
                pt->ideal = slot + tx;
                end = pt->t_free += tx;
            }
            double w = (now - p->t_enq) * 1e6;
            uint32_t wait_us = w > 0 ? (uint32_t)w : 0;
            sw_egress(&e->core, port, p->qid, p->data, p->tel, p->enq_depth, wait_us, p->has_vnet && (p->vnet[0] & 1));
            if (pt->loss > 0 && sw_random_unit(&e->core) < pt->loss) {
                pt->lost++;
                free(p);
                continue;
            }
            double due = end + pt->delay + p->in_tx; /* the flight ring stays in order, as a wire does */
            if (due > now || pt->flight.count) {
                if (pt->flight.count == pt->flight.cap && ring_grow(&pt->flight, &pt->due) < 0) {
                    pt->tx_errors++;
                    free(p);
                    continue;
                }
                pt->due[(pt->flight.head + pt->flight.count) % pt->flight.cap] = due;
                ring_push(&pt->flight, p);
            } else {
                if (pt->txq.count == pt->txq.cap && ring_grow(&pt->txq, NULL) < 0) {
                    pt->tx_errors++;
                    free(p);
                    continue;
                }
                ring_push(&pt->txq, p);
            }
            moved++;
        }
    }
    while (pt->flight.count && pt->due[pt->flight.head] <= now) {
        Pkt *p = ring_pop(&pt->flight);
        if (pt->txq.count == pt->txq.cap && ring_grow(&pt->txq, NULL) < 0) {
            pt->tx_errors++;
            free(p);
            continue;
        }
        ring_push(&pt->txq, p);
        moved++;
    }
    return moved;
}

/* Hand txq to the kernel in batches; returns packets sent, -errno on a hard error (txq dropped). */
static int transmit(Engine *e, Port *pt) {
    int sent = 0;
    while (pt->txq.count) {
        if (pt->fd < 0) { /* the interface is gone */
            pt->tx_errors += pt->txq.count;
            while (pt->txq.count) free(ring_pop(&pt->txq));
            return sent;
        }
        int cnt = pt->txq.count < (uint32_t)e->batch ? (int)pt->txq.count : e->batch;
        for (int i = 0; i < cnt; i++) {
            Pkt *p = pt->txq.items[(pt->txq.head + i) % pt->txq.cap];
            e->txiov[2 * i].iov_base = p->has_vnet ? p->vnet : (void *)ZERO_VNET;
            e->txiov[2 * i].iov_len = VNET_LEN;
            e->txiov[2 * i + 1].iov_base = p->data;
            e->txiov[2 * i + 1].iov_len = p->len;
        }
        int n = sendmmsg(pt->fd, e->txmsgs, cnt, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR) return sent;
            int err = errno;
            pt->tx_errors += cnt;
            for (int i = 0; i < cnt; i++) free(ring_pop(&pt->txq));
            return -err;
        }
        for (int i = 0; i < n; i++) {
            Pkt *p = ring_pop(&pt->txq);
            pt->tx_pkts++;
            pt->tx_bytes += p->len;
            if (pt->pcap) pcap_write(pt->pcap, p->data, p->len);
            free(p);
        }
        sent += n;
        if (n < cnt) break;
    }
    return sent;
}

/* --- receive ----------------------------------------------------------------------------------- */

static void enqueue(Engine *e, const uint8_t *vnet, uint8_t *f, uint32_t n, const SwVerdict *v, double now,
                    double in_tx) {
    Port *pt = &e->ports[v->port];
    Ring *q = &pt->q[v->qid];
    if (!pt->used || q->count >= pt->depth) {
        pt->overflow++;
        sw_release(&e->core, v->port, v->qid); /* admitted, but it never got a slot */
        return;
    }
    Pkt *p = malloc(sizeof(Pkt) + n);
    if (!p) {
        pt->overflow++;
        sw_release(&e->core, v->port, v->qid);
        return;
    }
    p->t_enq = now;
    p->in_tx = in_tx;
    p->len = n;
    p->enq_depth = q->count; /* enq_qdepth: this packet's own priority queue, as bmv2 counts */
    p->tel = (int16_t)v->tel;
    p->qid = (uint8_t)v->qid;
    p->has_vnet = (vnet[0] & 1) || vnet[1];
    if (p->has_vnet) {
        memcpy(p->vnet, vnet, VNET_LEN);
        p->vnet[0] &= (uint8_t)~2; /* DATA_VALID only means something on receive */
    }
    memcpy(p->data, f, n);
    ring_push(q, p);
    pt->backlog++;
}

/* The kernel's receive time of message i (SCM_TIMESTAMPNS, CLOCK_REALTIME), or -1 without one. */
static double rx_stamp(struct msghdr *h) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS
            && c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
        }
    }
    return -1;
}

/* Returns frames received, or -errno on a socket error. */
static int receive(Engine *e, Port *pt, double now) {
    for (int i = 0; i < e->batch; i++) {
        e->rxmsgs[i].msg_hdr.msg_flags = 0;
        e->rxmsgs[i].msg_hdr.msg_controllen = RXCTL;
    }
    int n = recvmmsg(pt->fd, e->rxmsgs, e->batch, MSG_DONTWAIT, NULL);
    if (n < 0) return (errno == EAGAIN || errno == EINTR) ? 0 : -errno;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    double read_at = (double)rt.tv_sec + rt.tv_nsec * 1e-9;
    for (int i = 0; i < n; i++) {
        double stamp = rx_stamp(&e->rxmsgs[i].msg_hdr);
        if (stamp >= 0) record_wait(e->lag_bins, &e->lag_n, &e->lag_max, read_at - stamp);
        uint8_t *slot = e->rxbuf + (size_t)i * SLOT;
        uint32_t len = e->rxmsgs[i].msg_len;
        if (len < VNET_LEN) continue;
        len -= VNET_LEN;
        uint8_t *f = slot + VNET_LEN;
        int truncated = (e->rxmsgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
        if (truncated && len > SLOT - VNET_LEN) len = SLOT - VNET_LEN;
        pt->rx_pkts++;
        pt->rx_bytes += len;
        if (pt->pcap) pcap_write(pt->pcap, f, len);
        if (truncated) {
            pt->truncated++;
            sw_drop(&e->core, DROP_PARSER_ERROR, len);
            continue;
        }
        if (pt->in_byte_time > 0) {
            double start = pt->t_in > now ? pt->t_in : now;
            record_wait(e->burst_bins, &e->burst_n, &e->burst_max, (start - now) / pt->in_byte_time * 1e-6);
            pt->t_in = start + len * pt->in_byte_time;
        }
        SwVerdict v;
        if (sw_ingress(&e->core, f, len, &v)) enqueue(e, slot, f, len, &v, now, len * pt->in_byte_time);
    }
    return n;
}

/* --- the loop ---------------------------------------------------------------------------------- */

/* run(seconds, wake_fds) -> (reason, port, errno): 0 time is up, 1 a wake fd is readable,
 * 2 a socket error on `port` (Python decides whether the interface is gone). */
static PyObject *Engine_run(Engine *e, PyObject *args) {
    double seconds;
    PyObject *wake;
    if (!PyArg_ParseTuple(args, "dO", &seconds, &wake)) return NULL;
    int nwake = (int)PySequence_Size(wake);
    if (nwake < 0 || nwake > 8) {
        PyErr_SetString(PyExc_ValueError, "wake_fds: a sequence of at most 8 fds");
        return NULL;
    }
    int wfds[8];
    for (int i = 0; i < nwake; i++) {
        PyObject *o = PySequence_GetItem(wake, i);
        wfds[i] = o ? (int)PyLong_AsLong(o) : -1;
        Py_XDECREF(o);
        if (PyErr_Occurred()) return NULL;
    }
    struct pollfd pfd[MAX_PORTS + 8];
    int pfd_port[MAX_PORTS + 8];
    double start = mono(), deadline = start + seconds, last_wake_check = start;
    int reason = 0, eport = -1, eerr = 0;
    Py_BEGIN_ALLOW_THREADS for (;;) {
        double now = mono();
        int got = 0, sent = 0;
        for (int k = 0; k < e->n_ports && !reason; k++) {
            int port = e->port_list[k];
            Port *pt = &e->ports[port];
            if (pt->fd < 0) continue;
            int r = receive(e, pt, now);
            if (r < 0) {
                reason = 2;
                eport = port;
                eerr = -r;
                break;
            }
            got += r;
        }
        if (reason) break;
        now = mono();
        for (int k = 0; k < e->n_ports; k++) {
            int port = e->port_list[k];
            Port *pt = &e->ports[port];
            schedule(e, pt, port, now);
            if (pt->txq.count) {
                int r = transmit(e, pt);
                if (r < 0) {
                    reason = 2;
                    eport = port;
                    eerr = -r;
                    break;
                }
                sent += r;
            }
        }
        if (reason) break;
        if (now >= deadline) break;
        if (got || sent) {
            if (now - last_wake_check < CONTROL_POLL_S || !nwake) continue;
            last_wake_check = now;
            for (int i = 0; i < nwake; i++) {
                pfd[i].fd = wfds[i];
                pfd[i].events = POLLIN;
            }
            if (poll(pfd, nwake, 0) > 0) {
                reason = 1;
                break;
            }
            continue;
        }
        /* idle: sleep until a frame, a departure, an arrival, a wake fd or the deadline */
        double until = deadline;
        int nfd = 0;
        for (int k = 0; k < e->n_ports; k++) {
            int port = e->port_list[k];
            Port *pt = &e->ports[port];
            if (pt->fd >= 0) {
                pfd[nfd].fd = pt->fd;
                pfd[nfd].events = POLLIN | (pt->txq.count ? POLLOUT : 0);
                pfd_port[nfd++] = port;
            }
            if (pt->backlog && !pt->txq.count) {
                double t = pt->unlimited ? now : pt->t_free;
                if (t < until) until = t;
            }
            if (pt->flight.count && pt->due[pt->flight.head] < until) until = pt->due[pt->flight.head];
        }
        for (int i = 0; i < nwake; i++) {
            pfd[nfd].fd = wfds[i];
            pfd[nfd].events = POLLIN;
            pfd_port[nfd++] = -1;
        }
        double wait = until - mono();
        if (wait <= 0) continue;
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        int r = ppoll(pfd, nfd, &ts, NULL);
        last_wake_check = mono();
        if (r > 0) {
            for (int i = 0; i < nfd; i++) {
                if (pfd_port[i] < 0 && (pfd[i].revents & POLLIN)) {
                    reason = 1;
                    break;
                }
            }
            if (reason) break;
        }
    }
    Py_END_ALLOW_THREADS return Py_BuildValue("(iii)", reason, eport, eerr);
}

/* --- configuration ----------------------------------------------------------------------------- */

/* set_tables(lpm, nhop, classify, thresholds, lb_mode, rr_next, n_lpm_entries, n_cls_entries)
 *   lpm: [(prefix, prefix_len, entry, group, size)] sorted longest first (group -1: mark_no_route)
 *   nhop: [(group, member, entry, dmac bytes, port)]
 *   classify: SW_CLASSIFY_SLOTS (entry, qid, color), indexed by the classify keys concatenated
 *             (CLASSIFY_*_SHIFT: dlcp_valid, prio, drop_prec, dscp)
 *   thresholds: MAX_PORTS (qmax, k1, k2, k3) */
static PyObject *Engine_set_tables(Engine *e, PyObject *args) {
    PyObject *lpm, *nhop, *cls, *thr, *rr;
    int mode, n_lpm_entries, n_cls_entries;
    if (!PyArg_ParseTuple(args, "OOOOiOii", &lpm, &nhop, &cls, &thr, &mode, &rr, &n_lpm_entries, &n_cls_entries))
        return NULL;
    SwCore *c = &e->core;
    sw_clear_routes(c);
    Py_ssize_t nl = PySequence_Size(lpm);
    if (nl < 0) return NULL;
    for (Py_ssize_t i = 0; i < nl; i++) {
        PyObject *t = PySequence_GetItem(lpm, i);
        unsigned long prefix;
        int plen, entry, group, size;
        int ok = t && PyArg_ParseTuple(t, "kiiii", &prefix, &plen, &entry, &group, &size);
        Py_XDECREF(t);
        if (!ok) return NULL;
        if (plen < 0 || plen > 32) return PyErr_Format(PyExc_ValueError, "lpm prefix length %d", plen);
        if (sw_add_lpm(c, (uint32_t)prefix, plen, entry, group, size) < 0) return PyErr_NoMemory();
    }
    Py_ssize_t nn = PySequence_Size(nhop);
    if (nn < 0) return NULL;
    for (Py_ssize_t i = 0; i < nn; i++) {
        PyObject *t = PySequence_GetItem(nhop, i);
        int group, member, entry, port;
        const char *dmac;
        Py_ssize_t dlen;
        int ok = t && PyArg_ParseTuple(t, "iiiy#i", &group, &member, &entry, &dmac, &dlen, &port);
        Py_XDECREF(t);
        if (!ok) return NULL;
        if (dlen != 6 || sw_add_nhop(c, group, member, entry, (const uint8_t *)dmac, port) < 0)
            return PyErr_Format(PyExc_ValueError, "nhop entry (%d, %d) out of range", group, member);
    }
    if (PySequence_Size(cls) != SW_CLASSIFY_SLOTS)
        return PyErr_Format(PyExc_ValueError, "classify: %d entries", SW_CLASSIFY_SLOTS);
    for (int i = 0; i < SW_CLASSIFY_SLOTS; i++) {
        PyObject *t = PySequence_GetItem(cls, i);
        int entry, qid, color;
        int ok = t && PyArg_ParseTuple(t, "iii", &entry, &qid, &color);
        Py_XDECREF(t);
        if (!ok) return NULL;
        sw_set_class(c, i, entry, qid, color);
    }
    if (PySequence_Size(thr) != MAX_PORTS) return PyErr_Format(PyExc_ValueError, "thresholds: %d entries", MAX_PORTS);
    for (int p = 0; p < MAX_PORTS; p++) {
        PyObject *t = PySequence_GetItem(thr, p);
        unsigned int a, b, k, d;
        int ok = t && PyArg_ParseTuple(t, "IIII", &a, &b, &k, &d);
        Py_XDECREF(t);
        if (!ok) return NULL;
        sw_set_thresholds(c, p, a, b, k, d);
    }
    if (PySequence_Size(rr) != MAX_GROUPS) return PyErr_Format(PyExc_ValueError, "rr_next: %d entries", MAX_GROUPS);
    for (int g = 0; g < MAX_GROUPS; g++) {
        PyObject *o = PySequence_GetItem(rr, g);
        long v = o ? PyLong_AsLong(o) : -1;
        Py_XDECREF(o);
        if (PyErr_Occurred()) return NULL;
        c->rr_next[g] = (uint16_t)v;
    }
    c->lb_mode = mode;
    if (sw_set_table_sizes(c, n_lpm_entries, n_cls_entries) < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* set_ecn(thresholds): SW_QUEUE_SLOTS values of K, indexed port * N_QUEUES + qid (Pipeline.ecn_k) */
static PyObject *Engine_set_ecn(Engine *e, PyObject *args) {
    PyObject *ks;
    if (!PyArg_ParseTuple(args, "O", &ks)) return NULL;
    if (PySequence_Size(ks) != SW_QUEUE_SLOTS)
        return PyErr_Format(PyExc_ValueError, "set_ecn: %d thresholds", SW_QUEUE_SLOTS);
    for (int i = 0; i < SW_QUEUE_SLOTS; i++) {
        PyObject *o = PySequence_GetItem(ks, i);
        unsigned long v = o ? PyLong_AsUnsignedLong(o) : 0;
        Py_XDECREF(o);
        if (PyErr_Occurred()) return NULL;
        e->core.ecn_k[i] = (uint32_t)v;
    }
    Py_RETURN_NONE;
}

/* N_QUEUES unsigned parameters of a queue discipline from a Python sequence; -1 with an exception */
static int qdisc_params(PyObject *seq, uint32_t *params) {
    if (PySequence_Size(seq) != N_QUEUES) {
        PyErr_Format(PyExc_ValueError, "queue discipline: %d parameters", N_QUEUES);
        return -1;
    }
    for (int q = 0; q < N_QUEUES; q++) {
        PyObject *o = PySequence_GetItem(seq, q);
        unsigned long v = o ? PyLong_AsUnsignedLong(o) : 0;
        Py_XDECREF(o);
        if (PyErr_Occurred()) return -1;
        params[q] = (uint32_t)v;
    }
    return 0;
}

/* set_queueing(port, kind, params): the port's queue discipline (QDISC_*, QueueingConfig.c_params) */
static PyObject *Engine_set_queueing(Engine *e, PyObject *args) {
    int port, kind;
    PyObject *seq;
    uint32_t params[N_QUEUES];
    if (!PyArg_ParseTuple(args, "iiO", &port, &kind, &seq) || qdisc_params(seq, params) < 0) return NULL;
    if (sw_set_qdisc(&e->core, port, kind, params) < 0)
        return PyErr_Format(PyExc_ValueError, "port %d: queue discipline %d with these parameters", port, kind);
    Py_RETURN_NONE;
}

/* add_port(port, fd, rate_bps, rate_pps, depth, delay_s, loss, max_lag_s, pcap_path or None, host_nic) */
static PyObject *Engine_add_port(Engine *e, PyObject *args) {
    int port, fd, depth;
    double bps, pps, delay, loss, lag;
    const char *pcap = NULL;
    int host_nic = 0;
    if (!PyArg_ParseTuple(args, "iiddiddd|zp", &port, &fd, &bps, &pps, &depth, &delay, &loss, &lag, &pcap, &host_nic))
        return NULL;
    if (port < 0 || port >= MAX_PORTS || e->ports[port].used || depth < 1) {
        PyErr_Format(PyExc_ValueError, "bad or duplicate port %d", port);
        return NULL;
    }
    Port *pt = &e->ports[port];
    memset(pt, 0, sizeof *pt);
    for (int q = 0; q < N_QUEUES; q++)
        if (ring_init(&pt->q[q], depth) < 0) return PyErr_NoMemory();
    if (ring_init(&pt->flight, 64) < 0 || ring_init(&pt->txq, 2 * e->batch) < 0) return PyErr_NoMemory();
    pt->due = calloc(64, sizeof(double));
    pt->used = 1;
    pt->fd = fd;
    pt->depth = depth;
    pt->byte_time = bps > 0 ? 8.0 / bps : 0;
    pt->pkt_time = (bps <= 0 && pps > 0) ? 1.0 / pps : 0;
    pt->unlimited = bps <= 0 && pps <= 0;
    pt->delay = delay;
    pt->loss = loss;
    pt->max_lag = lag;
    pt->in_byte_time = host_nic ? pt->byte_time : 0; /* bit rate only, as queues.py */
    if (pcap) {
        pt->pcap = fopen(pcap, "wb");
        if (!pt->pcap) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, pcap);
        uint32_t hdr[6] = {0xA1B2C3D4, 2 | (4u << 16), 0, 0, 65535, 1};
        fwrite(hdr, sizeof hdr, 1, pt->pcap);
    }
    e->port_list[e->n_ports++] = port;
    Py_RETURN_NONE;
}

static PyObject *Engine_port_gone(Engine *e, PyObject *args) {
    int port;
    if (!PyArg_ParseTuple(args, "i", &port)) return NULL;
    if (port >= 0 && port < MAX_PORTS) e->ports[port].fd = -1;
    Py_RETURN_NONE;
}

static PyObject *Engine_flush(Engine *e, PyObject *Py_UNUSED(noargs)) {
    for (int p = 0; p < MAX_PORTS; p++)
        if (e->ports[p].pcap) fflush(e->ports[p].pcap);
    Py_RETURN_NONE;
}

/* --- test entry points: the pipeline without sockets (mirror Pipeline.ingress / egress) ---------- */

static PyObject *Engine_ingress(Engine *e, PyObject *args) {
    Py_buffer buf;
    int in_port;
    if (!PyArg_ParseTuple(args, "w*i", &buf, &in_port)) return NULL;
    SwVerdict v;
    int ok = sw_ingress(&e->core, buf.buf, (uint32_t)buf.len, &v);
    PyBuffer_Release(&buf);
    if (!ok) Py_RETURN_NONE;
    return Py_BuildValue("(iiii)", v.port, v.qid, v.color, v.tel);
}

static PyObject *Engine_egress(Engine *e, PyObject *args) {
    Py_buffer buf;
    int port, qid, tel, partial;
    unsigned int depth, wait_us;
    if (!PyArg_ParseTuple(args, "w*iiiIIp", &buf, &port, &qid, &tel, &depth, &wait_us, &partial)) return NULL;
    if (port < 0 || port >= MAX_PORTS || qid < 0 || qid >= N_QUEUES) {
        PyBuffer_Release(&buf);
        return PyErr_Format(PyExc_ValueError, "port %d queue %d", port, qid);
    }
    int stamp = tel >= 0 && (Py_ssize_t)tel + DLCP_TELEMETRY_LEN <= buf.len;
    sw_egress(&e->core, port, qid, buf.buf, stamp ? tel : -1, depth, wait_us, partial);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
}

/* qdisc_picks(kind, params, ops) -> the queues picked: the core's discipline on a port whose queues
 * see `ops` in order, each (qid, frame bytes) enqueued or None for one pick (and its head taken).
 * The Python reference (dlcp/queueing) must pick the same (tests/unit/test_queueing.py). */
static PyObject *qdisc_picks(PyObject *Py_UNUSED(module), PyObject *args) {
    int kind;
    PyObject *seq, *ops;
    uint32_t params[N_QUEUES];
    if (!PyArg_ParseTuple(args, "iOO", &kind, &seq, &ops) || qdisc_params(seq, params) < 0) return NULL;
    SwQdisc d;
    SwCore *c = calloc(1, sizeof(SwCore)); /* sw_set_qdisc works on a core's port */
    if (!c) return PyErr_NoMemory();
    if (sw_set_qdisc(c, 0, kind, params) < 0) {
        free(c);
        return PyErr_Format(PyExc_ValueError, "queue discipline %d with these parameters", kind);
    }
    d = c->qdisc[0];
    free(c);
    Py_ssize_t n = PySequence_Size(ops);
    if (n < 0) return NULL;
    uint32_t *lens = calloc((size_t)(N_QUEUES * (n + 1)), sizeof(uint32_t)); /* a FIFO of frame sizes per queue */
    uint32_t head[N_QUEUES] = {0}, count[N_QUEUES] = {0}, head_len[N_QUEUES];
    PyObject *out = PyList_New(0);
    if (!lens || !out) {
        free(lens);
        Py_XDECREF(out);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PySequence_GetItem(ops, i);
        if (!op) goto fail;
        if (op == Py_None) {
            Py_DECREF(op);
            for (int q = 0; q < N_QUEUES; q++) head_len[q] = count[q] ? lens[q * (n + 1) + head[q]] : 0;
            int q = sw_qdisc_pick(&d, count, head_len);
            if (q >= 0) {
                head[q]++;
                count[q]--;
            }
            PyObject *v = PyLong_FromLong(q);
            if (!v || PyList_Append(out, v) < 0) {
                Py_XDECREF(v);
                goto fail;
            }
            Py_DECREF(v);
            continue;
        }
        int qid;
        unsigned int len;
        int ok = PyArg_ParseTuple(op, "iI", &qid, &len);
        Py_DECREF(op);
        if (!ok) goto fail;
        if (qid < 0 || qid >= N_QUEUES) {
            PyErr_Format(PyExc_ValueError, "queue %d", qid);
            goto fail;
        }
        lens[qid * (n + 1) + head[qid] + count[qid]] = len;
        count[qid]++;
    }
    free(lens);
    return out;
fail:
    free(lens);
    Py_DECREF(out);
    return NULL;
}

/* --- counters ---------------------------------------------------------------------------------- */

static PyObject *u64_list(const uint64_t *v, int n) {
    PyObject *l = PyList_New(n);
    if (!l) return NULL;
    for (int i = 0; i < n; i++) PyList_SET_ITEM(l, i, PyLong_FromUnsignedLongLong(v[i]));
    return l;
}

static PyObject *u32_list(const uint32_t *v, int n) {
    PyObject *l = PyList_New(n);
    if (!l) return NULL;
    for (int i = 0; i < n; i++) PyList_SET_ITEM(l, i, PyLong_FromUnsignedLong(v[i]));
    return l;
}

/* {index: (admitted, early, tail)} of the non-zero non-DLCP slots */
static PyObject *non_dlcp_dict(const SwCore *c) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < SW_NON_DLCP_SLOTS; i++) {
        if (!(c->non_dlcp[0][i] | c->non_dlcp[1][i] | c->non_dlcp[2][i])) continue;
        PyObject *k = PyLong_FromLong(i);
        PyObject *v = Py_BuildValue("(KKK)", c->non_dlcp[0][i], c->non_dlcp[1][i], c->non_dlcp[2][i]);
        if (!k || !v || PyDict_SetItem(d, k, v) < 0) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(v);
    }
    return d;
}

/* What a periodic sample needs, cheaply (sw_sample): occupancy now, its peak since the last
 * sample, and per port the packet counts so far, all traffic and non-DLCP. */
static PyObject *Engine_sample(Engine *e, PyObject *Py_UNUSED(noargs)) {
    uint64_t occ[SW_QUEUE_SLOTS], peak[SW_QUEUE_SLOTS], tot[6][MAX_PORTS];
    sw_sample(&e->core, occ, peak, tot);
    return Py_BuildValue("{sNsNsNsNsNsNsNsN}", "occupancy", u64_list(occ, SW_QUEUE_SLOTS), "peak",
                         u64_list(peak, SW_QUEUE_SLOTS), "admitted_pkts", u64_list(tot[0], MAX_PORTS), "early_pkts",
                         u64_list(tot[1], MAX_PORTS), "tail_pkts", u64_list(tot[2], MAX_PORTS),
                         "non_dlcp_admitted_pkts", u64_list(tot[3], MAX_PORTS), "non_dlcp_early_pkts",
                         u64_list(tot[4], MAX_PORTS), "non_dlcp_tail_pkts", u64_list(tot[5], MAX_PORTS));
}

/* d[prefix_bins], d[prefix_n], d[prefix_max_s]: a wait histogram for counter_dump.py */
static int put_waits(PyObject *d, const char *prefix, const uint64_t *bins, uint64_t n, double max) {
    char key[32];
    PyObject *v[3] = {u64_list(bins, LAG_BINS), PyLong_FromUnsignedLongLong(n), PyFloat_FromDouble(max)};
    const char *suffix[3] = {"bins", "n", "max_s"};
    int rc = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%s_%s", prefix, suffix[i]);
        if (!v[i] || PyDict_SetItemString(d, key, v[i]) < 0) rc = -1;
    }
    for (int i = 0; i < 3; i++) Py_XDECREF(v[i]);
    return rc;
}

/* The core's counters and registers (the layout of Pipeline.counters()), and the ports' I/O counts. */
static PyObject *Engine_counters(Engine *e, PyObject *Py_UNUSED(noargs)) {
    const SwCore *c = &e->core;
    uint64_t rr[MAX_GROUPS];
    for (int i = 0; i < MAX_GROUPS; i++) rr[i] = c->rr_next[i];
    PyObject *ports = PyDict_New();
    if (!ports) return NULL;
    for (int k = 0; k < e->n_ports; k++) {
        Port *pt = &e->ports[e->port_list[k]];
        PyObject *d =
            Py_BuildValue("{sKsKsKsKsKsKsKsKsIsi}", "rx_pkts", pt->rx_pkts, "rx_bytes", pt->rx_bytes, "tx_pkts",
                          pt->tx_pkts, "tx_bytes", pt->tx_bytes, "tx_errors", pt->tx_errors, "queue_overflow_pkts",
                          pt->overflow, "link_loss_pkts", pt->lost, "rx_truncated", pt->truncated, "queued_pkts",
                          pt->backlog, "pending_pkts", (int)(pt->txq.count + pt->flight.count));
        PyObject *key = PyLong_FromLong(e->port_list[k]);
        if (!d || !key || PyDict_SetItem(ports, key, d) < 0) {
            Py_XDECREF(d);
            Py_XDECREF(key);
            Py_DECREF(ports);
            return NULL;
        }
        Py_DECREF(key);
        Py_DECREF(d);
    }
    PyObject *d = Py_BuildValue(
        "{sNsNsNsNsNsNsNsNsNsNsNsNsNsIsNsNsKsKsNsNsNsN}", "admitted_pkts", u64_list(c->adm[0], SW_COUNTER_SLOTS),
        "admitted_bytes", u64_list(c->adm[1], SW_COUNTER_SLOTS), "early_pkts", u64_list(c->early[0], SW_COUNTER_SLOTS),
        "early_bytes", u64_list(c->early[1], SW_COUNTER_SLOTS), "tail_pkts", u64_list(c->tail[0], SW_COUNTER_SLOTS),
        "tail_bytes", u64_list(c->tail[1], SW_COUNTER_SLOTS), "drops_pkts", u64_list(c->drops[0], SW_N_REASONS),
        "drops_bytes", u64_list(c->drops[1], SW_N_REASONS), "lpm_hits", u64_list(c->lpm_hits, 2 * c->n_lpm_entries),
        "classify_hits", u64_list(c->cls_hits, 2 * c->n_cls_entries), "occupancy",
        u32_list(c->occupancy, SW_QUEUE_SLOTS), "rr_next", u64_list(rr, MAX_GROUPS), "ports", ports, "max_enq_qdepth",
        c->max_enq_qdepth, "delay_fine", u64_list(c->delay_fine, SW_DELAY_FINE), "delay_coarse",
        u64_list(c->delay_coarse, SW_DELAY_COARSE), "delay_n", (unsigned long long)c->delay_n, "delay_max",
        (unsigned long long)c->delay_max, "last_drop", PyLong_FromLong(c->last_drop), "non_dlcp", non_dlcp_dict(c),
        "ce_pkts", u64_list(c->ce[0], SW_QUEUE_SLOTS), "ce_bytes", u64_list(c->ce[1], SW_QUEUE_SLOTS));
    if (!d) return NULL;
    if (put_waits(d, "rx_lag", e->lag_bins, e->lag_n, e->lag_max) < 0
        || put_waits(d, "tx_late", e->late_bins, e->late_n, e->late_max) < 0
        || put_waits(d, "rx_burst", e->burst_bins, e->burst_n, e->burst_max) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* --- the type ---------------------------------------------------------------------------------- */

static int Engine_init(Engine *e, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"batch", "data_port", "seed", NULL};
    int batch = 64, data_port = DLCP_DATA_PORT;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iiK", kwlist, &batch, &data_port, &seed)) return -1;
    if (batch < 1 || batch > 1024) {
        PyErr_SetString(PyExc_ValueError, "batch must be 1..1024");
        return -1;
    }
    if (e->rxbuf) {
        PyErr_SetString(PyExc_RuntimeError, "Engine is already initialised");
        return -1;
    }
    e->batch = batch;
    if (sw_init(&e->core, data_port, seed) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    e->rxbuf = malloc((size_t)batch * SLOT);
    e->rxctl = calloc(batch, RXCTL);
    e->rxmsgs = calloc(batch, sizeof(struct mmsghdr));
    e->txmsgs = calloc(batch, sizeof(struct mmsghdr));
    e->rxiov = calloc(batch, sizeof(struct iovec));
    e->txiov = calloc(2 * batch, sizeof(struct iovec));
    if (!e->rxbuf || !e->rxctl || !e->rxmsgs || !e->txmsgs || !e->rxiov || !e->txiov) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < batch; i++) {
        e->rxiov[i].iov_base = e->rxbuf + (size_t)i * SLOT;
        e->rxiov[i].iov_len = SLOT;
        e->rxmsgs[i].msg_hdr.msg_iov = &e->rxiov[i];
        e->rxmsgs[i].msg_hdr.msg_iovlen = 1;
        e->rxmsgs[i].msg_hdr.msg_control = e->rxctl + (size_t)i * RXCTL;
        e->rxmsgs[i].msg_hdr.msg_controllen = RXCTL;
        e->txmsgs[i].msg_hdr.msg_iov = &e->txiov[2 * i];
        e->txmsgs[i].msg_hdr.msg_iovlen = 2;
    }
    return 0;
}

static void Engine_dealloc(Engine *e) {
    for (int p = 0; p < MAX_PORTS; p++) {
        Port *pt = &e->ports[p];
        if (!pt->used) continue;
        for (int q = 0; q < N_QUEUES; q++) ring_free(&pt->q[q]);
        ring_free(&pt->flight);
        ring_free(&pt->txq);
        free(pt->due);
        if (pt->pcap) fclose(pt->pcap);
    }
    sw_free(&e->core);
    free(e->rxbuf);
    free(e->rxctl);
    free(e->rxmsgs);
    free(e->txmsgs);
    free(e->rxiov);
    free(e->txiov);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyMethodDef Engine_methods[] = {
    {"set_tables", (PyCFunction)Engine_set_tables, METH_VARARGS, "install compiled tables"},
    {"set_ecn", (PyCFunction)Engine_set_ecn, METH_VARARGS, "install the ECN threshold of every queue"},
    {"set_queueing", (PyCFunction)Engine_set_queueing, METH_VARARGS, "set a port's queue discipline"},
    {"add_port", (PyCFunction)Engine_add_port, METH_VARARGS, "attach a port socket and its queue config"},
    {"port_gone", (PyCFunction)Engine_port_gone, METH_VARARGS, "stop using a port whose interface vanished"},
    {"run", (PyCFunction)Engine_run, METH_VARARGS,
     "forward until the time is up, a wake fd is readable or a port fails"},
    {"flush", (PyCFunction)Engine_flush, METH_NOARGS, "flush pcap files"},
    {"sample", (PyCFunction)Engine_sample, METH_NOARGS,
     "occupancy, its peak since the last sample, packet counts per port"},
    {"ingress", (PyCFunction)Engine_ingress, METH_VARARGS, "ingress on one frame (tests)"},
    {"egress", (PyCFunction)Engine_egress, METH_VARARGS, "egress on one frame (tests)"},
    {"counters", (PyCFunction)Engine_counters, METH_NOARGS, "counters, registers and port statistics"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "emulation.builtin_switch._fastpath.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
    .tp_doc = "The DLCP pipeline core, egress queues and batched AF_PACKET loop of one switch.",
};

static PyMethodDef module_methods[] = {
    {"qdisc_picks", qdisc_picks, METH_VARARGS,
     "the core's queue discipline on a sequence of enqueues and picks (tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastpath", "The built-in switch's C engine.", -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&EngineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&EngineType);
    PyModule_AddObject(m, "Engine", (PyObject *)&EngineType);
    PyModule_AddStringConstant(m, "SOURCE_SHA", FASTPATH_SOURCE_SHA);
    return m;
}
