// The receive path of a simulated host's data packets that Python need not see one by one: the
// receive core the UDP driver's extension runs too (dlcp/transport/c/rx_core.h, compiled here as
// C++), behind the method names the shared mirror calls (dlcp/transport/rx_mirror.py, RxMirror:
// Setup, Open, Close, Budget, Take). What it takes and what it hands back is rx_core.h's: a
// datagram it does not take goes up to Python whole (DATA), and on a packet after which its
// sender's FEEDBACK may be due it stops and the host asks the core to decide (DECIDE).
#pragma once

#include "rx_core.h"

#include <cstdint>

namespace ns3 {

class DlcpRxPath {
  public:
    static const int ROW_LEN = RX_ROW_LEN;

    DlcpRxPath() { memset(&m_core, 0, sizeof m_core); }
    ~DlcpRxPath() { rx_free(&m_core); }
    DlcpRxPath(const DlcpRxPath &) = delete;
    DlcpRxPath &operator=(const DlcpRxPath &) = delete;

    // rows: where Take writes (cap rows of ROW_LEN doubles, then RX_WAIT_AREA); pending: a byte set
    // to 1 whenever there is something to take (rx_core.h rx_init)
    bool Setup(bool enabled, uint32_t jobId, uint32_t valuesPerPkt, double wallOffsetS, double hostMarkS, uint64_t rows,
               uint64_t cap, uint64_t pending) {
        return rx_init(&m_core, enabled, jobId, valuesPerPkt, wallOffsetS, hostMarkS, reinterpret_cast<double *>(rows),
                       cap, reinterpret_cast<uint8_t *>(pending))
               == 0;
    }

    bool Open(uint32_t src, uint32_t iter, uint32_t phase, uint32_t msg, uint32_t nPkts, uint64_t slot, uint64_t buf,
              uint64_t bufLen, uint64_t received, uint64_t recvUs, bool seen) {
        return rx_open(&m_core, src, iter, phase, msg, nPkts, slot, reinterpret_cast<uint8_t *>(buf), bufLen,
                       reinterpret_cast<uint8_t *>(received), reinterpret_cast<int64_t *>(recvUs), seen)
               == 0;
    }

    void Close(uint32_t src, uint32_t iter, uint32_t phase, uint32_t msg) { rx_close(&m_core, src, iter, phase, msg); }
    void Budget(uint32_t src, int64_t packets, bool decide) { rx_budget(&m_core, src, packets, decide); }
    uint64_t Take() { return rx_take(&m_core); }

    // one datagram at `now` (simulated seconds; it waited in no socket buffer): RX_UP, RX_TAKEN or RX_DECIDE
    int Absorb(const uint8_t *d, size_t n, int ecn, double now) { return rx_absorb(&m_core, d, n, ecn, now, 0.0); }
    int DecideSrc() const { return m_core.decide_src; }
    uint64_t Absorbed() const { return m_core.absorbed; }
    uint64_t Opened() const { return m_core.n; }

  private:
    RxCore m_core;
};

}  // namespace ns3
