/* The receive path of the data packets the transport's protocol core need not see one by one.
 *
 * For most data packets of a message the protocol core's receiver (dlcp/transport/core/receiver.py,
 * ReceiverCore.on_datagram) only checks the header, counts the packet for its sender's FEEDBACK
 * (packets, their bytes, CE marks, the newest packet, when they arrived), copies the payload into
 * the message's buffer, marks the chunk received and updates the message's counters and times:
 * nothing it decides changes. This core does exactly that in C, in the Python receiver's own
 * buffers, for the messages the receiver has opened here (rx_open: its driver's mirror,
 * dlcp/transport/rx_mirror.py, opens a message once no packet of it can complete a PROBE's round or
 * a BITMAP's request), and hands everything else back: a datagram it does not take goes up to the
 * core whole (a PROBE, a duplicate, one of an unknown message, anything malformed, which the core
 * counts and drops), and when a sender's FEEDBACK may be due after a packet it took (rx_budget), it
 * stops and says so (RX_DECIDE): the core then decides (FEEDBACK now, or the FEEDBACK delay
 * starts). Where the driver watches the delays this core starts (rx_delay: the UDP driver), the
 * core hands over the delay's length with the budget and this core starts it on the sender's first
 * packet, so the core decides only when a FEEDBACK goes out. Counters and times wait here as deltas
 * until the mirror takes them (rx_take), which it does before the core does anything else. The
 * socket waits of the packets it takes go into waits.py's bins here too, and a packet that waited
 * longer than the host-mark time counts as CE-marked, as in on_datagram.
 *
 * Compiled into the UDP driver's extension (dlcp/transport/_rxpath.c, as C, with recvmmsg) and into
 * the ns-3 hosts (simulation/ns3/cpp/dlcp_rx.h, as C++ by cppyy), so it is written in the common
 * subset of C99 and C++ and is header-only, as the switch's pipeline core (switch_core.h). Header
 * offsets and codes come from dlcp_wire.h, generated from dlcp/wire/layout.py. Both engines are held
 * to the Python receiver by tests/unit/test_rx_core.py and tests/ns3/test_ns3_rx.py. */
#ifndef DLCP_RX_CORE_H
#define DLCP_RX_CORE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlcp_wire.h"

#ifdef __cplusplus
#define RX_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define RX_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

RX_STATIC_ASSERT(DLCP_VER_SIZE == 1 && DLCP_TYPE_SIZE == 1 && DLCP_PHASE_SIZE == 1 && DLCP_JOB_ID_SIZE == 1
                     && DLCP_SRC_RANK_SIZE == 1 && DLCP_FLAGS_SIZE == 1 && DLCP_ITER_SIZE == 2 && DLCP_MSG_ID_SIZE == 2
                     && DLCP_SEQ_SIZE == 4 && DLCP_N_PKTS_SIZE == 4 && DLCP_OFFSET_SIZE == 4,
                 "rx_absorb reads the header fields with these widths");
RX_STATIC_ASSERT(DLCP_TYPE_DATA < DLCP_TYPE_PROBE && DLCP_TYPE_RETX < DLCP_TYPE_PROBE
                     && DLCP_TYPE_PARAM < DLCP_TYPE_PROBE,
                 "types above PROBE are unknown (receiver.py)");

/* what rx_absorb did with a datagram */
#define RX_UP     0 /* not taken: the protocol core must see it */
#define RX_TAKEN  1 /* taken */
#define RX_DECIDE 2 /* taken, and its sender's FEEDBACK may be due: the core decides (rx_core.decide_src) */

#define RX_VALUE_BYTES 4 /* fp32 (dlcp/wire/layout.py value_bytes; checked by the mirror) */

/* One row of rx_take: what the mirror adds to one message (_Rx) or one sender (_Source). Times are
 * the driver's `now` (seconds); -1: none among these packets. */
#define RX_ROW_KIND     0  /* 0: message, 1: source */
#define RX_ROW_ID       1  /* message: its slot (the mirror's id); source: its rank */
#define RX_ROW_PKTS     2  /* packets counted (message: n_received; source: rcvd) */
#define RX_ROW_A        3  /* message: RETX packets (retx); source: CE-marked (ce) */
#define RX_ROW_B        4  /* message: original packets (n_orig); source: slot of its newest packet */
#define RX_ROW_C        5  /* message: payload bytes (bytes_rcvd); source: seq of its newest packet */
#define RX_ROW_ORIG_T   6  /* message: the newest original's time (orig_last_t); source: first arrival */
#define RX_ROW_LAST_T   7  /* message: the newest packet's time (last_t); source: newest arrival */
#define RX_ROW_LAST_LEN 8  /* message: values in its last packet (last_len), -1: not among these */
#define RX_ROW_FIRST_T  9  /* message: its first packet's time (first_t), -1: it had packets before */
#define RX_ROW_DUE      10 /* source: 1 when a FEEDBACK delay started here (then RX_ROW_DUE_T), else 0; message: 0 */
#define RX_ROW_DUE_T    11 /* source: when that delay ends (due) */
#define RX_ROW_LEN      12
/* A source row has the datagram bytes counted in RX_ROW_LAST_LEN and the first counted datagram's
 * bytes in RX_ROW_FIRST_T: the mirror's FEEDBACK wait counts the bytes that came after the first. */

/* socket waits: the bins of dlcp/transport/core/waits.py (4 per doubling from 1 us, 30 doublings) */
#define RX_WAIT_BINS_PER_OCTAVE 4
#define RX_WAIT_BINS            (30 * RX_WAIT_BINS_PER_OCTAVE)
#define RX_WAIT_FLOOR_S         1e-6
/* the wait area rx_take fills: [0] 1 when filled, [1] datagrams, [2] the longest wait (s),
 * [3] host-marked, then the bins */
#define RX_WAIT_AREA (4 + RX_WAIT_BINS)

typedef struct {
    uint64_t key, slot;
    uint32_t n_pkts;
    int used, dirty, seen; /* seen: the message has had a data packet */
    uint8_t *buf;
    uint64_t buf_len;
    uint8_t *received;
    int64_t *recv_us;
    uint64_t pkts, retx, orig, bytes; /* deltas since the last take */
    double first_t, orig_t, last_t;
    int64_t last_len;
} RxMsg;

typedef struct {
    int64_t budget; /* packets that may be counted here before the core must look; -1: any */
    int decide;     /* when the budget runs out on a packet taken here, stop with RX_DECIDE */
    int start;      /* start the FEEDBACK delay on the next packet counted here */
    double delay;   /* its length (s; the core's rule may give a negative one: due at once) */
    int started;    /* a delay started here that the core has not taken yet */
    double due;     /* its end */
    int dirty;
    uint64_t pkts, ce, last_slot;
    uint64_t bytes; /* datagram bytes counted */
    uint32_t last_seq;
    uint32_t first_len; /* the first counted datagram's bytes */
    double first_t;     /* arrival (now - queued) of the first packet counted */
    double last_t;      /* arrival of the newest packet counted */
} RxSrc;

typedef struct {
    int enabled;
    uint32_t job_id, vpp;
    double wall_offset, host_mark_s;
    RxMsg *msgs; /* open addressing, linear probing; cap a power of two */
    uint32_t cap, n, n_dirty;
    RxSrc src[256];
    uint8_t dirty_src[256];
    int n_dirty_src;
    int decide_src; /* the sender of the last RX_DECIDE */
    double new_due; /* the earliest end of a FEEDBACK delay started here since the last take; INFINITY: none */
    uint64_t absorbed, decisions;
    double *rows; /* where rx_take writes: row_cap rows of RX_ROW_LEN, then RX_WAIT_AREA */
    uint64_t row_cap;
    uint8_t *pending; /* a byte set to 1 while there is something to take (the mirror reads it) */
    uint64_t wait_bins[RX_WAIT_BINS], wait_n, host_marked;
    double wait_max;
} RxCore;

static inline uint64_t rx_key(uint32_t src, uint32_t iter, uint32_t phase, uint32_t msg) {
    return ((uint64_t)(src & 0xff) << 40) | ((uint64_t)(iter & 0xffff) << 24) | ((uint64_t)(phase & 0xff) << 16)
           | (uint64_t)(msg & 0xffff);
}

static inline uint64_t rx_hash(uint64_t k) {
    k ^= k >> 29;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 32;
    return k;
}

static inline uint32_t rx_be(const uint8_t *p, int size) {
    uint32_t v = 0;
    for (int i = 0; i < size; i++) v = (v << 8) | p[i];
    return v;
}

/* rows, pending: the mirror's buffers (see above); returns 0, or -1 when out of memory */
static inline int rx_init(RxCore *c, int enabled, uint32_t job_id, uint32_t vpp, double wall_offset, double host_mark_s,
                          double *rows, uint64_t row_cap, uint8_t *pending) {
    free(c->msgs);
    memset(c, 0, sizeof *c);
    c->enabled = enabled;
    c->job_id = job_id;
    c->vpp = vpp ? vpp : 1;
    c->wall_offset = wall_offset;
    c->host_mark_s = host_mark_s;
    c->rows = rows;
    c->row_cap = row_cap;
    c->pending = pending;
    c->decide_src = -1;
    c->new_due = INFINITY;
    c->cap = 64;
    c->msgs = (RxMsg *)calloc(c->cap, sizeof(RxMsg));
    return c->msgs ? 0 : -1;
}

static inline void rx_free(RxCore *c) {
    free(c->msgs);
    c->msgs = NULL;
    c->cap = c->n = 0;
}

static inline RxMsg *rx_find(RxCore *c, uint64_t key) {
    uint32_t mask = c->cap - 1;
    for (uint32_t i = (uint32_t)rx_hash(key) & mask;; i = (i + 1) & mask) {
        RxMsg *m = &c->msgs[i];
        if (!m->used) return NULL;
        if (m->key == key) return m;
    }
}

static inline RxMsg *rx_slot_for(RxMsg *msgs, uint32_t cap, uint64_t key) {
    uint32_t mask = cap - 1;
    uint32_t i = (uint32_t)rx_hash(key) & mask;
    while (msgs[i].used && msgs[i].key != key) i = (i + 1) & mask;
    return &msgs[i];
}

static inline int rx_grow(RxCore *c) {
    uint32_t cap = c->cap * 2;
    RxMsg *msgs = (RxMsg *)calloc(cap, sizeof(RxMsg));
    if (!msgs) return -1;
    for (uint32_t i = 0; i < c->cap; i++)
        if (c->msgs[i].used) *rx_slot_for(msgs, cap, c->msgs[i].key) = c->msgs[i];
    free(c->msgs);
    c->msgs = msgs;
    c->cap = cap;
    return 0;
}

/* The receiver holds message (src, iter, phase, msg) of n_pkts packets: buf its payload buffer
 * (buf_len bytes), received its bitmap (n_pkts bytes), recv_us its per-packet arrival times (int64)
 * or NULL, seen whether it has had a data packet. The buffers stay the receiver's and must outlive
 * the registration. Returns 0, or -1 when out of memory (the message then stays the core's). */
static inline int rx_open(RxCore *c, uint32_t src, uint32_t iter, uint32_t phase, uint32_t msg, uint32_t n_pkts,
                          uint64_t slot, uint8_t *buf, uint64_t buf_len, uint8_t *received, int64_t *recv_us,
                          int seen) {
    if (2 * (c->n + 1) > c->cap && rx_grow(c) < 0) return -1;
    uint64_t key = rx_key(src, iter, phase, msg);
    RxMsg *m = rx_slot_for(c->msgs, c->cap, key);
    if (m->used) {
        if (m->dirty) c->n_dirty--;
    } else {
        c->n++;
    }
    memset(m, 0, sizeof *m);
    m->used = 1;
    m->key = key;
    m->slot = slot;
    m->n_pkts = n_pkts;
    m->buf = buf;
    m->buf_len = buf_len;
    m->received = received;
    m->recv_us = recv_us;
    m->seen = seen;
    m->first_t = m->orig_t = m->last_t = -1;
    m->last_len = -1;
    return 0;
}

/* The receiver takes the message back (finished, PROBE waiting, BITMAP out, dropped): its packets
 * go up again. The mirror has taken its deltas first: what is still pending here is dropped. */
static inline void rx_close(RxCore *c, uint32_t src, uint32_t iter, uint32_t phase, uint32_t msg) {
    uint64_t key = rx_key(src, iter, phase, msg);
    uint32_t mask = c->cap - 1;
    uint32_t i = (uint32_t)rx_hash(key) & mask;
    while (c->msgs[i].used && c->msgs[i].key != key) i = (i + 1) & mask;
    if (!c->msgs[i].used) return;
    if (c->msgs[i].dirty) c->n_dirty--;
    c->msgs[i].used = 0;
    c->n--;
    /* backward-shift deletion: entries after the hole that hash at or before it move into it */
    for (uint32_t j = (i + 1) & mask; c->msgs[j].used; j = (j + 1) & mask) {
        uint32_t home = (uint32_t)rx_hash(c->msgs[j].key) & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            c->msgs[i] = c->msgs[j];
            c->msgs[j].used = 0;
            i = j;
        }
    }
}

/* packets of sender `src` that may be counted here before the core must look (-1: any, 0: none);
 * decide: stop with RX_DECIDE on the packet that uses up the budget, instead of passing the next
 * one up whole */
static inline void rx_budget(RxCore *c, uint32_t src, int64_t packets, int decide) {
    c->src[src & 0xff].budget = packets;
    c->src[src & 0xff].decide = decide;
}

/* start: start the FEEDBACK delay of `delay` s on the next packet of `src` counted here, as the
 * core's rule does (ReceiverCore._feedback_rule: due = now + delay), unless that packet makes a
 * FEEDBACK due (its budget's RX_DECIDE). Ignored while a delay started here is not taken yet: the
 * caller has not seen it. */
static inline void rx_delay(RxCore *c, uint32_t src, int start, double delay) {
    RxSrc *s = &c->src[src & 0xff];
    if (s->started) return;
    s->start = start;
    s->delay = delay;
}

/* a datagram's wait in the socket buffer into waits.py's bins (WaitHistogram.record) */
static inline void rx_record_wait(RxCore *c, double s) {
    c->wait_n++;
    if (s > c->wait_max) c->wait_max = s;
    if (s <= RX_WAIT_FLOOR_S) {
        c->wait_bins[0]++;
        return;
    }
    int b = (int)(log2(s / RX_WAIT_FLOOR_S) * RX_WAIT_BINS_PER_OCTAVE);
    c->wait_bins[b < RX_WAIT_BINS - 1 ? b : RX_WAIT_BINS - 1]++;
}

/* One datagram `d` (n bytes) with the ECN bits of its IPv4 header, at `now` (the driver's clock,
 * seconds), after waiting `queued` seconds in this host (0: unknown). RX_UP, RX_TAKEN or RX_DECIDE. */
static inline int rx_absorb(RxCore *c, const uint8_t *d, size_t n, int ecn, double now, double queued) {
    if (!c->enabled || !c->n || n < (size_t)DLCP_HEADER_LEN) return RX_UP;
    if (((d[DLCP_VER_OFF] >> DLCP_VER_SHIFT) & DLCP_VER_MASK) != DLCP_VERSION) return RX_UP;
    uint32_t typ = (d[DLCP_TYPE_OFF] >> DLCP_TYPE_SHIFT) & DLCP_TYPE_MASK;
    if (typ >= DLCP_TYPE_PROBE) return RX_UP; /* PROBEs and unknown types: the core */
    if (((d[DLCP_JOB_ID_OFF] >> DLCP_JOB_ID_SHIFT) & DLCP_JOB_ID_MASK) != c->job_id) return RX_UP;
    uint32_t src = (d[DLCP_SRC_RANK_OFF] >> DLCP_SRC_RANK_SHIFT) & DLCP_SRC_RANK_MASK;
    uint32_t phase = (d[DLCP_PHASE_OFF] >> DLCP_PHASE_SHIFT) & DLCP_PHASE_MASK;
    uint32_t iter = (rx_be(d + DLCP_ITER_OFF, 2) >> DLCP_ITER_SHIFT) & DLCP_ITER_MASK;
    uint32_t msg = (rx_be(d + DLCP_MSG_ID_OFF, 2) >> DLCP_MSG_ID_SHIFT) & DLCP_MSG_ID_MASK;
    RxMsg *m = rx_find(c, rx_key(src, iter, phase, msg));
    if (!m) return RX_UP;
    uint64_t seq = (rx_be(d + DLCP_SEQ_OFF, 4) >> DLCP_SEQ_SHIFT) & DLCP_SEQ_MASK;
    uint64_t npk = (rx_be(d + DLCP_N_PKTS_OFF, 4) >> DLCP_N_PKTS_SHIFT) & DLCP_N_PKTS_MASK;
    uint64_t off = (rx_be(d + DLCP_OFFSET_OFF, 4) >> DLCP_OFFSET_SHIFT) & DLCP_OFFSET_MASK;
    if (npk != m->n_pkts || seq >= npk || off != seq * c->vpp) return RX_UP;
    uint32_t flags = (d[DLCP_FLAGS_OFF] >> DLCP_FLAGS_SHIFT) & DLCP_FLAGS_MASK;
    size_t hl = DLCP_HEADER_LEN + ((flags & DLCP_FLAG_TELEMETRY) ? DLCP_TELEMETRY_LEN : 0);
    if (n < hl) return RX_UP;
    size_t plen = n - hl;
    size_t full = (size_t)c->vpp * RX_VALUE_BYTES;
    if (plen != full && !(seq == npk - 1 && plen > 0 && plen < full && plen % RX_VALUE_BYTES == 0)) return RX_UP;
    if (off * RX_VALUE_BYTES + plen > m->buf_len || m->received[seq]) return RX_UP; /* duplicates: the core */
    RxSrc *s = &c->src[src];
    if (s->budget == 0) return RX_UP; /* its FEEDBACK may be due: the core counts this one */
    /* what on_datagram does with this packet, in its order */
    if (queued > 0) rx_record_wait(c, queued);
    if (queued > c->host_mark_s && ecn != ECN_CE) {
        ecn = ECN_CE;
        c->host_marked++;
    }
    int decide = 0;
    if (s->budget > 0 && --s->budget == 0) decide = s->decide;
    if (!s->pkts) {
        s->first_t = now - queued;
        s->first_len = (uint32_t)n;
    }
    s->pkts++;
    s->bytes += n;
    s->ce += ecn == ECN_CE;
    s->last_slot = m->slot;
    s->last_seq = (uint32_t)seq;
    s->last_t = now - queued;
    if (!s->dirty) {
        s->dirty = 1;
        c->dirty_src[c->n_dirty_src++] = (uint8_t)src;
    }
    memcpy(m->buf + off * RX_VALUE_BYTES, d + hl, plen);
    m->received[seq] = 1;
    m->pkts++;
    m->bytes += plen;
    if (typ == DLCP_TYPE_RETX) {
        m->retx++;
    } else {
        m->orig++;
        m->orig_t = now;
    }
    if (!m->seen) {
        m->seen = 1;
        m->first_t = now;
    }
    m->last_t = now;
    if (m->recv_us) m->recv_us[seq] = (int64_t)((now + c->wall_offset) * 1e6); /* receiver.py _wall_us */
    if (seq == npk - 1) m->last_len = (int64_t)(plen / RX_VALUE_BYTES);
    if (!m->dirty) {
        m->dirty = 1;
        c->n_dirty++;
    }
    if (!decide && s->start) {
        s->start = 0;
        s->started = 1;
        s->due = now + s->delay;
        if (s->due < c->new_due) c->new_due = s->due;
    }
    c->absorbed++;
    *c->pending = 1;
    if (decide) {
        c->decide_src = (int)src;
        c->decisions++;
        return RX_DECIDE;
    }
    return RX_TAKEN;
}

static inline int rx_has_pending(const RxCore *c) { return c->n_dirty || c->n_dirty_src || c->wait_n; }

/* Writes up to row_cap rows of what was counted here since the last call (messages, then sources)
 * and, when socket waits were recorded, the wait area; forgets them. Returns the number of rows
 * (call again while it is row_cap). */
static inline uint64_t rx_take(RxCore *c) {
    double *out = c->rows;
    uint64_t rows = 0;
    for (uint32_t i = 0; c->n_dirty && rows < c->row_cap && i < c->cap; i++) {
        RxMsg *m = &c->msgs[i];
        if (!m->used || !m->dirty) continue;
        double *r = out + rows * RX_ROW_LEN;
        r[RX_ROW_KIND] = 0;
        r[RX_ROW_ID] = (double)m->slot;
        r[RX_ROW_PKTS] = (double)m->pkts;
        r[RX_ROW_A] = (double)m->retx;
        r[RX_ROW_B] = (double)m->orig;
        r[RX_ROW_C] = (double)m->bytes;
        r[RX_ROW_ORIG_T] = m->orig_t;
        r[RX_ROW_LAST_T] = m->last_t;
        r[RX_ROW_LAST_LEN] = (double)m->last_len;
        r[RX_ROW_FIRST_T] = m->first_t;
        r[RX_ROW_DUE] = 0;
        r[RX_ROW_DUE_T] = 0;
        m->pkts = m->retx = m->orig = m->bytes = 0;
        m->first_t = m->orig_t = m->last_t = -1;
        m->last_len = -1;
        m->dirty = 0;
        c->n_dirty--;
        rows++;
    }
    while (rows < c->row_cap && c->n_dirty_src) {
        int src = c->dirty_src[--c->n_dirty_src];
        RxSrc *s = &c->src[src];
        double *r = out + rows * RX_ROW_LEN;
        r[RX_ROW_KIND] = 1;
        r[RX_ROW_ID] = src;
        r[RX_ROW_PKTS] = (double)s->pkts;
        r[RX_ROW_A] = (double)s->ce;
        r[RX_ROW_B] = (double)s->last_slot;
        r[RX_ROW_C] = (double)s->last_seq;
        r[RX_ROW_ORIG_T] = s->first_t;
        r[RX_ROW_LAST_T] = s->last_t;
        r[RX_ROW_LAST_LEN] = (double)s->bytes;
        r[RX_ROW_FIRST_T] = (double)s->first_len;
        r[RX_ROW_DUE] = s->started;
        r[RX_ROW_DUE_T] = s->started ? s->due : 0;
        s->started = 0;
        s->pkts = s->ce = s->bytes = 0;
        s->dirty = 0;
        rows++;
    }
    double *w = out + c->row_cap * RX_ROW_LEN;
    w[0] = 0;
    if (c->wait_n) {
        w[0] = 1;
        w[1] = (double)c->wait_n;
        w[2] = c->wait_max;
        w[3] = (double)c->host_marked;
        for (int b = 0; b < RX_WAIT_BINS; b++) w[4 + b] = (double)c->wait_bins[b];
        memset(c->wait_bins, 0, sizeof c->wait_bins);
        c->wait_n = c->host_marked = 0;
        c->wait_max = 0;
    }
    c->new_due = INFINITY; /* the caller now knows every delay started here */
    *c->pending = rx_has_pending(c) ? 1 : 0;
    return rows;
}

#endif /* DLCP_RX_CORE_H */
