/* The built-in dataplane's fast path: the DLCP pipeline of docs/pipeline.md, the egress queues and
 * the batched AF_PACKET I/O loop, in C.
 *
 * It executes exactly what pipeline.py (the readable reference model) and queues.py do; Python
 * compiles the tables into flat arrays (set_tables) so no match semantics live here except LPM, and
 * tests/unit/test_builtin_switch_fastpath.py runs both engines on the same frames and compares every byte and
 * counter. Python keeps the control plane: runtime file, counters dump, control socket, signals.
 * Offsets, field positions, sizes and codes come from dlcp_wire.h, generated from
 * dlcp/wire/layout.py and dlcp/network/pipeline_names.py (`make gen`).
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

#include "dlcp_wire.h"

#define QUEUE_SLOTS REGISTER_OCCUPANCY_SIZE          /* port * N_QUEUES + qid */
#define COUNTER_SLOTS COUNTER_ADMITTED_SIZE          /* (port * N_QUEUES + qid) * N_COLORS + color */
#define N_REASONS COUNTER_DROPS_SIZE
#define NON_DLCP_SLOTS (COUNTER_SLOTS * NON_DLCP_DSCP_CLASSES)  /* queue counter slot * classes + dscp >> 3 */
#define CLASSIFY_SLOTS (1 << CLASSIFY_KEY_BITS)      /* every (dlcp_valid, prio, drop_prec, dscp) */
#define TEL_OFF (DLCP_OFF + DLCP_HEADER_LEN)
#define UDP_CSUM_OFF (L4_OFF + 6)
#define VNET_LEN 10

/* what this code assumes of the generated layout (it reads these fields as single bytes, the
 * telemetry block as whole words, rr_next as 16 bits) */
_Static_assert(QUEUE_SLOTS == MAX_PORTS * N_QUEUES, "occupancy is indexed port * N_QUEUES + qid");
_Static_assert(COUNTER_CE_MARKED_SIZE == QUEUE_SLOTS, "ce_marked is indexed like occupancy");
_Static_assert(COUNTER_SLOTS == QUEUE_SLOTS * N_COLORS && COUNTER_EARLY_DROPS_SIZE == COUNTER_SLOTS
               && COUNTER_TAIL_DROPS_SIZE == COUNTER_SLOTS, "queue counters are indexed per color");
_Static_assert(DLCP_VER_SIZE == 1 && DLCP_PRIO_SIZE == 1 && DLCP_DROP_PREC_SIZE == 1 && DLCP_FLAGS_SIZE == 1,
               "the parser reads ver, prio, drop_prec and flags as single bytes");
_Static_assert(DLCP_TEL_HOPS_SIZE == 1 && DLCP_TEL_MAX_ENQ_QDEPTH_SIZE == 2 && DLCP_TEL_SUM_DEQ_TIMEDELTA_US_SIZE == 4
               && DLCP_TELEMETRY_LEN % 2 == 0, "stamp_telemetry's field widths");
_Static_assert(REGISTER_RR_NEXT_BITS == 16, "rr_next is uint16_t");
_Static_assert(NON_DLCP_DSCP_CLASSES == 8, "the DSCP class of a non-DLCP frame is its TOS byte >> 5");
_Static_assert(CLASSIFY_DSCP_SHIFT == 0 && CLASSIFY_DSCP_BITS == 6, "the DSCP is the low bits of the classify index");
#define SLOT (VNET_LEN + 65550)
#define FINE 256
#define COARSE (34 * 32)
#define CONTROL_POLL_S 0.05
/* the read lag histogram: the bins of dlcp/transport/core/waits.py (4 per doubling from 1 us) */
#define LAG_BINS_PER_OCTAVE 4
#define LAG_BINS (30 * LAG_BINS_PER_OCTAVE)
#define RXCTL 64  /* room for one SCM_TIMESTAMPNS control message (CMSG_SPACE(16) = 32) */
#ifndef FASTPATH_SOURCE_SHA
#define FASTPATH_SOURCE_SHA "unknown"
#endif

typedef struct Pkt {
    double t_enq;
    double in_tx;     /* transmission time on the host link it came in on (queues.py IN_TX) */
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
    double ideal;         /* t_free without the catch-up limit: when an ideal switch's link is free */
    double in_byte_time;  /* host_nic: the host link's time per byte of an arriving frame, else 0 */
    double t_in;          /* host_nic: when the host link would be free of the frames that came in so far */
    int unlimited;
    Ring flight;      /* packets on the emulated wire */
    double *due;      /* due time of flight items, same indexing */
    Ring txq;         /* dequeued, waiting for the kernel to take them */
    uint64_t rx_pkts, rx_bytes, tx_pkts, tx_bytes, tx_errors, overflow, lost, truncated;
    FILE *pcap;
} Port;

typedef struct { uint32_t prefix, mask; int entry, group, size; } Lpm;
typedef struct { int entry; uint8_t dmac[6]; int port; } Nhop;
typedef struct { int n; Nhop *members; } Group;

typedef struct {
    PyObject_HEAD
    int batch, data_port, lb_mode;
    /* tables */
    Lpm *lpm; int n_lpm;
    Group groups[MAX_GROUPS];
    int16_t cls_entry[CLASSIFY_SLOTS]; uint8_t cls_qid[CLASSIFY_SLOTS], cls_color[CLASSIFY_SLOTS];
    uint32_t thr[MAX_PORTS][4];
    uint64_t *lpm_hits; int n_lpm_entries;   /* [entry * 2] pkts, [entry * 2 + 1] bytes */
    uint64_t *cls_hits; int n_cls_entries;
    /* registers and counters */
    uint32_t occupancy[QUEUE_SLOTS];
    uint16_t rr_next[MAX_GROUPS];
    uint64_t adm[2][COUNTER_SLOTS], early[2][COUNTER_SLOTS], tail[2][COUNTER_SLOTS];
    /* the share of those packet counts from frames without a DLCP header, [admitted, early, tail]
     * indexed counter slot * 8 + dscp class: background and control traffic, told from gradients */
    uint64_t non_dlcp[3][NON_DLCP_SLOTS];
    uint32_t occ_peak[QUEUE_SLOTS];  /* highest occupancy since the last sample() */
    uint64_t drops[2][N_REASONS];
    int last_drop;
    /* telemetry of the queues */
    uint32_t max_enq_qdepth;
    uint64_t fine[FINE], coarse[COARSE], delay_n, delay_max;
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
    uint64_t rng;
    /* ECN marking (the section "ECN marking" below) */
    uint32_t ecn_k[QUEUE_SLOTS];
    uint64_t ce[2][QUEUE_SLOTS];
} Engine;

static const uint8_t ZERO_VNET[VNET_LEN];
static uint16_t CRC16_TABLE[256];

static void crc16_init(void) {
    for (int b = 0; b < 256; b++) {
        uint16_t c = (uint16_t)b;
        for (int i = 0; i < 8; i++) c = (c & 1) ? (uint16_t)((c >> 1) ^ 0xA001) : (uint16_t)(c >> 1);
        CRC16_TABLE[b] = c;
    }
}

static uint16_t crc16(const uint8_t *p, int n) {
    uint16_t c = 0;
    for (int i = 0; i < n; i++) c = (uint16_t)((c >> 8) ^ CRC16_TABLE[(c ^ p[i]) & 0xFF]);
    return c;
}

static inline double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline uint64_t rng_next(Engine *e) { /* xorshift64* */
    uint64_t x = e->rng;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    e->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static inline double rng_unit(Engine *e) { return (rng_next(e) >> 11) * (1.0 / 9007199254740992.0); }

static inline uint32_t fold(uint32_t x) {
    while (x >> 16) x = (x & 0xFFFF) + (x >> 16);
    return x;
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
    if (!items || (due && !d)) { free(items); free(d); return -1; }
    for (uint32_t i = 0; i < r->count; i++) {
        items[i] = r->items[(r->head + i) % r->cap];
        if (due) d[i] = (*due)[(r->head + i) % r->cap];
    }
    free(r->items);
    r->items = items;
    if (due) { free(*due); *due = d; }
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

/* --- ECN marking (p4/include/ecn.p4, pipeline.py Pipeline._ecn_mark) --------------------------- */

/* An admitted ECN-capable packet (ECT(0) or ECT(1)) whose queue held ecn_k[oi] or more packets
 * before it: CE, the IPv4 checksum patched over the first header word (RFC 1624), counted. */
static inline void ecn_mark(Engine *e, uint8_t *f, int oi, uint32_t occ, uint32_t n) {
    uint8_t tos = f[15];
    uint8_t ecn = tos & ECN_MASK;
    if ((ecn != ECN_ECT0 && ecn != ECN_ECT1) || occ < e->ecn_k[oi]) return;
    uint32_t old = ((uint32_t)f[14] << 8) | tos, nw = (old & ~(uint32_t)ECN_MASK) | ECN_CE;
    f[15] = (uint8_t)nw;
    uint32_t hc = (~(((uint32_t)f[24] << 8) | f[25]) & 0xFFFF) + (~old & 0xFFFF) + nw;
    hc = ~fold(hc) & 0xFFFF;
    f[24] = (uint8_t)(hc >> 8);
    f[25] = (uint8_t)hc;
    e->ce[0][oi]++;
    e->ce[1][oi] += n;
}

/* set_ecn(thresholds): QUEUE_SLOTS values of K, indexed port * N_QUEUES + qid (Pipeline.ecn_k) */
static PyObject *Engine_set_ecn(Engine *e, PyObject *args) {
    PyObject *ks;
    if (!PyArg_ParseTuple(args, "O", &ks)) return NULL;
    if (PySequence_Size(ks) != QUEUE_SLOTS) { PyErr_Format(PyExc_ValueError, "set_ecn: %d thresholds", QUEUE_SLOTS); return NULL; }
    for (int i = 0; i < QUEUE_SLOTS; i++) {
        PyObject *o = PySequence_GetItem(ks, i);
        unsigned long v = o ? PyLong_AsUnsignedLong(o) : 0;
        Py_XDECREF(o);
        if (PyErr_Occurred()) return NULL;
        e->ecn_k[i] = (uint32_t)v;
    }
    Py_RETURN_NONE;
}

/* --- ingress ----------------------------------------------------------------------------------- */

static inline void drop(Engine *e, int reason, uint32_t n) {
    e->drops[0][reason]++;
    e->drops[1][reason] += n;
    e->last_drop = reason;
}

/* Returns 1 and fills the outputs when admitted (frame edited in place), else 0 (counted). */
static int ingress(Engine *e, uint8_t *f, uint32_t n, int *o_port, int *o_qid, int *o_color, int *o_tel) {
    if (n < ETH_LEN) { drop(e, DROP_PARSER_ERROR, n); return 0; }
    if (f[12] != 0x08 || f[13] != 0x00) { drop(e, DROP_NOT_IPV4, n); return 0; }
    if (n < L4_OFF) { drop(e, DROP_PARSER_ERROR, n); return 0; }
    int proto = f[23], sport = 0, dport = 0, dlcp = 0, tel = -1;
    if ((f[14] & 0x0F) == 5 && !((f[20] & 0x1F) || f[21])) {
        if (proto == 17) {
            if (n < DLCP_OFF) { drop(e, DROP_PARSER_ERROR, n); return 0; }
            sport = (f[34] << 8) | f[35];
            dport = (f[36] << 8) | f[37];
            if (dport == e->data_port) {
                const uint8_t *h = f + DLCP_OFF;
                if (n < TEL_OFF || ((h[DLCP_VER_OFF] >> DLCP_VER_SHIFT) & DLCP_VER_MASK) != DLCP_VERSION) {
                    drop(e, DROP_PARSER_ERROR, n);
                    return 0;
                }
                dlcp = 1;
                if (h[DLCP_FLAGS_OFF] & DLCP_FLAG_TELEMETRY) {
                    if (n < TEL_OFF + DLCP_TELEMETRY_LEN) { drop(e, DROP_PARSER_ERROR, n); return 0; }
                    tel = TEL_OFF;
                }
            }
        } else if (proto == 6) {
            if (n < L4_OFF + 4) { drop(e, DROP_PARSER_ERROR, n); return 0; }
            sport = (f[34] << 8) | f[35];
            dport = (f[36] << 8) | f[37];
        }
    }
    int ttl = f[22];
    if (ttl <= 1) { drop(e, DROP_TTL_EXPIRED, n); return 0; }
    uint32_t dst = ((uint32_t)f[30] << 24) | ((uint32_t)f[31] << 16) | ((uint32_t)f[32] << 8) | f[33];
    Lpm *hit = NULL;
    for (int i = 0; i < e->n_lpm; i++) {  /* sorted by prefix length, longest first */
        if ((dst & e->lpm[i].mask) == e->lpm[i].prefix) { hit = &e->lpm[i]; break; }
    }
    if (!hit || hit->group < 0) { drop(e, DROP_NO_ROUTE, n); return 0; }
    e->lpm_hits[hit->entry * 2]++;
    e->lpm_hits[hit->entry * 2 + 1] += n;
    int group = hit->group, size = hit->size, member;
    if (dlcp && e->lb_mode == LB_SPRAY_RANDOM) {
        member = (int)(rng_unit(e) * size);
    } else if (dlcp && e->lb_mode == LB_SPRAY_RR) {
        uint16_t r = e->rr_next[group];
        member = r % size;
        e->rr_next[group] = (uint16_t)(r + 1);
    } else {
        uint8_t key[13];
        memcpy(key, f + 26, 8);
        key[8] = (uint8_t)proto;
        key[9] = (uint8_t)(sport >> 8); key[10] = (uint8_t)sport;
        key[11] = (uint8_t)(dport >> 8); key[12] = (uint8_t)dport;
        member = crc16(key, 13) % size;
    }
    Group *g = &e->groups[group];
    if (member >= g->n || g->members[member].entry < 0) { drop(e, DROP_NO_ROUTE, n); return 0; }
    Nhop *nh = &g->members[member];
    memmove(f + 6, f, 6);
    memcpy(f, nh->dmac, 6);
    int port = nh->port;
    int key = (f[15] >> 2) << CLASSIFY_DSCP_SHIFT;
    if (dlcp) {
        const uint8_t *h = f + DLCP_OFF;
        key |= (1 << CLASSIFY_DLCP_VALID_SHIFT)
               | (((h[DLCP_PRIO_OFF] >> DLCP_PRIO_SHIFT) & DLCP_PRIO_MASK) << CLASSIFY_DLCP_PRIO_SHIFT)
               | (((h[DLCP_DROP_PREC_OFF] >> DLCP_DROP_PREC_SHIFT) & DLCP_DROP_PREC_MASK) << CLASSIFY_DLCP_DROP_PREC_SHIFT);
    }
    int ce = e->cls_entry[key], qid = e->cls_qid[key], color = e->cls_color[key];
    if (ce >= 0) {
        e->cls_hits[ce * 2]++;
        e->cls_hits[ce * 2 + 1] += n;
    }
    uint32_t *th = e->thr[port];
    int oi = port * N_QUEUES + qid, ci = oi * N_COLORS + color;
    uint32_t occ = e->occupancy[oi];
    int ni = dlcp ? -1 : ci * NON_DLCP_DSCP_CLASSES + (f[15] >> 5);
    if (occ >= th[0]) {
        e->tail[0][ci]++; e->tail[1][ci] += n; e->last_drop = -1;
        if (ni >= 0) e->non_dlcp[2][ni]++;
        return 0;
    }
    if (color && occ >= th[color]) {
        e->early[0][ci]++; e->early[1][ci] += n; e->last_drop = -1;
        if (ni >= 0) e->non_dlcp[1][ni]++;
        return 0;
    }
    if (ni >= 0) e->non_dlcp[0][ni]++;
    e->occupancy[oi] = occ + 1;
    if (occ + 1 > e->occ_peak[oi]) e->occ_peak[oi] = occ + 1;
    e->adm[0][ci]++;
    e->adm[1][ci] += n;
    ecn_mark(e, f, oi, occ, n);
    uint32_t old = ((uint32_t)ttl << 8) | (uint32_t)proto;
    f[22] = (uint8_t)(ttl - 1);
    uint32_t hc = (~(((uint32_t)f[24] << 8) | f[25]) & 0xFFFF) + (~old & 0xFFFF) + (old - 0x100);
    hc = ~fold(hc) & 0xFFFF;
    f[24] = (uint8_t)(hc >> 8);
    f[25] = (uint8_t)hc;
    *o_port = port; *o_qid = qid; *o_color = color; *o_tel = tel;
    return 1;
}

/* --- egress ------------------------------------------------------------------------------------ */

static inline uint32_t be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }

/* hops += 1, max_enq_qdepth = max(.., enq_qdepth), sum_deq_timedelta_us += wait (the reserved byte
 * stays); the UDP checksum follows over the block's 16-bit words unless it is 0 or partial. */
static void stamp_telemetry(uint8_t *f, int tel, uint32_t enq_qdepth, uint32_t wait_us, int partial) {
    uint8_t *t = f + tel;
    uint32_t old[DLCP_TELEMETRY_LEN / 2];
    for (int i = 0; i < DLCP_TELEMETRY_LEN / 2; i++) old[i] = be16(t + 2 * i);
    uint8_t *hops = t + DLCP_TEL_HOPS_OFF, *qdp = t + DLCP_TEL_MAX_ENQ_QDEPTH_OFF, *tot = t + DLCP_TEL_SUM_DEQ_TIMEDELTA_US_OFF;
    uint32_t qd = be16(qdp);
    uint32_t total = (be16(tot) << 16) | be16(tot + 2);
    *hops = (uint8_t)(*hops + 1);
    uint32_t d = enq_qdepth > DLCP_TEL_MAX_ENQ_QDEPTH_MASK ? DLCP_TEL_MAX_ENQ_QDEPTH_MASK : enq_qdepth;
    if (d > qd) qd = d;
    total += wait_us;
    qdp[0] = (uint8_t)(qd >> 8); qdp[1] = (uint8_t)qd;
    tot[0] = (uint8_t)(total >> 24); tot[1] = (uint8_t)(total >> 16); tot[2] = (uint8_t)(total >> 8); tot[3] = (uint8_t)total;
    uint32_t csum = be16(f + UDP_CSUM_OFF);
    if (csum == 0 || partial) return;
    uint32_t x = ~csum & 0xFFFF;
    for (int i = 0; i < DLCP_TELEMETRY_LEN / 2; i++) x += (~old[i] & 0xFFFF) + be16(t + 2 * i);
    csum = ~fold(x) & 0xFFFF;
    if (!csum) csum = 0xFFFF;
    f[UDP_CSUM_OFF] = (uint8_t)(csum >> 8);
    f[UDP_CSUM_OFF + 1] = (uint8_t)csum;
}

static inline void egress(Engine *e, int port, Pkt *p, uint32_t wait_us) {
    int oi = port * N_QUEUES + p->qid;
    if (e->occupancy[oi]) e->occupancy[oi]--;
    if (p->tel >= 0) stamp_telemetry(p->data, p->tel, p->enq_depth, wait_us, p->has_vnet && (p->vnet[0] & 1));
}

static void record_delay(Engine *e, uint64_t us) {
    e->delay_n++;
    if (us > e->delay_max) e->delay_max = us;
    if (us < FINE) { e->fine[us]++; return; }
    int b = 64 - __builtin_clzll(us);
    int k = (b << 5) | (int)((us >> (b - 6)) & 31);
    if (k < COARSE) e->coarse[k]++;
}

/* --- queues and the link ----------------------------------------------------------------------- */

static Pkt *pop_highest(Port *pt) {
    for (int q = N_QUEUES - 1; q >= 0; q--) {
        if (pt->q[q].count) { pt->backlog--; return ring_pop(&pt->q[q]); }
    }
    return NULL;
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
    if (s <= 1e-6) { bins[0]++; return; }
    int b = (int)(log2(s / 1e-6) * LAG_BINS_PER_OCTAVE);
    bins[b < LAG_BINS ? b : LAG_BINS - 1]++;
}

/* Dequeue what is due (egress + loss + delay), move what finished its propagation delay to txq. */
static int schedule(Engine *e, Port *pt, int port, double now) {
    int moved = 0;
    if (pt->backlog && !pt->txq.count) {
        if (!pt->unlimited && pt->t_free < now - pt->max_lag) pt->t_free = now;
        for (int k = 0; k < e->batch && pt->backlog && (pt->unlimited || pt->t_free <= now); k++) {
            Pkt *p = pop_highest(pt);
            /* store-and-forward: on a rate-limited port the packet reaches the wire's far end when its
               transmission ends (queues.py) */
            double end = now;
            if (!pt->unlimited) {
                double tx = pt->byte_time > 0 ? p->len * pt->byte_time : pt->pkt_time;
                double slot = pt->ideal > p->t_enq ? pt->ideal : p->t_enq;  /* when an ideal switch would have started it */
                record_wait(e->late_bins, &e->late_n, &e->late_max, now - slot);
                pt->ideal = slot + tx;
                end = pt->t_free += tx;
            }
            double w = (now - p->t_enq) * 1e6;
            uint32_t wait_us = w > 0 ? (uint32_t)w : 0;
            if (p->enq_depth > e->max_enq_qdepth) e->max_enq_qdepth = p->enq_depth;
            record_delay(e, wait_us);
            egress(e, port, p, wait_us);
            if (pt->loss > 0 && rng_unit(e) < pt->loss) { pt->lost++; free(p); continue; }
            double due = end + pt->delay + p->in_tx;  /* the flight ring stays in order, as a wire does */
            if (due > now || pt->flight.count) {
                if (pt->flight.count == pt->flight.cap && ring_grow(&pt->flight, &pt->due) < 0) { pt->tx_errors++; free(p); continue; }
                pt->due[(pt->flight.head + pt->flight.count) % pt->flight.cap] = due;
                ring_push(&pt->flight, p);
            } else {
                if (pt->txq.count == pt->txq.cap && ring_grow(&pt->txq, NULL) < 0) { pt->tx_errors++; free(p); continue; }
                ring_push(&pt->txq, p);
            }
            moved++;
        }
    }
    while (pt->flight.count && pt->due[pt->flight.head] <= now) {
        Pkt *p = ring_pop(&pt->flight);
        if (pt->txq.count == pt->txq.cap && ring_grow(&pt->txq, NULL) < 0) { pt->tx_errors++; free(p); continue; }
        ring_push(&pt->txq, p);
        moved++;
    }
    return moved;
}

/* Hand txq to the kernel in batches; returns packets sent, -errno on a hard error (txq dropped). */
static int transmit(Engine *e, Port *pt) {
    int sent = 0;
    while (pt->txq.count) {
        if (pt->fd < 0) {  /* the interface is gone */
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

static void enqueue(Engine *e, const uint8_t *vnet, uint8_t *f, uint32_t n, int port, int qid, int tel, double now,
                    double in_tx) {
    Port *pt = &e->ports[port];
    Ring *q = &pt->q[qid];
    if (!pt->used || q->count >= pt->depth) {
        pt->overflow++;
        e->occupancy[port * N_QUEUES + qid]--;  /* admitted, but it never got a slot */
        return;
    }
    Pkt *p = malloc(sizeof(Pkt) + n);
    if (!p) { pt->overflow++; e->occupancy[port * N_QUEUES + qid]--; return; }
    p->t_enq = now;
    p->in_tx = in_tx;
    p->len = n;
    p->enq_depth = q->count;  /* enq_qdepth: this packet's own priority queue, as bmv2 counts */
    p->tel = (int16_t)tel;
    p->qid = (uint8_t)qid;
    p->has_vnet = (vnet[0] & 1) || vnet[1];
    if (p->has_vnet) {
        memcpy(p->vnet, vnet, VNET_LEN);
        p->vnet[0] &= (uint8_t)~2;  /* DATA_VALID only means something on receive */
    }
    memcpy(p->data, f, n);
    ring_push(q, p);
    pt->backlog++;
}

/* The kernel's receive time of message i (SCM_TIMESTAMPNS, CLOCK_REALTIME), or -1 without one. */
static double rx_stamp(struct msghdr *h) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS && c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
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
        if (truncated) { pt->truncated++; drop(e, DROP_PARSER_ERROR, len); continue; }
        if (pt->in_byte_time > 0) {
            double start = pt->t_in > now ? pt->t_in : now;
            record_wait(e->burst_bins, &e->burst_n, &e->burst_max, (start - now) / pt->in_byte_time * 1e-6);
            pt->t_in = start + len * pt->in_byte_time;
        }
        int oport, qid, color, tel;
        if (ingress(e, f, len, &oport, &qid, &color, &tel)) enqueue(e, slot, f, len, oport, qid, tel, now, len * pt->in_byte_time);
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
    if (nwake < 0 || nwake > 8) { PyErr_SetString(PyExc_ValueError, "wake_fds: a sequence of at most 8 fds"); return NULL; }
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
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        double now = mono();
        int got = 0, sent = 0;
        for (int k = 0; k < e->n_ports && !reason; k++) {
            int port = e->port_list[k];
            Port *pt = &e->ports[port];
            if (pt->fd < 0) continue;
            int r = receive(e, pt, now);
            if (r < 0) { reason = 2; eport = port; eerr = -r; break; }
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
                if (r < 0) { reason = 2; eport = port; eerr = -r; break; }
                sent += r;
            }
        }
        if (reason) break;
        if (now >= deadline) break;
        if (got || sent) {
            if (now - last_wake_check < CONTROL_POLL_S || !nwake) continue;
            last_wake_check = now;
            for (int i = 0; i < nwake; i++) { pfd[i].fd = wfds[i]; pfd[i].events = POLLIN; }
            if (poll(pfd, nwake, 0) > 0) { reason = 1; break; }
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
        for (int i = 0; i < nwake; i++) { pfd[nfd].fd = wfds[i]; pfd[nfd].events = POLLIN; pfd_port[nfd++] = -1; }
        double wait = until - mono();
        if (wait <= 0) continue;
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        int r = ppoll(pfd, nfd, &ts, NULL);
        last_wake_check = mono();
        if (r > 0) {
            for (int i = 0; i < nfd; i++) {
                if (pfd_port[i] < 0 && (pfd[i].revents & POLLIN)) { reason = 1; break; }
            }
            if (reason) break;
        }
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(iii)", reason, eport, eerr);
}

/* --- configuration ----------------------------------------------------------------------------- */

static void free_groups(Engine *e) {
    for (int g = 0; g < MAX_GROUPS; g++) { free(e->groups[g].members); e->groups[g].members = NULL; e->groups[g].n = 0; }
}

/* set_tables(lpm, nhop, classify, thresholds, lb_mode, rr_next, n_lpm_entries, n_cls_entries)
 *   lpm: [(prefix, prefix_len, entry, group, size)] sorted longest first (group -1: mark_no_route)
 *   nhop: [(group, member, entry, dmac bytes, port)]
 *   classify: CLASSIFY_SLOTS (entry, qid, color), indexed by the classify keys concatenated
 *             (CLASSIFY_*_SHIFT: dlcp_valid, prio, drop_prec, dscp)
 *   thresholds: MAX_PORTS (qmax, k1, k2, k3) */
static PyObject *Engine_set_tables(Engine *e, PyObject *args) {
    PyObject *lpm, *nhop, *cls, *thr, *rr;
    int mode, n_lpm_entries, n_cls_entries;
    if (!PyArg_ParseTuple(args, "OOOOiOii", &lpm, &nhop, &cls, &thr, &mode, &rr, &n_lpm_entries, &n_cls_entries)) return NULL;
    Py_ssize_t nl = PySequence_Size(lpm);
    if (nl < 0) return NULL;
    free(e->lpm);
    e->lpm = calloc(nl ? nl : 1, sizeof(Lpm));
    e->n_lpm = 0;
    for (Py_ssize_t i = 0; i < nl; i++) {
        PyObject *t = PySequence_GetItem(lpm, i);
        unsigned long prefix; int plen, entry, group, size;
        int ok = t && PyArg_ParseTuple(t, "kiiii", &prefix, &plen, &entry, &group, &size);
        Py_XDECREF(t);
        if (!ok) return NULL;
        Lpm *l = &e->lpm[e->n_lpm++];
        l->mask = plen ? (uint32_t)(0xFFFFFFFFu << (32 - plen)) : 0;
        l->prefix = (uint32_t)prefix & l->mask;
        l->entry = entry; l->group = group; l->size = size;
    }
    free_groups(e);
    Py_ssize_t nn = PySequence_Size(nhop);
    if (nn < 0) return NULL;
    for (int pass = 0; pass < 2; pass++) {  /* pass 0 sizes the groups, pass 1 fills them */
        for (Py_ssize_t i = 0; i < nn; i++) {
            PyObject *t = PySequence_GetItem(nhop, i);
            int group, member, entry, port; const char *dmac; Py_ssize_t dlen;
            int ok = t && PyArg_ParseTuple(t, "iiiy#i", &group, &member, &entry, &dmac, &dlen, &port);
            Py_XDECREF(t);
            if (!ok) return NULL;
            if (group < 0 || group >= MAX_GROUPS || member < 0 || member > 0xFFFF || dlen != 6 || port < 0 || port >= MAX_PORTS) {
                PyErr_Format(PyExc_ValueError, "nhop entry (%d, %d) out of range", group, member);
                return NULL;
            }
            Group *g = &e->groups[group];
            if (pass == 0) { if (member + 1 > g->n) g->n = member + 1; continue; }
            if (!g->members) {
                g->members = malloc(g->n * sizeof(Nhop));
                for (int m = 0; m < g->n; m++) g->members[m].entry = -1;
            }
            g->members[member].entry = entry;
            memcpy(g->members[member].dmac, dmac, 6);
            g->members[member].port = port;
        }
    }
    if (PySequence_Size(cls) != CLASSIFY_SLOTS) {
        PyErr_Format(PyExc_ValueError, "classify: %d entries", CLASSIFY_SLOTS);
        return NULL;
    }
    for (int i = 0; i < CLASSIFY_SLOTS; i++) {
        PyObject *t = PySequence_GetItem(cls, i);
        int entry, qid, color;
        int ok = t && PyArg_ParseTuple(t, "iii", &entry, &qid, &color);
        Py_XDECREF(t);
        if (!ok) return NULL;
        e->cls_entry[i] = (int16_t)entry;
        e->cls_qid[i] = (uint8_t)(qid & (N_QUEUES - 1));
        e->cls_color[i] = (uint8_t)(color & (N_COLORS - 1));
    }
    if (PySequence_Size(thr) != MAX_PORTS) { PyErr_Format(PyExc_ValueError, "thresholds: %d entries", MAX_PORTS); return NULL; }
    for (int p = 0; p < MAX_PORTS; p++) {
        PyObject *t = PySequence_GetItem(thr, p);
        unsigned int a, b, c, d;
        int ok = t && PyArg_ParseTuple(t, "IIII", &a, &b, &c, &d);
        Py_XDECREF(t);
        if (!ok) return NULL;
        e->thr[p][0] = a; e->thr[p][1] = b; e->thr[p][2] = c; e->thr[p][3] = d;
    }
    if (PySequence_Size(rr) != MAX_GROUPS) { PyErr_Format(PyExc_ValueError, "rr_next: %d entries", MAX_GROUPS); return NULL; }
    for (int g = 0; g < MAX_GROUPS; g++) {
        PyObject *o = PySequence_GetItem(rr, g);
        long v = o ? PyLong_AsLong(o) : -1;
        Py_XDECREF(o);
        if (PyErr_Occurred()) return NULL;
        e->rr_next[g] = (uint16_t)v;
    }
    e->lb_mode = mode;
    free(e->lpm_hits); free(e->cls_hits);
    e->n_lpm_entries = n_lpm_entries; e->n_cls_entries = n_cls_entries;
    e->lpm_hits = calloc(2 * (n_lpm_entries + 1), sizeof(uint64_t));
    e->cls_hits = calloc(2 * (n_cls_entries + 1), sizeof(uint64_t));
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
    for (int q = 0; q < N_QUEUES; q++) if (ring_init(&pt->q[q], depth) < 0) return PyErr_NoMemory();
    if (ring_init(&pt->flight, 64) < 0 || ring_init(&pt->txq, 2 * e->batch) < 0) return PyErr_NoMemory();
    pt->due = calloc(64, sizeof(double));
    pt->used = 1; pt->fd = fd; pt->depth = depth;
    pt->byte_time = bps > 0 ? 8.0 / bps : 0;
    pt->pkt_time = (bps <= 0 && pps > 0) ? 1.0 / pps : 0;
    pt->unlimited = bps <= 0 && pps <= 0;
    pt->delay = delay; pt->loss = loss; pt->max_lag = lag;
    pt->in_byte_time = host_nic ? pt->byte_time : 0;  /* bit rate only, as queues.py */
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
    for (int p = 0; p < MAX_PORTS; p++) if (e->ports[p].pcap) fflush(e->ports[p].pcap);
    Py_RETURN_NONE;
}

/* --- test entry points: the pipeline without sockets (mirror Pipeline.ingress / egress) ---------- */

static PyObject *Engine_ingress(Engine *e, PyObject *args) {
    Py_buffer buf;
    int in_port;
    if (!PyArg_ParseTuple(args, "w*i", &buf, &in_port)) return NULL;
    int port, qid, color, tel;
    int ok = ingress(e, buf.buf, (uint32_t)buf.len, &port, &qid, &color, &tel);
    PyBuffer_Release(&buf);
    if (!ok) Py_RETURN_NONE;
    return Py_BuildValue("(iiii)", port, qid, color, tel);
}

static PyObject *Engine_egress(Engine *e, PyObject *args) {
    Py_buffer buf;
    int port, qid, tel, partial;
    unsigned int depth, wait_us;
    if (!PyArg_ParseTuple(args, "w*iiiIIp", &buf, &port, &qid, &tel, &depth, &wait_us, &partial)) return NULL;
    int oi = port * N_QUEUES + qid;
    if (oi >= 0 && oi < QUEUE_SLOTS && e->occupancy[oi]) e->occupancy[oi]--;
    if (tel >= 0 && (Py_ssize_t)tel + DLCP_TELEMETRY_LEN <= buf.len && buf.len >= DLCP_OFF) {
        stamp_telemetry(buf.buf, tel, depth, wait_us, partial);
    }
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
}

/* --- counters ---------------------------------------------------------------------------------- */

static PyObject *u64_list(const uint64_t *v, int n) {
    PyObject *l = PyList_New(n);
    if (!l) return NULL;
    for (int i = 0; i < n; i++) PyList_SET_ITEM(l, i, PyLong_FromUnsignedLongLong(v[i]));
    return l;
}

/* {index: (admitted, early, tail)} of the non-zero non-DLCP slots */
static PyObject *non_dlcp_dict(Engine *e) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < NON_DLCP_SLOTS; i++) {
        if (!(e->non_dlcp[0][i] | e->non_dlcp[1][i] | e->non_dlcp[2][i])) continue;
        PyObject *k = PyLong_FromLong(i);
        PyObject *v = Py_BuildValue("(KKK)", e->non_dlcp[0][i], e->non_dlcp[1][i], e->non_dlcp[2][i]);
        if (!k || !v || PyDict_SetItem(d, k, v) < 0) { Py_XDECREF(k); Py_XDECREF(v); Py_DECREF(d); return NULL; }
        Py_DECREF(k); Py_DECREF(v);
    }
    return d;
}

/* What a periodic sample needs, cheaply: occupancy now and its peak since the last sample (the peak
 * restarts from the occupancy now), and per port the packet counts so far, all traffic and non-DLCP. */
static PyObject *Engine_sample(Engine *e, PyObject *Py_UNUSED(noargs)) {
    uint64_t occ[QUEUE_SLOTS], peak[QUEUE_SLOTS], tot[6][MAX_PORTS];
    memset(tot, 0, sizeof tot);
    for (int i = 0; i < QUEUE_SLOTS; i++) {
        occ[i] = e->occupancy[i];
        peak[i] = e->occ_peak[i];
        e->occ_peak[i] = e->occupancy[i];
    }
    for (int i = 0; i < COUNTER_SLOTS; i++) {
        int port = i / (N_QUEUES * N_COLORS);
        tot[0][port] += e->adm[0][i]; tot[1][port] += e->early[0][i]; tot[2][port] += e->tail[0][i];
    }
    for (int i = 0; i < NON_DLCP_SLOTS; i++) {
        int port = i / (N_QUEUES * N_COLORS * NON_DLCP_DSCP_CLASSES);
        for (int k = 0; k < 3; k++) tot[3 + k][port] += e->non_dlcp[k][i];
    }
    return Py_BuildValue("{sNsNsNsNsNsNsNsN}", "occupancy", u64_list(occ, QUEUE_SLOTS), "peak", u64_list(peak, QUEUE_SLOTS),
        "admitted_pkts", u64_list(tot[0], MAX_PORTS), "early_pkts", u64_list(tot[1], MAX_PORTS),
        "tail_pkts", u64_list(tot[2], MAX_PORTS), "non_dlcp_admitted_pkts", u64_list(tot[3], MAX_PORTS),
        "non_dlcp_early_pkts", u64_list(tot[4], MAX_PORTS), "non_dlcp_tail_pkts", u64_list(tot[5], MAX_PORTS));
}

/* d[prefix_bins], d[prefix_n], d[prefix_max_s]: a wait histogram for counters.py */
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

static PyObject *Engine_counters(Engine *e, PyObject *Py_UNUSED(noargs)) {
    uint64_t occ[QUEUE_SLOTS], rr[MAX_GROUPS];
    for (int i = 0; i < QUEUE_SLOTS; i++) occ[i] = e->occupancy[i];
    for (int i = 0; i < MAX_GROUPS; i++) rr[i] = e->rr_next[i];
    PyObject *ports = PyDict_New();
    for (int k = 0; k < e->n_ports; k++) {
        Port *pt = &e->ports[e->port_list[k]];
        PyObject *d = Py_BuildValue("{sKsKsKsKsKsKsKsKsIsi}", "rx_pkts", pt->rx_pkts, "rx_bytes", pt->rx_bytes,
                                    "tx_pkts", pt->tx_pkts, "tx_bytes", pt->tx_bytes, "tx_errors", pt->tx_errors,
                                    "queue_overflow_pkts", pt->overflow, "link_loss_pkts", pt->lost,
                                    "rx_truncated", pt->truncated, "queued_pkts", pt->backlog,
                                    "pending_pkts", (int)(pt->txq.count + pt->flight.count));
        PyObject *key = PyLong_FromLong(e->port_list[k]);
        PyDict_SetItem(ports, key, d);
        Py_DECREF(key); Py_DECREF(d);
    }
    PyObject *d = Py_BuildValue("{sNsNsNsNsNsNsNsNsNsNsNsNsNsIsNsNsKsKsNsN}",
        "admitted_pkts", u64_list(e->adm[0], COUNTER_SLOTS), "admitted_bytes", u64_list(e->adm[1], COUNTER_SLOTS),
        "early_pkts", u64_list(e->early[0], COUNTER_SLOTS), "early_bytes", u64_list(e->early[1], COUNTER_SLOTS),
        "tail_pkts", u64_list(e->tail[0], COUNTER_SLOTS), "tail_bytes", u64_list(e->tail[1], COUNTER_SLOTS),
        "drops_pkts", u64_list(e->drops[0], N_REASONS), "drops_bytes", u64_list(e->drops[1], N_REASONS),
        "lpm_hits", u64_list(e->lpm_hits, 2 * e->n_lpm_entries), "classify_hits", u64_list(e->cls_hits, 2 * e->n_cls_entries),
        "occupancy", u64_list(occ, QUEUE_SLOTS), "rr_next", u64_list(rr, MAX_GROUPS),
        "ports", ports, "max_enq_qdepth", e->max_enq_qdepth,
        "delay_fine", u64_list(e->fine, FINE), "delay_coarse", u64_list(e->coarse, COARSE),
        "delay_n", (unsigned long long)e->delay_n, "delay_max", (unsigned long long)e->delay_max,
        "last_drop", PyLong_FromLong(e->last_drop), "non_dlcp", non_dlcp_dict(e));
    if (!d) return NULL;
    if (put_waits(d, "rx_lag", e->lag_bins, e->lag_n, e->lag_max) < 0
        || put_waits(d, "tx_late", e->late_bins, e->late_n, e->late_max) < 0
        || put_waits(d, "rx_burst", e->burst_bins, e->burst_n, e->burst_max) < 0) { Py_DECREF(d); return NULL; }
    PyObject *cp = u64_list(e->ce[0], QUEUE_SLOTS), *cb = u64_list(e->ce[1], QUEUE_SLOTS);
    if (!cp || !cb || PyDict_SetItemString(d, "ce_pkts", cp) < 0 || PyDict_SetItemString(d, "ce_bytes", cb) < 0) {
        Py_XDECREF(cp); Py_XDECREF(cb); Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(cp); Py_DECREF(cb);
    return d;
}

/* --- the type ---------------------------------------------------------------------------------- */

static int Engine_init(Engine *e, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"batch", "data_port", "seed", NULL};
    int batch = 64, data_port = DLCP_DATA_PORT;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iiK", kwlist, &batch, &data_port, &seed)) return -1;
    if (batch < 1 || batch > 1024) { PyErr_SetString(PyExc_ValueError, "batch must be 1..1024"); return -1; }
    e->batch = batch;
    e->data_port = data_port;
    e->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    e->last_drop = -1;
    for (int p = 0; p < MAX_PORTS; p++) {
        e->thr[p][0] = QUEUE_THRESHOLDS_DEFAULT_QMAX; e->thr[p][1] = QUEUE_THRESHOLDS_DEFAULT_K1;
        e->thr[p][2] = QUEUE_THRESHOLDS_DEFAULT_K2; e->thr[p][3] = QUEUE_THRESHOLDS_DEFAULT_K3;
    }
    for (int i = 0; i < QUEUE_SLOTS; i++) e->ecn_k[i] = ECN_THRESHOLD_DEFAULT_K;
    e->rxbuf = malloc((size_t)batch * SLOT);
    e->rxctl = calloc(batch, RXCTL);
    e->rxmsgs = calloc(batch, sizeof(struct mmsghdr));
    e->txmsgs = calloc(batch, sizeof(struct mmsghdr));
    e->rxiov = calloc(batch, sizeof(struct iovec));
    e->txiov = calloc(2 * batch, sizeof(struct iovec));
    e->lpm_hits = calloc(2, sizeof(uint64_t));
    e->cls_hits = calloc(2, sizeof(uint64_t));
    if (!e->rxbuf || !e->rxctl || !e->rxmsgs || !e->txmsgs || !e->rxiov || !e->txiov) { PyErr_NoMemory(); return -1; }
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
    free_groups(e);
    free(e->lpm); free(e->lpm_hits); free(e->cls_hits);
    free(e->rxbuf); free(e->rxctl); free(e->rxmsgs); free(e->txmsgs); free(e->rxiov); free(e->txiov);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyMethodDef Engine_methods[] = {
    {"set_tables", (PyCFunction)Engine_set_tables, METH_VARARGS, "install compiled tables"},
    {"set_ecn", (PyCFunction)Engine_set_ecn, METH_VARARGS, "install the ECN threshold of every queue"},
    {"add_port", (PyCFunction)Engine_add_port, METH_VARARGS, "attach a port socket and its queue config"},
    {"port_gone", (PyCFunction)Engine_port_gone, METH_VARARGS, "stop using a port whose interface vanished"},
    {"run", (PyCFunction)Engine_run, METH_VARARGS, "forward until the time is up, a wake fd is readable or a port fails"},
    {"flush", (PyCFunction)Engine_flush, METH_NOARGS, "flush pcap files"},
    {"sample", (PyCFunction)Engine_sample, METH_NOARGS, "occupancy, its peak since the last sample, packet counts per port"},
    {"ingress", (PyCFunction)Engine_ingress, METH_VARARGS, "ingress on one frame (tests)"},
    {"egress", (PyCFunction)Engine_egress, METH_VARARGS, "egress on one frame (tests)"},
    {"counters", (PyCFunction)Engine_counters, METH_NOARGS, "counters, registers and port statistics"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "emulation.builtin_switch._fastpath.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
    .tp_doc = "The DLCP pipeline, egress queues and batched AF_PACKET loop of one switch.",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", "Fast path of the built-in dataplane.", -1,
                                    NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastpath(void) {
    crc16_init();
    if (PyType_Ready(&EngineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&EngineType);
    PyModule_AddObject(m, "Engine", (PyObject *)&EngineType);
    PyModule_AddStringConstant(m, "SOURCE_SHA", FASTPATH_SOURCE_SHA);
    return m;
}
