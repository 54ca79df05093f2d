// The DLCP switch on ns-3: docs/pipeline.md's pipeline on packet bytes, one object per switch node.
//
// Ingress (DlcpSwitch::Ingress) is dlcp/switch/pipeline.py's `ingress` statement by
// statement: parse, drop reasons, ipv4_lpm, member choice (spray random / round-robin for DLCP
// packets, bmv2's CRC-16 5-tuple hash otherwise), nhop, classify, admission against the occupancy
// register (tail drop at qmax, early drop by drop precedence at k1/k2/k3), ECN CE marking at K,
// TTL - 1 with the IPv4 checksum patched (RFC 1624). The tables arrive flattened from Python
// (`Pipeline.compiled_tables()` of the built-in dataplane, so both read a runtime file the same way).
// Egress: each port's DlcpQueueDisc (8 strict-priority FIFOs of queue_depth_pkts each) drains at the
// port rate counted on Ethernet frame bytes (IP + 14, as the built-in dataplane counts), one packet
// at a time: a packet leaves the queue when its transmission slot starts, so exactly one packet of a
// busy port is past the queue. Then telemetry is stamped, random link loss and the propagation delay
// of the runtime's `ports` row are applied, and the packet goes to the point-to-point device (whose
// channel has no delay of its own) or, for the conformance harness, to a capture list.
//
// ns-3's point-to-point links carry no Ethernet header: the switch sees IPv4 packets, counts them as
// Ethernet frames (+14 bytes), and keeps the MAC rewrite of `set_nhop` only for captured output.
#pragma once

#include "dlcp_wire.h"
#include "ns3/boolean.h"
#include "ns3/data-rate.h"
#include "ns3/drop-tail-queue.h"
#include "ns3/header.h"
#include "ns3/net-device.h"
#include "ns3/node.h"
#include "ns3/object.h"
#include "ns3/packet.h"
#include "ns3/queue-disc.h"
#include "ns3/queue-item.h"
#include "ns3/random-variable-stream.h"
#include "ns3/simulator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace ns3
{

namespace dlcp
{
// Sizes, offsets and codes come from dlcp_wire.h, generated from dlcp/wire/layout.py and
// dlcp/network/pipeline_names.py (`make gen`): MAX_PORTS, N_QUEUES, N_COLORS, MAX_GROUPS, ETH_LEN,
// L4_OFF, DLCP_OFF, DLCP_*_OFF/SHIFT/MASK, CLASSIFY_*_SHIFT, LB_*, DROP_*, QUEUE_THRESHOLDS_DEFAULT_*.
constexpr int TEL_OFF = DLCP_OFF + DLCP_HEADER_LEN;
constexpr int UDP_CSUM = L4_OFF + 6;
constexpr int VIEW = TEL_OFF + DLCP_TELEMETRY_LEN;  // frame bytes the pipeline reads or writes
enum Drop
{
    PARSER_ERROR = DROP_PARSER_ERROR,
    NOT_IPV4 = DROP_NOT_IPV4,
    NO_ROUTE = DROP_NO_ROUTE,
    TTL_EXPIRED = DROP_TTL_EXPIRED
};
// what this code assumes of the generated layout (as emulation/builtin_switch/_fastpath.c does)
static_assert(DLCP_VER_SIZE == 1 && DLCP_PRIO_SIZE == 1 && DLCP_DROP_PREC_SIZE == 1 && DLCP_FLAGS_SIZE == 1,
              "the parser reads ver, prio, drop_prec and flags as single bytes");
static_assert(DLCP_TEL_HOPS_SIZE == 1 && DLCP_TEL_MAX_ENQ_QDEPTH_SIZE == 2 &&
                  DLCP_TEL_SUM_DEQ_TIMEDELTA_US_SIZE == 4 && DLCP_TELEMETRY_LEN % 2 == 0,
              "StampTelemetry's field widths");
static_assert(REGISTER_RR_NEXT_BITS == 16, "rr_next is uint16_t");
static_assert(CLASSIFY_KEY_BITS == 12, "m_class holds 4096 classes");
constexpr int FINE = 256;  // queueing-time histogram: 1 us buckets below, then 32 per power of two

inline uint32_t Fold(uint32_t x)
{
    while (x >> 16)
    {
        x = (x & 0xFFFF) + (x >> 16);
    }
    return x;
}

// bmv2's HashAlgorithm.crc16 (CRC-16/ARC), reflected table; dlcp/switch/hashing.py
inline uint16_t Crc16(const uint8_t* data, int n)
{
    static uint16_t table[256];
    static bool ready = false;
    if (!ready)
    {
        for (int b = 0; b < 256; ++b)
        {
            uint16_t c = b;
            for (int i = 0; i < 8; ++i)
            {
                c = (c & 1) ? (c >> 1) ^ 0xA001 : c >> 1;
            }
            table[b] = c;
        }
        ready = true;
    }
    uint16_t crc = 0;
    for (int i = 0; i < n; ++i)
    {
        crc = (crc >> 8) ^ table[(crc ^ data[i]) & 0xFF];
    }
    return crc;
}
} // namespace dlcp

// Header bytes the pipeline rewrote, put back in front of the packet.
class DlcpRawHeader : public Header
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("ns3::DlcpRawHeader")
                                .SetParent<Header>()
                                .SetGroupName("Dlcp")
                                .AddConstructor<DlcpRawHeader>();
        return tid;
    }

    TypeId GetInstanceTypeId() const override { return GetTypeId(); }

    void Set(const uint8_t* b, uint32_t n)
    {
        m_n = n;
        std::memcpy(m_b, b, n);
    }

    uint32_t GetSerializedSize() const override { return m_n; }

    void Serialize(Buffer::Iterator it) const override { it.Write(m_b, m_n); }

    uint32_t Deserialize(Buffer::Iterator it) override
    {
        it.Read(m_b, m_n);
        return m_n;
    }

    void Print(std::ostream& os) const override { os << "dlcp-raw(" << m_n << ")"; }

  private:
    uint8_t m_b[dlcp::VIEW];
    uint32_t m_n = 0;
};

// A packet waiting in a switch queue, with what egress needs to know about it.
class DlcpItem : public QueueDiscItem
{
  public:
    DlcpItem(Ptr<Packet> p, uint8_t qid, int tel, uint32_t enqDepth, const uint8_t* dmac,
             const uint8_t* smac)
        : QueueDiscItem(p, Address(), 0x0800),
          qid(qid),
          tel(tel),
          enqDepth(enqDepth)
    {
        std::memcpy(macs, dmac, 6);
        std::memcpy(macs + 6, smac, 6);
    }

    void AddHeader() override {}

    bool Mark() override { return false; }

    uint8_t qid;
    int tel;            // telemetry block offset in the frame, -1 without one
    uint32_t enqDepth;  // packets ahead of it in its own queue when it was enqueued
    uint8_t macs[12];   // dst, src after set_nhop (captured output only)
};

// One egress port's queues: 8 strict-priority FIFOs (7 served first), `Depth` packets each.
// Admission is the pipeline's (the occupancy register); a full FIFO here is the physical queue
// refusing a packet admission let through (`queue_overflow_pkts`, as in the built-in dataplane).
class DlcpQueueDisc : public QueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("ns3::DlcpQueueDisc")
                .SetParent<QueueDisc>()
                .SetGroupName("Dlcp")
                .AddConstructor<DlcpQueueDisc>()
                .AddAttribute("Depth", "packets per priority queue (queue_depth_pkts)",
                              UintegerValue(128), MakeUintegerAccessor(&DlcpQueueDisc::m_depth),
                              MakeUintegerChecker<uint32_t>(1));
        return tid;
    }

    DlcpQueueDisc()
        : QueueDisc(QueueDiscSizePolicy::NO_LIMITS)
    {
    }

    uint32_t Length(int qid) const { return GetInternalQueue(qid)->GetNPackets(); }

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        auto it = StaticCast<DlcpItem>(item);
        Ptr<InternalQueue> q = GetInternalQueue(it->qid);
        if (q->GetNPackets() >= m_depth)
        {
            DropBeforeEnqueue(item, "queue full");
            return false;
        }
        return q->Enqueue(item);
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        for (int q = N_QUEUES - 1; q >= 0; --q)
        {
            if (GetInternalQueue(q)->GetNPackets())
            {
                return GetInternalQueue(q)->Dequeue();
            }
        }
        return nullptr;
    }

    Ptr<const QueueDiscItem> DoPeek() override
    {
        for (int q = N_QUEUES - 1; q >= 0; --q)
        {
            if (GetInternalQueue(q)->GetNPackets())
            {
                return GetInternalQueue(q)->Peek();
            }
        }
        return nullptr;
    }

    bool CheckConfig() override
    {
        if (GetNInternalQueues() == 0)
        {
            for (int q = 0; q < N_QUEUES; ++q)
            {
                AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                    "MaxSize",
                    QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, m_depth + 1))));
            }
        }
        return GetNInternalQueues() == N_QUEUES;
    }

    void InitializeParams() override {}

    uint32_t m_depth = 128;
};

class DlcpSwitch : public Object
{
  public:
    struct Captured
    {
        double t;
        int port;
        std::string frame;
    };

    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("ns3::DlcpSwitch").SetParent<Object>().SetGroupName("Dlcp");
        return tid;
    }

    DlcpSwitch()
    {
        m_rng = CreateObject<UniformRandomVariable>();
        m_lossRng = CreateObject<UniformRandomVariable>();
        m_occ.fill(0);
        m_rr.fill(0);
        m_ecnK.fill(0xFFFFFFFFu);
        for (auto& c : m_class)
        {
            c = {-1, 0, 0};
        }
        for (auto& t : m_thr)
        {
            t = {QUEUE_THRESHOLDS_DEFAULT_QMAX, QUEUE_THRESHOLDS_DEFAULT_K1, QUEUE_THRESHOLDS_DEFAULT_K2,
                 QUEUE_THRESHOLDS_DEFAULT_K3};
        }
        for (auto* c : {&m_admitted, &m_early, &m_tail})
        {
            c->assign(2 * MAX_PORTS * N_QUEUES * N_COLORS, 0);
        }
        m_ce.assign(2 * MAX_PORTS * N_QUEUES, 0);
        m_drops.fill(0);
        m_delayFine.fill(0);
    }

    // --- configuration (from Python, once) ---------------------------------------------------

    void SetDataPort(uint16_t p) { m_dataPort = p; }

    void SetLbMode(int mode) { m_lbMode = mode; }

    // random streams of this switch's spray choice and link loss (reproducible runs)
    int64_t AssignStreams(int64_t stream)
    {
        m_rng->SetStream(stream);
        m_lossRng->SetStream(stream + 1);
        return 2;
    }

    // ipv4_lpm entries, longest prefix first; index -1 = a default route (no direct counter)
    void AddLpm(uint32_t value, int plen, int index, int group, int size)
    {
        m_lpm.push_back({value, plen == 0 ? 0u : 0xFFFFFFFFu << (32 - plen), index, group, size});
        if (index >= 0 && index + 1 > (int)m_lpmHits.size() / 2)
        {
            m_lpmHits.resize(2 * (index + 1), 0);
        }
    }

    void SetLpmEntries(int n) { m_lpmHits.assign(2 * n, 0); }

    void AddNhop(int group, int member, int index, uint64_t dmac, int port)
    {
        NhopEntry e;
        e.index = index;
        e.port = port;
        for (int i = 0; i < 6; ++i)
        {
            e.dmac[i] = (dmac >> (8 * (5 - i))) & 0xFF;
        }
        m_nhop[(uint32_t(group) << 16) | uint32_t(member)] = e;
    }

    // classify precomputed for key = dlcp_valid << 11 | prio << 8 | drop_prec << 6 | dscp
    void SetClass(int key, int index, int qid, int color) { m_class[key] = {index, qid, color}; }

    void SetClassifyEntries(int n) { m_classHits.assign(2 * n, 0); }

    void SetThresholds(int port, uint32_t qmax, uint32_t k1, uint32_t k2, uint32_t k3)
    {
        m_thr[port] = {qmax, k1, k2, k3};
    }

    void SetEcnK(int port, int qid, uint32_t k) { m_ecnK[port * N_QUEUES + qid] = k; }

    void SetRrNext(int group, uint16_t v) { m_rr[group] = v; }

    // A port; dev may be null (captured output, for the conformance harness). Rates: frame bits
    // per second (0 = none) wins over packets per second (0 = none); neither = the device's rate.
    void AddPort(int port, Ptr<NetDevice> dev, double rateBps, double ratePps, double devBps,
                 uint32_t depth, double delayS, double loss)
    {
        Port& p = m_ports[port];
        p.number = port;
        p.dev = dev;
        p.rateBps = rateBps;
        p.ratePps = ratePps;
        p.devBps = devBps;
        p.delay = Seconds(delayS);
        p.loss = loss;
        p.qd = CreateObjectWithAttributes<DlcpQueueDisc>("Depth", UintegerValue(depth));
        p.qd->Initialize();
        if (dev)
        {
            m_devPort[PeekPointer(dev)] = port;
        }
    }

    // Receive everything the node's devices get (call once, after the ports are added).
    void Attach(Ptr<Node> node)
    {
        node->RegisterProtocolHandler(MakeCallback(&DlcpSwitch::FromDevice, this), 0, nullptr,
                                      false);
    }

    // --- the data path -------------------------------------------------------------------------

    // A raw Ethernet frame arriving on `port` (the conformance harness's injection).
    void InjectFrame(int port, const std::string& frame)
    {
        const uint8_t* b = reinterpret_cast<const uint8_t*>(frame.data());
        uint32_t n = frame.size();
        if (n < (uint32_t)ETH_LEN)
        {
            // too short for Ethernet: the parser fails before anything else
            CountRx(port, n);
            Drop(dlcp::PARSER_ERROR, n);
            return;
        }
        Ptr<Packet> l3 = Create<Packet>(b + ETH_LEN, n - ETH_LEN);
        Ingress(port, l3, b);
    }

    std::vector<Captured>& GetCaptured() { return m_captured; }

    uint64_t GetPacketsIn() const { return m_pktsIn; }

    // --- counters, in the layout of the built-in engines' counters() ---------------------------

    std::vector<uint64_t> QueueCounter(int which) const  // 0 admitted, 1 early, 2 tail, 3 ce
    {
        if (which == 3)
        {
            return m_ce;
        }
        return which == 0 ? m_admitted : which == 1 ? m_early : m_tail;
    }

    std::vector<uint64_t> DropCounters() const
    {
        return std::vector<uint64_t>(m_drops.begin(), m_drops.end());
    }

    std::vector<uint64_t> LpmHits() const { return m_lpmHits; }

    std::vector<uint64_t> ClassifyHits() const { return m_classHits; }

    std::vector<uint64_t> RrNext() const { return std::vector<uint64_t>(m_rr.begin(), m_rr.end()); }

    std::vector<uint64_t> Occupancy() const
    {
        return std::vector<uint64_t>(m_occ.begin(), m_occ.end());
    }

    // per port: rx_pkts rx_bytes tx_pkts tx_bytes queue_overflow link_loss queued pending
    std::vector<uint64_t> PortCounters(int port) const
    {
        auto it = m_ports.find(port);
        if (it == m_ports.end())
        {
            return {};
        }
        const Port& p = it->second;
        return {p.rxPkts, p.rxBytes, p.txPkts, p.txBytes, p.overflow, p.lost,
                p.qd->GetNPackets(), p.pending};
    }

    std::vector<uint64_t> DelayFine() const
    {
        return std::vector<uint64_t>(m_delayFine.begin(), m_delayFine.end());
    }

    std::vector<uint64_t> DelayCoarse() const  // key, count, key, count ...
    {
        std::vector<uint64_t> out;
        for (auto& kv : m_delayCoarse)
        {
            out.push_back(kv.first);
            out.push_back(kv.second);
        }
        return out;
    }

    uint64_t DelayN() const { return m_delayN; }

    uint64_t DelayMax() const { return m_delayMax; }

    uint64_t MaxEnqQdepth() const { return m_maxEnqQdepth; }

  private:
    struct Lpm
    {
        uint32_t value;
        uint32_t mask;
        int index;
        int group;
        int size;
    };

    struct NhopEntry
    {
        int index;
        int port;
        uint8_t dmac[6];
    };

    struct Class
    {
        int index;
        int qid;
        int color;
    };

    struct Port
    {
        int number = 0;
        Ptr<NetDevice> dev;
        Ptr<DlcpQueueDisc> qd;
        double rateBps = 0;
        double ratePps = 0;
        double devBps = 0;
        Time delay;
        double loss = 0;
        bool busy = false;
        uint64_t rxPkts = 0, rxBytes = 0, txPkts = 0, txBytes = 0, overflow = 0, lost = 0,
                 pending = 0;
    };

    void FromDevice(Ptr<NetDevice> dev, Ptr<const Packet> packet, uint16_t protocol,
                    const Address& from, const Address& to, NetDevice::PacketType type)
    {
        auto it = m_devPort.find(PeekPointer(dev));
        if (it == m_devPort.end())
        {
            return;
        }
        static const uint8_t noMacs[12] = {0};
        uint8_t eth[14];
        std::memcpy(eth, noMacs, 12);
        eth[12] = protocol >> 8;
        eth[13] = protocol & 0xFF;
        Ingress(it->second, packet->Copy(), eth);
    }

    void CountRx(int port, uint32_t n)
    {
        ++m_pktsIn;
        auto it = m_ports.find(port);
        if (it != m_ports.end())
        {
            it->second.rxPkts += 1;
            it->second.rxBytes += n;
        }
    }

    void Drop(int reason, uint32_t n)
    {
        m_drops[2 * reason] += 1;
        m_drops[2 * reason + 1] += n;
    }

    static void Count(std::vector<uint64_t>& c, int i, uint32_t n)
    {
        c[2 * i] += 1;
        c[2 * i + 1] += n;
    }

    // `eth`: the 14-byte Ethernet header the packet came with (its dst MAC becomes the src MAC).
    void Ingress(int inPort, Ptr<Packet> l3, const uint8_t* eth)
    {
        using namespace dlcp;
        uint32_t l3n = l3->GetSize();
        uint32_t n = l3n + ETH_LEN;
        CountRx(inPort, n);
        uint8_t f[VIEW];
        std::memcpy(f, eth, ETH_LEN);
        uint32_t have = std::min<uint32_t>(l3n, VIEW - ETH_LEN);
        l3->CopyData(f + ETH_LEN, have);
        // parser
        if (f[12] != 0x08 || f[13] != 0x00)
        {
            return Drop(NOT_IPV4, n);
        }
        if (n < (uint32_t)L4_OFF)
        {
            return Drop(PARSER_ERROR, n);
        }
        uint8_t proto = f[23];
        uint16_t sport = 0, dport = 0;
        bool dlcpValid = false;
        int tel = -1;
        if ((f[14] & 0x0F) == 5 && !((f[20] & 0x1F) || f[21]))
        {
            if (proto == 17)
            {
                if (n < (uint32_t)DLCP_OFF)
                {
                    return Drop(PARSER_ERROR, n);
                }
                sport = (f[34] << 8) | f[35];
                dport = (f[36] << 8) | f[37];
                if (dport == m_dataPort)
                {
                    if (n < (uint32_t)TEL_OFF || ((f[DLCP_OFF + DLCP_VER_OFF] >> DLCP_VER_SHIFT) & DLCP_VER_MASK) != DLCP_VERSION)
                    {
                        return Drop(PARSER_ERROR, n);
                    }
                    dlcpValid = true;
                    if (f[DLCP_OFF + DLCP_FLAGS_OFF] & DLCP_FLAG_TELEMETRY)
                    {
                        if (n < (uint32_t)(TEL_OFF + DLCP_TELEMETRY_LEN))
                        {
                            return Drop(PARSER_ERROR, n);
                        }
                        tel = TEL_OFF;
                    }
                }
            }
            else if (proto == 6)
            {
                if (n < (uint32_t)(L4_OFF + 4))
                {
                    return Drop(PARSER_ERROR, n);
                }
                sport = (f[34] << 8) | f[35];
                dport = (f[36] << 8) | f[37];
            }
        }
        uint8_t ttl = f[22];
        if (ttl <= 1)
        {
            return Drop(TTL_EXPIRED, n);
        }
        // ipv4_lpm
        uint32_t dst = (uint32_t(f[30]) << 24) | (f[31] << 16) | (f[32] << 8) | f[33];
        const Lpm* hit = nullptr;
        for (const Lpm& e : m_lpm)
        {
            if ((dst & e.mask) == e.value)
            {
                hit = &e;
                break;
            }
        }
        if (hit && hit->index >= 0)
        {
            Count(m_lpmHits, hit->index, n);
        }
        if (!hit || !hit->size)
        {
            return Drop(NO_ROUTE, n);
        }
        int group = hit->group, size = hit->size;
        // member choice
        int member;
        if (dlcpValid && m_lbMode == LB_SPRAY_RANDOM)
        {
            member = std::min<int>(size - 1, int(m_rng->GetValue() * size));
        }
        else if (dlcpValid && m_lbMode == LB_SPRAY_RR)
        {
            uint16_t r = m_rr[group];
            member = r % size;
            m_rr[group] = uint16_t(r + 1);
        }
        else
        {
            uint8_t key[13];
            std::memcpy(key, f + 26, 8);
            key[8] = proto;
            key[9] = sport >> 8;
            key[10] = sport & 0xFF;
            key[11] = dport >> 8;
            key[12] = dport & 0xFF;
            member = Crc16(key, 13) % size;
        }
        auto nh = m_nhop.find((uint32_t(group) << 16) | uint32_t(member));
        if (nh == m_nhop.end() || !m_ports.count(nh->second.port))
        {
            return Drop(NO_ROUTE, n);
        }
        int port = nh->second.port;
        uint8_t smac[6];
        std::memcpy(smac, f, 6);  // eth.src = old eth.dst
        // classify
        int ckey = (f[15] >> 2) << CLASSIFY_DSCP_SHIFT;
        if (dlcpValid)
        {
            const uint8_t* h = f + DLCP_OFF;
            ckey |= (1 << CLASSIFY_DLCP_VALID_SHIFT) |
                    (((h[DLCP_PRIO_OFF] >> DLCP_PRIO_SHIFT) & DLCP_PRIO_MASK) << CLASSIFY_DLCP_PRIO_SHIFT) |
                    (((h[DLCP_DROP_PREC_OFF] >> DLCP_DROP_PREC_SHIFT) & DLCP_DROP_PREC_MASK)
                     << CLASSIFY_DLCP_DROP_PREC_SHIFT);
        }
        const Class& cl = m_class[ckey];
        if (cl.index >= 0)
        {
            Count(m_classHits, cl.index, n);
        }
        int qid = cl.qid, color = cl.color;
        // queue_thresholds + admission
        const auto& th = m_thr[port];
        int oi = port * N_QUEUES + qid;
        uint32_t occ = m_occ[oi];
        int ci = oi * N_COLORS + color;
        if (occ >= th[0])
        {
            return Count(m_tail, ci, n);
        }
        if (color && occ >= th[color])
        {
            return Count(m_early, ci, n);
        }
        m_occ[oi] = occ + 1;
        Count(m_admitted, ci, n);
        // ECN: an ECN-capable packet admitted while its queue held K or more leaves CE
        uint8_t tos = f[15];
        if (((tos & 3) == 1 || (tos & 3) == 2) && occ >= m_ecnK[oi])
        {
            uint32_t old = (f[14] << 8) | tos;
            f[15] = tos | 3;
            uint32_t hc = Fold((~((f[24] << 8) | f[25]) & 0xFFFF) + (~old & 0xFFFF) + (old | 3));
            hc = ~hc & 0xFFFF;
            f[24] = hc >> 8;
            f[25] = hc & 0xFF;
            Count(m_ce, oi, n);
        }
        // TTL -= 1, the IPv4 checksum updated incrementally (RFC 1624 eqn. 3)
        uint32_t old = (uint32_t(ttl) << 8) | proto;
        f[22] = ttl - 1;
        uint32_t hc = Fold((~((f[24] << 8) | f[25]) & 0xFFFF) + (~old & 0xFFFF) + old - 0x100);
        hc = ~hc & 0xFFFF;
        f[24] = hc >> 8;
        f[25] = hc & 0xFF;
        Rewrite(l3, f, 20);
        Port& p = m_ports[port];
        uint32_t depth = p.qd->Length(qid);
        Ptr<DlcpItem> item = Create<DlcpItem>(l3, qid, tel, depth, nh->second.dmac, smac);
        item->SetTimeStamp(Simulator::Now());
        if (!p.qd->Enqueue(item))
        {
            p.overflow += 1;
            m_occ[oi] -= 1;  // the physical queue refused it: give the slot back
            return;
        }
        if (!p.busy)
        {
            TxNext(port);
        }
    }

    // Put the first `len` bytes of the L3 view `f + 14` back at the front of packet `l3`.
    static void Rewrite(Ptr<Packet> l3, const uint8_t* f, uint32_t len)
    {
        len = std::min(len, l3->GetSize());
        l3->RemoveAtStart(len);
        DlcpRawHeader h;
        h.Set(f + ETH_LEN, len);
        l3->AddHeader(h);
    }

    // The port's next transmission slot: dequeue (highest priority first), release the queue
    // slot, stamp telemetry, then loss and delay on the link.
    void TxNext(int port)
    {
        using namespace dlcp;
        Port& p = m_ports[port];
        Ptr<QueueDiscItem> qi = p.qd->Dequeue();
        if (!qi)
        {
            p.busy = false;
            return;
        }
        p.busy = true;
        Ptr<DlcpItem> item = StaticCast<DlcpItem>(qi);
        int oi = port * N_QUEUES + item->qid;
        if (m_occ[oi])
        {
            m_occ[oi] -= 1;
        }
        Ptr<Packet> l3 = item->GetPacket();
        uint32_t l3n = l3->GetSize();
        uint32_t n = l3n + ETH_LEN;
        uint64_t waitUs = (Simulator::Now() - item->GetTimeStamp()).GetMicroSeconds();
        AddDelay(waitUs);
        m_maxEnqQdepth = std::max<uint64_t>(m_maxEnqQdepth, item->enqDepth);
        if (item->tel >= 0)
        {
            StampTelemetry(l3, item->enqDepth, waitUs);
        }
        double slot = 0;
        if (p.rateBps > 0)
        {
            slot = n * 8.0 / p.rateBps;
        }
        else if (p.ratePps > 0)
        {
            slot = 1.0 / p.ratePps;
        }
        if (p.dev && p.devBps > 0)
        {
            // never faster than the device serialises (IP + 2 bytes of PPP)
            slot = std::max(slot, (l3n + 2) * 8.0 / p.devBps);
        }
        Simulator::Schedule(Seconds(slot), &DlcpSwitch::TxNext, this, port);
        if (p.loss > 0 && m_lossRng->GetValue() < p.loss)
        {
            p.lost += 1;
            return;
        }
        if (p.delay.IsStrictlyPositive())
        {
            p.pending += 1;
            Simulator::Schedule(p.delay, &DlcpSwitch::Deliver, this, port, item, true);
        }
        else
        {
            Deliver(port, item, false);
        }
    }

    void Deliver(int port, Ptr<DlcpItem> item, bool delayed)
    {
        Port& p = m_ports[port];
        if (delayed)
        {
            p.pending -= 1;
        }
        Ptr<Packet> l3 = item->GetPacket();
        uint32_t n = l3->GetSize() + ETH_LEN;
        p.txPkts += 1;
        p.txBytes += n;
        if (p.dev)
        {
            p.dev->Send(l3, p.dev->GetBroadcast(), 0x0800);
            return;
        }
        std::string frame(n, '\0');
        std::memcpy(&frame[0], item->macs, 12);
        frame[12] = 0x08;
        frame[13] = 0x00;
        l3->CopyData(reinterpret_cast<uint8_t*>(&frame[ETH_LEN]), n - ETH_LEN);
        m_captured.push_back({Simulator::Now().GetSeconds(), port, frame});
    }

    // hops + 1, max_enq_qdepth = max(.., depth), sum_deq_timedelta_us += wait; the UDP checksum
    // follows unless it is zero (dlcp/switch/pipeline.py, stamp_telemetry)
    static void StampTelemetry(Ptr<Packet> l3, uint32_t depth, uint64_t waitUs)
    {
        using namespace dlcp;
        uint8_t f[VIEW];
        uint32_t len = VIEW - ETH_LEN;
        l3->CopyData(f + ETH_LEN, len);
        uint8_t* t = f + TEL_OFF;
        constexpr int W = DLCP_TELEMETRY_LEN / 2;  // the block as 16-bit words, for the UDP checksum
        uint32_t oldW[W];
        for (int i = 0; i < W; ++i)
        {
            oldW[i] = uint32_t(t[2 * i] << 8 | t[2 * i + 1]);
        }
        uint8_t* hops = t + DLCP_TEL_HOPS_OFF;
        uint8_t* qdp = t + DLCP_TEL_MAX_ENQ_QDEPTH_OFF;
        uint8_t* tot = t + DLCP_TEL_SUM_DEQ_TIMEDELTA_US_OFF;
        uint32_t qd = uint32_t(qdp[0] << 8 | qdp[1]);
        uint32_t total = uint32_t(tot[0]) << 24 | uint32_t(tot[1]) << 16 | uint32_t(tot[2]) << 8 | tot[3];
        *hops = uint8_t(*hops + 1);
        qd = std::max<uint32_t>(qd, std::min<uint32_t>(depth, DLCP_TEL_MAX_ENQ_QDEPTH_MASK));
        total = uint32_t(total + waitUs);
        qdp[0] = qd >> 8;
        qdp[1] = qd & 0xFF;
        tot[0] = total >> 24;
        tot[1] = (total >> 16) & 0xFF;
        tot[2] = (total >> 8) & 0xFF;
        tot[3] = total & 0xFF;
        uint32_t csum = (f[UDP_CSUM] << 8) | f[UDP_CSUM + 1];
        if (csum)
        {
            uint32_t x = ~csum & 0xFFFF;
            for (int i = 0; i < W; ++i)
            {
                x += (~oldW[i] & 0xFFFF) + uint32_t(t[2 * i] << 8 | t[2 * i + 1]);
            }
            csum = ~Fold(x) & 0xFFFF;
            if (!csum)
            {
                csum = 0xFFFF;
            }
            f[UDP_CSUM] = csum >> 8;
            f[UDP_CSUM + 1] = csum & 0xFF;
        }
        Rewrite(l3, f, len);
    }

    void AddDelay(uint64_t us)
    {
        m_delayN += 1;
        m_delayMax = std::max(m_delayMax, us);
        if (us < (uint64_t)dlcp::FINE)
        {
            m_delayFine[us] += 1;
            return;
        }
        int b = 64 - __builtin_clzll(us);
        uint64_t key = (uint64_t(b) << 5) | ((us >> (b - 6)) & 31);
        m_delayCoarse[key] += 1;
    }

    uint16_t m_dataPort = 9910;
    int m_lbMode = 0;
    Ptr<UniformRandomVariable> m_rng;
    Ptr<UniformRandomVariable> m_lossRng;
    std::vector<Lpm> m_lpm;
    std::unordered_map<uint32_t, NhopEntry> m_nhop;
    std::array<Class, 4096> m_class;
    std::array<std::array<uint32_t, 4>, MAX_PORTS> m_thr;
    std::array<uint32_t, MAX_PORTS * N_QUEUES> m_ecnK;
    std::array<uint32_t, MAX_PORTS * N_QUEUES> m_occ;
    std::array<uint16_t, MAX_GROUPS> m_rr;
    std::map<int, Port> m_ports;
    std::unordered_map<NetDevice*, int> m_devPort;
    // counters: [pkts, bytes] pairs, queue counters at (port * 8 + qid) * 4 + color
    std::vector<uint64_t> m_admitted, m_early, m_tail, m_ce, m_lpmHits, m_classHits;
    std::array<uint64_t, 16> m_drops;
    std::array<uint64_t, dlcp::FINE> m_delayFine;
    std::map<uint64_t, uint64_t> m_delayCoarse;
    uint64_t m_delayN = 0, m_delayMax = 0, m_maxEnqQdepth = 0, m_pktsIn = 0;
    std::vector<Captured> m_captured;
};

// The conformance harness's injection: `frame` arrives on `port` at simulated time `t` (s).
inline void ScheduleInject(Ptr<DlcpSwitch> sw, double t, int port, const std::string& frame)
{
    Simulator::Schedule(Seconds(t), &DlcpSwitch::InjectFrame, sw, port, frame);
}

} // namespace ns3
