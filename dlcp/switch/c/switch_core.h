/* The DLCP switch pipeline core (docs/pipeline.md), one statement in C of what the Python
 * reference model does (dlcp/switch/pipeline.py, dlcp/queueing): the parser, drop reasons, the
 * tables and their lookups (ipv4_lpm, member choice, nhop, classify, queue_thresholds,
 * ecn_threshold), admission by drop precedence, ECN marking, TTL and checksums, telemetry stamping,
 * the queue disciplines (sw_qdisc_pick) and every counter and register.
 *
 * Compiled into the built-in switch's C engine (emulation/builtin_switch/_fastpath.c, as C) and
 * into the ns-3 switch (simulation/ns3/cpp/dlcp_switch.h, as C++ by cppyy), so it is written in
 * the common subset of C99 and C++ and is header-only. What stays outside is I/O: where frames
 * come from and go to, the queues' storage, when a port may send (its rate), link delay and loss,
 * and the clock. A glue calls sw_ingress on each frame, stores an admitted packet in queue qid of
 * its egress port (or gives the slot back with sw_release when that queue is full), asks
 * sw_qdisc_pick which queue of a port sends next, and calls sw_egress for each packet it takes.
 *
 * Tables come flattened from Python (Pipeline.compiled_tables), so no match semantics live here
 * but a longest-prefix scan. Offsets, field positions, sizes, codes and discipline ids come from
 * dlcp_wire.h, generated from dlcp/wire/layout.py, dlcp/network/pipeline_names.py and
 * dlcp/queueing (`make gen`). */
#ifndef DLCP_SWITCH_CORE_H
#define DLCP_SWITCH_CORE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlcp_wire.h"

#ifdef __cplusplus
#define SW_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define SW_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define SW_QUEUE_SLOTS    REGISTER_OCCUPANCY_SIZE /* port * N_QUEUES + qid */
#define SW_COUNTER_SLOTS  COUNTER_ADMITTED_SIZE   /* (port * N_QUEUES + qid) * N_COLORS + color */
#define SW_N_REASONS      COUNTER_DROPS_SIZE
#define SW_NON_DLCP_SLOTS (SW_COUNTER_SLOTS * NON_DLCP_DSCP_CLASSES) /* counter slot * classes + dscp >> 3 */
#define SW_CLASSIFY_SLOTS (1 << CLASSIFY_KEY_BITS)                   /* every (dlcp_valid, prio, drop_prec, dscp) */
#define SW_TEL_OFF        (DLCP_OFF + DLCP_HEADER_LEN)
#define SW_UDP_CSUM_OFF   (L4_OFF + 6)
#define SW_VIEW           (SW_TEL_OFF + DLCP_TELEMETRY_LEN) /* the frame bytes the pipeline reads or writes */
#define SW_DELAY_FINE     256                               /* queueing times: 1 us buckets below this, */
#define SW_DELAY_COARSE   (34 * 32)                         /* then 32 log-spaced ones per power of two */

/* what this code assumes of the generated layout (it reads these fields as single bytes, the
 * telemetry block as whole words, rr_next as 16 bits) */
SW_STATIC_ASSERT(SW_QUEUE_SLOTS == MAX_PORTS * N_QUEUES, "occupancy is indexed port * N_QUEUES + qid");
SW_STATIC_ASSERT(COUNTER_CE_MARKED_SIZE == SW_QUEUE_SLOTS, "ce_marked is indexed like occupancy");
SW_STATIC_ASSERT(SW_COUNTER_SLOTS == SW_QUEUE_SLOTS * N_COLORS && COUNTER_EARLY_DROPS_SIZE == SW_COUNTER_SLOTS
                     && COUNTER_TAIL_DROPS_SIZE == SW_COUNTER_SLOTS,
                 "queue counters are indexed per color");
SW_STATIC_ASSERT(DLCP_VER_SIZE == 1 && DLCP_PRIO_SIZE == 1 && DLCP_DROP_PREC_SIZE == 1 && DLCP_FLAGS_SIZE == 1,
                 "the parser reads ver, prio, drop_prec and flags as single bytes");
SW_STATIC_ASSERT(DLCP_TEL_HOPS_SIZE == 1 && DLCP_TEL_MAX_ENQ_QDEPTH_SIZE == 2 && DLCP_TEL_SUM_DEQ_TIMEDELTA_US_SIZE == 4
                     && DLCP_TELEMETRY_LEN % 2 == 0,
                 "sw_stamp_telemetry's field widths");
SW_STATIC_ASSERT(REGISTER_RR_NEXT_BITS == 16, "rr_next is uint16_t");
SW_STATIC_ASSERT(NON_DLCP_DSCP_CLASSES == 8, "the DSCP class of a non-DLCP frame is its TOS byte >> 5");
SW_STATIC_ASSERT(CLASSIFY_DSCP_SHIFT == 0 && CLASSIFY_DSCP_BITS == 6, "the DSCP is the low bits of the classify index");

typedef struct {
    uint32_t prefix, mask;
    int entry, group, size;
} SwLpm; /* group -1: mark_no_route */
typedef struct {
    int entry;
    uint8_t dmac[6];
    int port;
} SwNhop; /* entry -1: no member */
typedef struct {
    int n;
    SwNhop *members;
} SwGroup;

/* One port's queue discipline (dlcp/queueing): kind QDISC_STRICT or QDISC_WRR, and its state. */
typedef struct {
    int kind;
    uint32_t quantum[N_QUEUES]; /* wrr: bytes a visit adds to the queue's deficit */
    uint32_t deficit[N_QUEUES]; /* wrr */
    int cur;                    /* wrr: the queue being visited */
    int fresh;                  /* wrr: its quantum not yet added on this visit */
} SwQdisc;

/* Where an admitted packet goes: egress port, queue, color, telemetry block offset (-1: none). */
typedef struct {
    int port, qid, color, tel;
} SwVerdict;

typedef double (*SwRandom)(void *ctx); /* uniform in [0, 1) */

typedef struct {
    int data_port, lb_mode;
    /* tables */
    SwLpm *lpm;
    int n_lpm;
    SwGroup groups[MAX_GROUPS];
    int16_t cls_entry[SW_CLASSIFY_SLOTS];
    uint8_t cls_qid[SW_CLASSIFY_SLOTS], cls_color[SW_CLASSIFY_SLOTS];
    uint32_t thr[MAX_PORTS][4]; /* qmax, k1, k2, k3 */
    uint32_t ecn_k[SW_QUEUE_SLOTS];
    uint64_t *lpm_hits; /* [entry * 2] packets, [entry * 2 + 1] bytes */
    int n_lpm_entries;
    uint64_t *cls_hits;
    int n_cls_entries;
    SwQdisc qdisc[MAX_PORTS];
    /* registers */
    uint32_t occupancy[SW_QUEUE_SLOTS];
    uint32_t occ_peak[SW_QUEUE_SLOTS]; /* the highest occupancy since the last sw_sample */
    uint16_t rr_next[MAX_GROUPS];
    /* counters: [0] packets, [1] bytes */
    uint64_t adm[2][SW_COUNTER_SLOTS], early[2][SW_COUNTER_SLOTS], tail[2][SW_COUNTER_SLOTS];
    uint64_t ce[2][SW_QUEUE_SLOTS];
    uint64_t drops[2][SW_N_REASONS];
    /* the share of the queue counters' packets from frames without a DLCP header, [admitted, early,
     * tail] indexed counter slot * NON_DLCP_DSCP_CLASSES + dscp class: background and control
     * traffic told from gradients */
    uint64_t non_dlcp[3][SW_NON_DLCP_SLOTS];
    int last_drop; /* the drop reason of the last dropped packet, -1 for admission */
    /* the queues' telemetry */
    uint32_t max_enq_qdepth;
    uint64_t delay_fine[SW_DELAY_FINE], delay_coarse[SW_DELAY_COARSE], delay_n, delay_max;
    /* spray_random's member choice: a glue's own random stream, else xorshift64* from the seed */
    SwRandom random;
    void *random_ctx;
    uint64_t rng;
} SwCore;

/* --- helpers ----------------------------------------------------------------------------------- */

static inline uint32_t sw_fold(uint32_t x) {
    while (x >> 16) x = (x & 0xFFFF) + (x >> 16);
    return x;
}

static inline uint32_t sw_be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }

/* bmv2's HashAlgorithm.crc16 (CRC-16/ARC: polynomial 0x8005 reflected, init 0), dlcp/switch/hashing.py */
static inline uint16_t sw_crc16(const uint8_t *p, int n) {
    static uint16_t table[256];
    static int ready = 0;
    if (!ready) {
        for (int b = 0; b < 256; b++) {
            uint16_t c = (uint16_t)b;
            for (int i = 0; i < 8; i++) c = (c & 1) ? (uint16_t)((c >> 1) ^ 0xA001) : (uint16_t)(c >> 1);
            table[b] = c;
        }
        ready = 1;
    }
    uint16_t c = 0;
    for (int i = 0; i < n; i++) c = (uint16_t)((c >> 8) ^ table[(c ^ p[i]) & 0xFF]);
    return c;
}

static inline double sw_random_unit(SwCore *c) {
    if (c->random) return c->random(c->random_ctx);
    uint64_t x = c->rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0);
}

/* --- set-up ------------------------------------------------------------------------------------ */

/* A switch with empty tables and the P4 program's default actions; returns 0, -1 without memory. */
static inline int sw_init(SwCore *c, int data_port, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->data_port = data_port;
    c->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    c->last_drop = -1;
    for (int p = 0; p < MAX_PORTS; p++) {
        c->thr[p][0] = QUEUE_THRESHOLDS_DEFAULT_QMAX;
        c->thr[p][1] = QUEUE_THRESHOLDS_DEFAULT_K1;
        c->thr[p][2] = QUEUE_THRESHOLDS_DEFAULT_K2;
        c->thr[p][3] = QUEUE_THRESHOLDS_DEFAULT_K3;
        c->qdisc[p].kind = QDISC_STRICT;
        c->qdisc[p].cur = N_QUEUES - 1;
        c->qdisc[p].fresh = 1;
    }
    for (int i = 0; i < SW_QUEUE_SLOTS; i++) c->ecn_k[i] = ECN_THRESHOLD_DEFAULT_K;
    for (int i = 0; i < SW_CLASSIFY_SLOTS; i++) c->cls_entry[i] = -1; /* the default set_class(0, 0) */
    c->lpm_hits = (uint64_t *)calloc(2, sizeof(uint64_t));
    c->cls_hits = (uint64_t *)calloc(2, sizeof(uint64_t));
    return c->lpm_hits && c->cls_hits ? 0 : -1;
}

static inline void sw_clear_routes(SwCore *c) {
    free(c->lpm);
    c->lpm = NULL;
    c->n_lpm = 0;
    for (int g = 0; g < MAX_GROUPS; g++) {
        free(c->groups[g].members);
        c->groups[g].members = NULL;
        c->groups[g].n = 0;
    }
}

static inline void sw_free(SwCore *c) {
    sw_clear_routes(c);
    free(c->lpm_hits);
    free(c->cls_hits);
    c->lpm_hits = c->cls_hits = NULL;
}

/* How many entries ipv4_lpm and classify hold (their direct counters); resets those counters. */
static inline int sw_set_table_sizes(SwCore *c, int n_lpm_entries, int n_cls_entries) {
    free(c->lpm_hits);
    free(c->cls_hits);
    c->n_lpm_entries = n_lpm_entries;
    c->n_cls_entries = n_cls_entries;
    c->lpm_hits = (uint64_t *)calloc(2 * (size_t)(n_lpm_entries + 1), sizeof(uint64_t));
    c->cls_hits = (uint64_t *)calloc(2 * (size_t)(n_cls_entries + 1), sizeof(uint64_t));
    return c->lpm_hits && c->cls_hits ? 0 : -1;
}

/* An ipv4_lpm entry; add them longest prefix first (a default route is a /0 entry). group -1 (size
 * 0) is the mark_no_route action. Returns -1 without memory. */
static inline int sw_add_lpm(SwCore *c, uint32_t prefix, int plen, int entry, int group, int size) {
    SwLpm *l = (SwLpm *)realloc(c->lpm, (size_t)(c->n_lpm + 1) * sizeof(SwLpm));
    if (!l) return -1;
    c->lpm = l;
    l += c->n_lpm++;
    l->mask = plen ? (uint32_t)(0xFFFFFFFFu << (32 - plen)) : 0;
    l->prefix = prefix & l->mask;
    l->entry = entry;
    l->group = group < 0 ? -1 : group;
    l->size = group < 0 ? 0 : size;
    return 0;
}

/* An nhop entry (set_nhop): member `member` of `group` leaves through `port` toward `dmac`.
 * Returns -1 for a group or member out of range, or without memory. */
static inline int sw_add_nhop(SwCore *c, int group, int member, int entry, const uint8_t *dmac, int port) {
    if (group < 0 || group >= MAX_GROUPS || member < 0 || member > 0xFFFF || port < 0 || port >= MAX_PORTS) return -1;
    SwGroup *g = &c->groups[group];
    if (member >= g->n) {
        SwNhop *m = (SwNhop *)realloc(g->members, (size_t)(member + 1) * sizeof(SwNhop));
        if (!m) return -1;
        for (int i = g->n; i <= member; i++) m[i].entry = -1;
        g->members = m;
        g->n = member + 1;
    }
    g->members[member].entry = entry;
    memcpy(g->members[member].dmac, dmac, 6);
    g->members[member].port = port;
    return 0;
}

/* classify, precomputed for index `key` (the classify keys concatenated, CLASSIFY_*_SHIFT) */
static inline void sw_set_class(SwCore *c, int key, int entry, int qid, int color) {
    c->cls_entry[key] = (int16_t)entry;
    c->cls_qid[key] = (uint8_t)(qid & (N_QUEUES - 1));
    c->cls_color[key] = (uint8_t)(color & (N_COLORS - 1));
}

static inline void sw_set_thresholds(SwCore *c, int port, uint32_t qmax, uint32_t k1, uint32_t k2, uint32_t k3) {
    c->thr[port][0] = qmax;
    c->thr[port][1] = k1;
    c->thr[port][2] = k2;
    c->thr[port][3] = k3;
}

/* A port's queue discipline: QDISC_* and its N_QUEUES parameters (wrr: the weights, each >= 1).
 * Returns -1 for an unknown discipline or bad parameters. */
static inline int sw_set_qdisc(SwCore *c, int port, int kind, const uint32_t *params) {
    if (port < 0 || port >= MAX_PORTS || (kind != QDISC_STRICT && kind != QDISC_WRR)) return -1;
    for (int q = 0; q < N_QUEUES && kind == QDISC_WRR; q++)
        if (params[q] < 1 || params[q] > 0xFFFFFFFFu / QDISC_QUANTUM_BYTES / 4) return -1;
    SwQdisc *d = &c->qdisc[port];
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->cur = N_QUEUES - 1;
    d->fresh = 1;
    for (int q = 0; q < N_QUEUES && kind == QDISC_WRR; q++) d->quantum[q] = params[q] * QDISC_QUANTUM_BYTES;
    return 0;
}

/* --- ingress ----------------------------------------------------------------------------------- */

static inline int sw_drop(SwCore *c, int reason, uint32_t n) {
    c->drops[0][reason]++;
    c->drops[1][reason] += n;
    c->last_drop = reason;
    return 0;
}

/* An admitted ECN-capable packet (ECT(0) or ECT(1)) whose queue held ecn_k[oi] or more packets
 * before it: CE, the IPv4 checksum patched over the first header word (RFC 1624), counted. */
static inline void sw_ecn_mark(SwCore *c, uint8_t *f, int oi, uint32_t occ, uint32_t n) {
    uint8_t tos = f[15], ecn = tos & ECN_MASK;
    if ((ecn != ECN_ECT0 && ecn != ECN_ECT1) || occ < c->ecn_k[oi]) return;
    uint32_t old = ((uint32_t)f[14] << 8) | tos, nw = (old & ~(uint32_t)ECN_MASK) | ECN_CE;
    f[15] = (uint8_t)nw;
    uint32_t hc = (~sw_be16(f + 24) & 0xFFFF) + (~old & 0xFFFF) + nw;
    hc = ~sw_fold(hc) & 0xFFFF;
    f[24] = (uint8_t)(hc >> 8);
    f[25] = (uint8_t)hc;
    c->ce[0][oi]++;
    c->ce[1][oi] += n;
}

/* Ingress on a frame of n bytes whose first min(n, SW_VIEW) are at f. Returns 1 when admitted:
 * the frame's MACs, TOS, TTL and IPv4 checksum are rewritten in place and `out` says where it
 * goes (the caller must then queue it, or call sw_release, and later sw_egress). Returns 0 when
 * dropped (counted; `last_drop` says why, -1 for admission). */
static inline int sw_ingress(SwCore *c, uint8_t *f, uint32_t n, SwVerdict *out) {
    /* parser */
    if (n < ETH_LEN) return sw_drop(c, DROP_PARSER_ERROR, n);
    if (f[12] != 0x08 || f[13] != 0x00) return sw_drop(c, DROP_NOT_IPV4, n);
    if (n < L4_OFF) return sw_drop(c, DROP_PARSER_ERROR, n);
    int proto = f[23], sport = 0, dport = 0, dlcp = 0, tel = -1;
    /* transport headers only behind a plain 20-byte header of a first fragment */
    if ((f[14] & 0x0F) == 5 && !((f[20] & 0x1F) || f[21])) {
        if (proto == 17) {
            if (n < DLCP_OFF) return sw_drop(c, DROP_PARSER_ERROR, n);
            sport = (f[34] << 8) | f[35];
            dport = (f[36] << 8) | f[37];
            if (dport == c->data_port) {
                const uint8_t *h = f + DLCP_OFF;
                if (n < SW_TEL_OFF || ((h[DLCP_VER_OFF] >> DLCP_VER_SHIFT) & DLCP_VER_MASK) != DLCP_VERSION)
                    return sw_drop(c, DROP_PARSER_ERROR, n);
                dlcp = 1;
                if (h[DLCP_FLAGS_OFF] & DLCP_FLAG_TELEMETRY) {
                    if (n < SW_TEL_OFF + DLCP_TELEMETRY_LEN) return sw_drop(c, DROP_PARSER_ERROR, n);
                    tel = SW_TEL_OFF;
                }
            }
        } else if (proto == 6) {
            if (n < L4_OFF + 4) return sw_drop(c, DROP_PARSER_ERROR, n);
            sport = (f[34] << 8) | f[35];
            dport = (f[36] << 8) | f[37];
        }
    }
    int ttl = f[22];
    if (ttl <= 1) return sw_drop(c, DROP_TTL_EXPIRED, n);
    /* ipv4_lpm: a hit counts even when its action, or the nhop lookup after it, drops */
    uint32_t dst = ((uint32_t)f[30] << 24) | ((uint32_t)f[31] << 16) | ((uint32_t)f[32] << 8) | f[33];
    const SwLpm *hit = NULL;
    for (int i = 0; i < c->n_lpm; i++) { /* longest prefix first */
        if ((dst & c->lpm[i].mask) == c->lpm[i].prefix) {
            hit = &c->lpm[i];
            break;
        }
    }
    if (hit && hit->entry >= 0 && hit->entry < c->n_lpm_entries) {
        c->lpm_hits[hit->entry * 2]++;
        c->lpm_hits[hit->entry * 2 + 1] += n;
    }
    if (!hit || !hit->size) return sw_drop(c, DROP_NO_ROUTE, n);
    /* member choice */
    int group = hit->group, size = hit->size, member;
    if (dlcp && c->lb_mode == LB_SPRAY_RANDOM) {
        member = (int)(sw_random_unit(c) * size);
        if (member >= size) member = size - 1;
    } else if (dlcp && c->lb_mode == LB_SPRAY_RR) {
        uint16_t r = c->rr_next[group];
        member = r % size;
        c->rr_next[group] = (uint16_t)(r + 1);
    } else {
        uint8_t key[13];
        memcpy(key, f + 26, 8);
        key[8] = (uint8_t)proto;
        key[9] = (uint8_t)(sport >> 8);
        key[10] = (uint8_t)sport;
        key[11] = (uint8_t)(dport >> 8);
        key[12] = (uint8_t)dport;
        member = sw_crc16(key, 13) % size;
    }
    /* nhop: eth.src = old eth.dst, eth.dst = dmac */
    const SwGroup *g = &c->groups[group];
    if (member >= g->n || g->members[member].entry < 0) return sw_drop(c, DROP_NO_ROUTE, n);
    const SwNhop *nh = &g->members[member];
    memmove(f + 6, f, 6);
    memcpy(f, nh->dmac, 6);
    int port = nh->port;
    /* classify */
    int key = (f[15] >> 2) << CLASSIFY_DSCP_SHIFT;
    if (dlcp) {
        const uint8_t *h = f + DLCP_OFF;
        key |= (1 << CLASSIFY_DLCP_VALID_SHIFT)
               | (((h[DLCP_PRIO_OFF] >> DLCP_PRIO_SHIFT) & DLCP_PRIO_MASK) << CLASSIFY_DLCP_PRIO_SHIFT)
               | (((h[DLCP_DROP_PREC_OFF] >> DLCP_DROP_PREC_SHIFT) & DLCP_DROP_PREC_MASK)
                  << CLASSIFY_DLCP_DROP_PREC_SHIFT);
    }
    int ce = c->cls_entry[key], qid = c->cls_qid[key], color = c->cls_color[key];
    if (ce >= 0 && ce < c->n_cls_entries) {
        c->cls_hits[ce * 2]++;
        c->cls_hits[ce * 2 + 1] += n;
    }
    /* queue_thresholds + admission (dlcp/queueing/admission.py) */
    const uint32_t *th = c->thr[port];
    int oi = port * N_QUEUES + qid, ci = oi * N_COLORS + color;
    uint32_t occ = c->occupancy[oi];
    int ni = dlcp ? -1 : ci * NON_DLCP_DSCP_CLASSES + (f[15] >> 5);
    if (occ >= th[0]) {
        c->tail[0][ci]++;
        c->tail[1][ci] += n;
        if (ni >= 0) c->non_dlcp[2][ni]++;
        c->last_drop = -1;
        return 0;
    }
    if (color && occ >= th[color]) {
        c->early[0][ci]++;
        c->early[1][ci] += n;
        if (ni >= 0) c->non_dlcp[1][ni]++;
        c->last_drop = -1;
        return 0;
    }
    if (ni >= 0) c->non_dlcp[0][ni]++;
    c->occupancy[oi] = occ + 1;
    if (occ + 1 > c->occ_peak[oi]) c->occ_peak[oi] = occ + 1;
    c->adm[0][ci]++;
    c->adm[1][ci] += n;
    sw_ecn_mark(c, f, oi, occ, n);
    /* TTL -= 1, the IPv4 checksum updated incrementally (RFC 1624 eqn. 3) */
    uint32_t old = ((uint32_t)ttl << 8) | (uint32_t)proto;
    f[22] = (uint8_t)(ttl - 1);
    uint32_t hc = (~sw_be16(f + 24) & 0xFFFF) + (~old & 0xFFFF) + (old - 0x100);
    hc = ~sw_fold(hc) & 0xFFFF;
    f[24] = (uint8_t)(hc >> 8);
    f[25] = (uint8_t)hc;
    out->port = port;
    out->qid = qid;
    out->color = color;
    out->tel = tel;
    return 1;
}

/* An admitted packet its queue could not take (the physical queue was full): its slot back. */
static inline void sw_release(SwCore *c, int port, int qid) {
    int oi = port * N_QUEUES + qid;
    if (c->occupancy[oi]) c->occupancy[oi]--;
}

/* --- queue disciplines (dlcp/queueing: strict.py, wrr.py) ------------------------------------- */

/* Which queue of a port sends next: count[q] packets wait in queue q, head_len[q] is the frame
 * bytes of its head (read by wrr only). -1 when every queue is empty. The caller then takes that
 * queue's head packet. */
static inline int sw_qdisc_pick(SwQdisc *d, const uint32_t *count, const uint32_t *head_len) {
    int any = 0;
    for (int q = 0; q < N_QUEUES; q++) any |= count[q] != 0;
    if (!any) return -1;
    if (d->kind == QDISC_STRICT) {
        for (int q = N_QUEUES - 1; q >= 0; q--)
            if (count[q]) return q;
    }
    /* QDISC_WRR: deficit round robin, visiting 7, 6, ..., 0, 7, ... */
    for (;;) {
        int q = d->cur;
        if (!count[q]) { /* an empty queue keeps no credit */
            d->deficit[q] = 0;
            d->cur = (q + N_QUEUES - 1) % N_QUEUES;
            d->fresh = 1;
            continue;
        }
        if (d->fresh) {
            d->deficit[q] += d->quantum[q];
            d->fresh = 0;
        }
        if (head_len[q] <= d->deficit[q]) {
            d->deficit[q] -= head_len[q];
            if (count[q] == 1) { /* it empties: no credit kept for later */
                d->deficit[q] = 0;
                d->cur = (q + N_QUEUES - 1) % N_QUEUES;
                d->fresh = 1;
            }
            return q;
        }
        d->cur = (q + N_QUEUES - 1) % N_QUEUES;
        d->fresh = 1;
    }
}

/* --- egress ------------------------------------------------------------------------------------ */

/* hops += 1, max_enq_qdepth = max(.., enq_qdepth), sum_deq_timedelta_us += wait (the reserved byte
 * stays); the UDP checksum follows over the block's 16-bit words unless it is 0 (none) or partial
 * (completed later by the kernel). */
static inline void sw_stamp_telemetry(uint8_t *f, int tel, uint32_t enq_qdepth, uint32_t wait_us, int partial) {
    uint8_t *t = f + tel;
    uint32_t old[DLCP_TELEMETRY_LEN / 2];
    for (int i = 0; i < DLCP_TELEMETRY_LEN / 2; i++) old[i] = sw_be16(t + 2 * i);
    uint8_t *hops = t + DLCP_TEL_HOPS_OFF, *qdp = t + DLCP_TEL_MAX_ENQ_QDEPTH_OFF;
    uint8_t *tot = t + DLCP_TEL_SUM_DEQ_TIMEDELTA_US_OFF;
    uint32_t qd = sw_be16(qdp), total = (sw_be16(tot) << 16) | sw_be16(tot + 2);
    *hops = (uint8_t)(*hops + 1);
    uint32_t d = enq_qdepth > DLCP_TEL_MAX_ENQ_QDEPTH_MASK ? DLCP_TEL_MAX_ENQ_QDEPTH_MASK : enq_qdepth;
    if (d > qd) qd = d;
    total += wait_us;
    qdp[0] = (uint8_t)(qd >> 8);
    qdp[1] = (uint8_t)qd;
    tot[0] = (uint8_t)(total >> 24);
    tot[1] = (uint8_t)(total >> 16);
    tot[2] = (uint8_t)(total >> 8);
    tot[3] = (uint8_t)total;
    uint32_t csum = sw_be16(f + SW_UDP_CSUM_OFF);
    if (csum == 0 || partial) return;
    uint32_t x = ~csum & 0xFFFF;
    for (int i = 0; i < DLCP_TELEMETRY_LEN / 2; i++) x += (~old[i] & 0xFFFF) + sw_be16(t + 2 * i);
    csum = ~sw_fold(x) & 0xFFFF;
    if (!csum) csum = 0xFFFF;
    f[SW_UDP_CSUM_OFF] = (uint8_t)(csum >> 8);
    f[SW_UDP_CSUM_OFF + 1] = (uint8_t)csum;
}

static inline void sw_record_delay(SwCore *c, uint64_t us) {
    c->delay_n++;
    if (us > c->delay_max) c->delay_max = us;
    if (us < SW_DELAY_FINE) {
        c->delay_fine[us]++;
        return;
    }
    int b = 64 - __builtin_clzll(us);
    int k = (b << 5) | (int)((us >> (b - 6)) & 31);
    if (k < SW_DELAY_COARSE) c->delay_coarse[k]++;
}

/* A packet leaves queue qid of `port` after wait_us in it (enq_depth: packets ahead of it in that
 * queue when it came): its slot is given back, its wait and depth counted, its telemetry block
 * stamped (f: the frame's first SW_VIEW bytes; may be NULL when tel < 0). */
static inline void sw_egress(SwCore *c, int port, int qid, uint8_t *f, int tel, uint32_t enq_depth, uint64_t wait_us,
                             int csum_partial) {
    sw_release(c, port, qid);
    if (enq_depth > c->max_enq_qdepth) c->max_enq_qdepth = enq_depth;
    sw_record_delay(c, wait_us);
    if (tel >= 0 && f) sw_stamp_telemetry(f, tel, enq_depth, (uint32_t)wait_us, csum_partial);
}

/* --- samples ----------------------------------------------------------------------------------- */

/* What a periodic sample needs: occupancy now and its peak since the last sample (the peak restarts
 * from the occupancy now), and per port the packet counts so far: totals[0..2] admitted, early,
 * tail; totals[3..5] the same of frames without a DLCP header. */
static inline void sw_sample(SwCore *c, uint64_t *occ, uint64_t *peak, uint64_t (*totals)[MAX_PORTS]) {
    for (int i = 0; i < SW_QUEUE_SLOTS; i++) {
        occ[i] = c->occupancy[i];
        peak[i] = c->occ_peak[i];
        c->occ_peak[i] = c->occupancy[i];
    }
    for (int k = 0; k < 6; k++)
        for (int p = 0; p < MAX_PORTS; p++) totals[k][p] = 0;
    for (int i = 0; i < SW_COUNTER_SLOTS; i++) {
        int port = i / (N_QUEUES * N_COLORS);
        totals[0][port] += c->adm[0][i];
        totals[1][port] += c->early[0][i];
        totals[2][port] += c->tail[0][i];
    }
    for (int i = 0; i < SW_NON_DLCP_SLOTS; i++) {
        int port = i / (N_QUEUES * N_COLORS * NON_DLCP_DSCP_CLASSES);
        for (int k = 0; k < 3; k++) totals[3 + k][port] += c->non_dlcp[k][i];
    }
}

#endif
