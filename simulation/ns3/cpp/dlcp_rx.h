// The receive path of a simulated host's data packets that Python need not see one by one.
//
// The transport core's receiver (dlcp/transport/core/receiver.py, ReceiverCore.on_datagram) does,
// for most data packets of a message, only this: check the header, count the packet for its
// sender's FEEDBACK (packets, CE marks, the newest packet), copy the payload into the message's
// buffer, mark the chunk received, and update the message's counters and arrival times. Nothing it
// outputs or a timer it arms changes. DlcpRxPath does exactly that in C++ for the messages Python
// has opened here (RxOpen: a message Python has already taken a data packet of, with no PROBE
// waiting and no BITMAP out), while that sender's FEEDBACK is not due (RxBudget: how many more of
// its packets may be counted before Python must look). It writes into the Python receiver's own
// buffers (payload, received bitmap, per-packet arrival times), so those are always current, and
// keeps the counters and times as deltas that Python takes (RxTake) before the receiver does
// anything else. Everything else, and any packet the checks below do not accept as exactly such a
// packet (a message's first packet, PROBE, duplicate, unknown message, wrong n_pkts / offset /
// length / job / version, a packet whose FEEDBACK may be due), goes up to Python as before, which
// counts and drops what is malformed.
//
// Offsets and codes: dlcp_wire.h, generated from dlcp/wire/layout.py.
#pragma once

#include "dlcp_wire.h"

#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

namespace ns3
{

static_assert(DLCP_VER_SIZE == 1 && DLCP_TYPE_SIZE == 1 && DLCP_PHASE_SIZE == 1 && DLCP_JOB_ID_SIZE == 1 &&
                  DLCP_SRC_RANK_SIZE == 1 && DLCP_FLAGS_SIZE == 1 && DLCP_ITER_SIZE == 2 &&
                  DLCP_MSG_ID_SIZE == 2 && DLCP_SEQ_SIZE == 4 && DLCP_N_PKTS_SIZE == 4 && DLCP_OFFSET_SIZE == 4,
              "DlcpRxPath reads the header fields with these widths");
static_assert(DLCP_TYPE_DATA < DLCP_TYPE_PROBE && DLCP_TYPE_RETX < DLCP_TYPE_PROBE &&
                  DLCP_TYPE_PARAM < DLCP_TYPE_PROBE,
              "types above PROBE are unknown (receiver.py)");

class DlcpRxPath
{
  public:
    // one row of RxTake: what Python adds to one message (_Rx) or one sender (_Source)
    enum Row
    {
        ROW_KIND = 0,   // 0: message, 1: source
        ROW_ID,         // message: Python's slot; source: its rank
        ROW_PKTS,       // packets counted (message: n_received; source: rcvd)
        ROW_A,          // message: RETX packets (retx); source: CE-marked (ce)
        ROW_B,          // message: original packets (n_orig); source: slot of its newest packet
        ROW_C,          // message: payload bytes (bytes_rcvd); source: seq of its newest packet
        ROW_ORIG_T,     // message: time of the newest original (orig_last_t), -1: none; source: of its newest packet (last_t)
        ROW_LAST_T,     // message: time of the newest packet (last_t)
        ROW_LAST_LEN,   // message: values in the last packet (last_len), -1: not among these
        ROW_LEN
    };

    static uint64_t Key(uint32_t src, uint32_t iter, uint32_t phase, uint32_t msg)
    {
        return (uint64_t(src & 0xff) << 40) | (uint64_t(iter & 0xffff) << 24) | (uint64_t(phase & 0xff) << 16) |
               uint64_t(msg & 0xffff);
    }

    // rows: where Take writes (cap rows of ROW_LEN doubles); dirty: a byte set to 1 whenever there
    // is something to take, so that Python calls Take only then (a call costs microseconds)
    void Setup(bool enabled, uint32_t jobId, uint32_t valuesPerPkt, double wallOffsetS, uint64_t rows, uint64_t cap,
               uint64_t dirty)
    {
        m_enabled = enabled;
        m_jobId = jobId;
        m_vpp = valuesPerPkt;
        m_wallOffset = wallOffsetS;
        m_rows = reinterpret_cast<double*>(rows);
        m_cap = cap;
        m_dirty = reinterpret_cast<uint8_t*>(dirty);
    }

    // Python's receiver holds message (src, iter, phase, msg) of nPkts packets; buf: its payload
    // buffer (bufLen bytes), received: its bitmap (nPkts bytes), recvUs: its per-packet arrival
    // times (int64, nPkts) or 0. The buffers stay Python's and must outlive the registration.
    void Open(uint32_t src, uint32_t iter, uint32_t phase, uint32_t msg, uint32_t nPkts, uint64_t slot,
              uint64_t buf, uint64_t bufLen, uint64_t received, uint64_t recvUs)
    {
        Msg& m = m_msgs[Key(src, iter, phase, msg)];
        m = Msg();
        m.slot = slot;
        m.nPkts = nPkts;
        m.buf = reinterpret_cast<uint8_t*>(buf);
        m.bufLen = bufLen;
        m.received = reinterpret_cast<uint8_t*>(received);
        m.recvUs = reinterpret_cast<int64_t*>(recvUs);
    }

    // Python takes the message back (finished, PROBE waiting, BITMAP out): its packets go up again.
    // Python has taken its deltas (RxTake) first: what is still pending here is dropped.
    void Close(uint32_t src, uint32_t iter, uint32_t phase, uint32_t msg) { m_msgs.erase(Key(src, iter, phase, msg)); }

    // packets of sender `src` that may be counted here before its FEEDBACK may be due; -1: any
    void Budget(uint32_t src, int64_t packets) { m_src[src & 0xff].budget = packets; }

    uint64_t Opened() const { return m_msgs.size(); }

    uint64_t Absorbed() const { return m_absorbed; }

    // One datagram with the ECN bits of its IPv4 header at `now` (simulated seconds): true when it
    // was handled here, false when it must go up to Python.
    bool Absorb(const uint8_t* d, size_t n, int ecn, double now)
    {
        if (!m_enabled || m_msgs.empty() || n < size_t(DLCP_HEADER_LEN))
        {
            return false;
        }
        if (((d[DLCP_VER_OFF] >> DLCP_VER_SHIFT) & DLCP_VER_MASK) != DLCP_VERSION)
        {
            return false;
        }
        uint32_t typ = (d[DLCP_TYPE_OFF] >> DLCP_TYPE_SHIFT) & DLCP_TYPE_MASK;
        if (typ >= DLCP_TYPE_PROBE)  // PROBEs and unknown types: Python
        {
            return false;
        }
        if (((d[DLCP_JOB_ID_OFF] >> DLCP_JOB_ID_SHIFT) & DLCP_JOB_ID_MASK) != m_jobId)
        {
            return false;
        }
        uint32_t src = (d[DLCP_SRC_RANK_OFF] >> DLCP_SRC_RANK_SHIFT) & DLCP_SRC_RANK_MASK;
        uint32_t phase = (d[DLCP_PHASE_OFF] >> DLCP_PHASE_SHIFT) & DLCP_PHASE_MASK;
        uint32_t iter = (Be(d + DLCP_ITER_OFF, 2) >> DLCP_ITER_SHIFT) & DLCP_ITER_MASK;
        uint32_t msg = (Be(d + DLCP_MSG_ID_OFF, 2) >> DLCP_MSG_ID_SHIFT) & DLCP_MSG_ID_MASK;
        auto it = m_msgs.find(Key(src, iter, phase, msg));
        if (it == m_msgs.end())
        {
            return false;
        }
        Msg& m = it->second;
        uint64_t seq = (Be(d + DLCP_SEQ_OFF, 4) >> DLCP_SEQ_SHIFT) & DLCP_SEQ_MASK;
        uint64_t npk = (Be(d + DLCP_N_PKTS_OFF, 4) >> DLCP_N_PKTS_SHIFT) & DLCP_N_PKTS_MASK;
        uint64_t off = (Be(d + DLCP_OFFSET_OFF, 4) >> DLCP_OFFSET_SHIFT) & DLCP_OFFSET_MASK;
        if (npk != m.nPkts || seq >= npk || off != seq * m_vpp)
        {
            return false;
        }
        uint32_t flags = (d[DLCP_FLAGS_OFF] >> DLCP_FLAGS_SHIFT) & DLCP_FLAGS_MASK;
        size_t hl = DLCP_HEADER_LEN + ((flags & DLCP_FLAG_TELEMETRY) ? DLCP_TELEMETRY_LEN : 0);
        if (n < hl)
        {
            return false;
        }
        size_t plen = n - hl;
        size_t full = size_t(m_vpp) * VALUE_BYTES;
        if (plen != full && !(seq == npk - 1 && plen > 0 && plen < full && plen % VALUE_BYTES == 0))
        {
            return false;
        }
        if (off * VALUE_BYTES + plen > m.bufLen || m.received[seq])  // duplicates: Python counts them
        {
            return false;
        }
        Src& s = m_src[src];
        if (s.budget == 0)  // its FEEDBACK may be due (or its delay start): Python
        {
            return false;
        }
        // what ReceiverCore._count and on_datagram do with this packet, in their order
        if (s.budget > 0)
        {
            s.budget -= 1;
        }
        s.pkts += 1;
        s.ce += ecn == ECN_CE ? 1 : 0;
        s.lastSlot = m.slot;
        s.lastSeq = seq;
        s.lastT = now;
        if (!s.dirty)
        {
            s.dirty = true;
            m_dirtySrc.push_back(src);
        }
        std::memcpy(m.buf + off * VALUE_BYTES, d + hl, plen);
        m.received[seq] = 1;
        m.pkts += 1;
        m.bytes += plen;
        if (typ == DLCP_TYPE_RETX)
        {
            m.retx += 1;
        }
        else
        {
            m.orig += 1;
            m.origT = now;
        }
        m.lastT = now;
        if (m.recvUs)
        {
            m.recvUs[seq] = int64_t((now + m_wallOffset) * 1e6);  // receiver.py _wall_us
        }
        if (seq == npk - 1)
        {
            m.lastLen = int64_t(plen / VALUE_BYTES);
        }
        if (!m.dirty)
        {
            m.dirty = true;
            m_dirtyMsg.push_back(it->first);
        }
        m_absorbed += 1;
        *m_dirty = 1;
        return true;
    }

    // Writes up to `cap` rows (Setup) of what was counted here since the last call, messages then
    // sources, and forgets them; returns the number of rows (call again while it is cap).
    uint64_t Take()
    {
        double* out = m_rows;
        uint64_t cap = m_cap;
        uint64_t rows = 0;
        while (rows < cap && !m_dirtyMsg.empty())
        {
            auto it = m_msgs.find(m_dirtyMsg.back());
            m_dirtyMsg.pop_back();
            if (it == m_msgs.end())
            {
                continue;
            }
            Msg& m = it->second;
            double* r = out + rows * ROW_LEN;
            r[ROW_KIND] = 0;
            r[ROW_ID] = double(m.slot);
            r[ROW_PKTS] = double(m.pkts);
            r[ROW_A] = double(m.retx);
            r[ROW_B] = double(m.orig);
            r[ROW_C] = double(m.bytes);
            r[ROW_ORIG_T] = m.origT;
            r[ROW_LAST_T] = m.lastT;
            r[ROW_LAST_LEN] = double(m.lastLen);
            m.pkts = m.retx = m.orig = m.bytes = 0;
            m.origT = m.lastT = -1;
            m.lastLen = -1;
            m.dirty = false;
            rows += 1;
        }
        while (rows < cap && !m_dirtySrc.empty())
        {
            Src& s = m_src[m_dirtySrc.back()];
            double* r = out + rows * ROW_LEN;
            r[ROW_KIND] = 1;
            r[ROW_ID] = double(m_dirtySrc.back());
            r[ROW_PKTS] = double(s.pkts);
            r[ROW_A] = double(s.ce);
            r[ROW_B] = double(s.lastSlot);
            r[ROW_C] = double(s.lastSeq);
            r[ROW_ORIG_T] = s.lastT;
            r[ROW_LAST_T] = r[ROW_LAST_LEN] = 0;
            m_dirtySrc.pop_back();
            s.pkts = s.ce = 0;
            s.dirty = false;
            rows += 1;
        }
        *m_dirty = Pending() ? 1 : 0;
        return rows;
    }

    bool Pending() const { return !m_dirtyMsg.empty() || !m_dirtySrc.empty(); }

  private:
    static constexpr size_t VALUE_BYTES = 4;  // fp32 (dlcp/wire/layout.py value_bytes; checked in hosts.py)

    struct Msg
    {
        uint64_t slot = 0;
        uint64_t nPkts = 0;
        uint8_t* buf = nullptr;
        uint64_t bufLen = 0;
        uint8_t* received = nullptr;
        int64_t* recvUs = nullptr;
        uint64_t pkts = 0, retx = 0, orig = 0, bytes = 0;
        double origT = -1, lastT = -1;
        int64_t lastLen = -1;
        bool dirty = false;
    };

    struct Src
    {
        int64_t budget = 0;
        uint64_t pkts = 0, ce = 0, lastSlot = 0, lastSeq = 0;
        double lastT = 0;
        bool dirty = false;
    };

    static uint32_t Be(const uint8_t* p, int size)
    {
        uint32_t v = 0;
        for (int i = 0; i < size; i++)
        {
            v = (v << 8) | p[i];
        }
        return v;
    }

    bool m_enabled = false;
    uint32_t m_jobId = 0, m_vpp = 1;
    double m_wallOffset = 0;
    double* m_rows = nullptr;
    uint64_t m_cap = 0;
    uint8_t* m_dirty = nullptr;
    std::unordered_map<uint64_t, Msg> m_msgs;
    Src m_src[256];
    std::vector<uint64_t> m_dirtyMsg;
    std::vector<uint32_t> m_dirtySrc;
    uint64_t m_absorbed = 0;
};

} // namespace ns3
