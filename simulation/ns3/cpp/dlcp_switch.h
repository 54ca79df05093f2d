// The DLCP switch on ns-3: the C pipeline core (dlcp/switch/c/switch_core.h, the built-in switch's
// C engine compiles the same file) on packet bytes, with the ns-3 glue around it: one object per
// switch node, its NetDevices, a queue disc per port whose order is the core's queue discipline,
// dequeues scheduled at the port rate, link delay and loss, simulated time.
//
// Ingress (DlcpSwitch::Ingress): the core's sw_ingress on the packet's first bytes (parse, drop
// reasons, tables, classification, admission, ECN, TTL and checksum), written back into the packet.
// The tables arrive flattened from Python (dlcp/switch/pipeline.py's `Pipeline.compiled_tables()`,
// as for the built-in switch, so both read a runtime file the same way). Egress: each port's
// DlcpQueueDisc (8 FIFOs of queue_depth_pkts each, served in the order sw_qdisc_pick gives) drains
// at the port rate counted on Ethernet frame bytes (IP + 14, as the built-in switch counts), one
// packet at a time: a packet leaves the queue when its transmission slot starts, so exactly one
// packet of a busy port is past the queue. Then sw_egress (slot back, queueing time, telemetry),
// random link loss and the propagation delay of the runtime's `ports` row, and the packet goes to
// the point-to-point device (whose channel has no delay of its own) or, for the conformance
// harness, to a capture list.
//
// ns-3's point-to-point links carry no Ethernet header: the switch sees IPv4 packets, counts them as
// Ethernet frames (+14 bytes), and keeps the MAC rewrite of `set_nhop` only for captured output.
#pragma once

#include "switch_core.h"

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
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace ns3 {

// Header bytes the pipeline rewrote, put back in front of the packet.
class DlcpRawHeader : public Header {
  public:
    static TypeId GetTypeId() {
        static TypeId tid =
            TypeId("ns3::DlcpRawHeader").SetParent<Header>().SetGroupName("Dlcp").AddConstructor<DlcpRawHeader>();
        return tid;
    }
    TypeId GetInstanceTypeId() const override { return GetTypeId(); }
    void Set(const uint8_t *b, uint32_t n) {
        m_n = n;
        std::memcpy(m_b, b, n);
    }
    uint32_t GetSerializedSize() const override { return m_n; }
    void Serialize(Buffer::Iterator it) const override { it.Write(m_b, m_n); }
    uint32_t Deserialize(Buffer::Iterator it) override {
        it.Read(m_b, m_n);
        return m_n;
    }
    void Print(std::ostream &os) const override { os << "dlcp-raw(" << m_n << ")"; }

  private:
    uint8_t m_b[SW_VIEW];
    uint32_t m_n = 0;
};

// A packet waiting in a switch queue, with what egress needs to know about it.
class DlcpItem : public QueueDiscItem {
  public:
    DlcpItem(Ptr<Packet> p, uint8_t qid, int tel, uint32_t enqDepth, const uint8_t *macs)
        : QueueDiscItem(p, Address(), 0x0800), qid(qid), tel(tel), enqDepth(enqDepth) {
        std::memcpy(this->macs, macs, 12);
    }
    void AddHeader() override {}
    bool Mark() override { return false; }

    uint8_t qid;
    int tel;            // telemetry block offset in the frame, -1 without one
    uint32_t enqDepth;  // packets ahead of it in its own queue when it was enqueued
    uint8_t macs[12];   // dst, src after set_nhop (captured output only)
};

// One egress port's queues: 8 FIFOs, `Depth` packets each, served in the order the port's queue
// discipline in the core picks. Admission is the pipeline's (the occupancy register); a full FIFO
// here is the physical queue refusing a packet admission let through (`queue_overflow_pkts`).
class DlcpQueueDisc : public QueueDisc {
  public:
    static TypeId GetTypeId() {
        static TypeId tid =
            TypeId("ns3::DlcpQueueDisc")
                .SetParent<QueueDisc>()
                .SetGroupName("Dlcp")
                .AddConstructor<DlcpQueueDisc>()
                .AddAttribute("Depth", "packets per priority queue (queue_depth_pkts)", UintegerValue(128),
                              MakeUintegerAccessor(&DlcpQueueDisc::m_depth), MakeUintegerChecker<uint32_t>(1));
        return tid;
    }
    DlcpQueueDisc() : QueueDisc(QueueDiscSizePolicy::NO_LIMITS) {}
    void SetDiscipline(SwQdisc *d) { m_qdisc = d; }
    uint32_t Length(int qid) const { return GetInternalQueue(qid)->GetNPackets(); }

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override {
        Ptr<InternalQueue> q = GetInternalQueue(StaticCast<DlcpItem>(item)->qid);
        if (q->GetNPackets() >= m_depth) {
            DropBeforeEnqueue(item, "queue full");
            return false;
        }
        return q->Enqueue(item);
    }
    // the queue the discipline picks, from the queues' lengths and head frame sizes
    int Pick(SwQdisc *d) {
        uint32_t count[N_QUEUES], headLen[N_QUEUES];
        for (int q = 0; q < N_QUEUES; ++q) {
            Ptr<InternalQueue> iq = GetInternalQueue(q);
            count[q] = iq->GetNPackets();
            headLen[q] = count[q] ? iq->Peek()->GetSize() + ETH_LEN : 0;
        }
        return sw_qdisc_pick(d, count, headLen);
    }
    Ptr<QueueDiscItem> DoDequeue() override {
        int q = Pick(m_qdisc);
        return q < 0 ? nullptr : GetInternalQueue(q)->Dequeue();
    }
    Ptr<const QueueDiscItem> DoPeek() override {
        SwQdisc copy = *m_qdisc;  // a peek leaves the discipline's state alone
        int q = Pick(&copy);
        return q < 0 ? nullptr : GetInternalQueue(q)->Peek();
    }
    bool CheckConfig() override {
        if (GetNInternalQueues() == 0) {
            for (int q = 0; q < N_QUEUES; ++q) {
                AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                    "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, m_depth + 1))));
            }
        }
        return GetNInternalQueues() == N_QUEUES && m_qdisc;
    }
    void InitializeParams() override {}

    uint32_t m_depth = 128;
    SwQdisc *m_qdisc = nullptr;  // the port's discipline in the switch's core
};

// spray_random's member choice from the switch's own ns-3 random stream (reproducible runs)
inline double DlcpUniform(void *ctx) { return static_cast<UniformRandomVariable *>(ctx)->GetValue(); }

class DlcpSwitch : public Object {
  public:
    struct Captured {
        double t;
        int port;
        std::string frame;
    };

    static TypeId GetTypeId() {
        static TypeId tid = TypeId("ns3::DlcpSwitch").SetParent<Object>().SetGroupName("Dlcp");
        return tid;
    }

    DlcpSwitch() {
        m_rng = CreateObject<UniformRandomVariable>();
        m_lossRng = CreateObject<UniformRandomVariable>();
        m_core = static_cast<SwCore *>(std::calloc(1, sizeof(SwCore)));
        if (!m_core || sw_init(m_core, DLCP_DATA_PORT, 0) < 0) NS_FATAL_ERROR("DlcpSwitch: out of memory");
        m_core->random = &DlcpUniform;
        m_core->random_ctx = PeekPointer(m_rng);
    }
    ~DlcpSwitch() override {
        sw_free(m_core);
        std::free(m_core);
    }

    // --- configuration (from Python, once) ---------------------------------------------------

    void SetDataPort(uint16_t p) { m_core->data_port = p; }
    void SetLbMode(int mode) { m_core->lb_mode = mode; }
    // random streams of this switch's spray choice and link loss (reproducible runs)
    int64_t AssignStreams(int64_t stream) {
        m_rng->SetStream(stream);
        m_lossRng->SetStream(stream + 1);
        return 2;
    }
    // entries of ipv4_lpm and classify (their direct counters); call before AddLpm
    void SetTableSizes(int nLpm, int nClassify) {
        if (sw_set_table_sizes(m_core, nLpm, nClassify) < 0) NS_FATAL_ERROR("DlcpSwitch: out of memory");
    }
    // ipv4_lpm entries, longest prefix first; group -1 = mark_no_route
    void AddLpm(uint32_t value, int plen, int index, int group, int size) {
        if (sw_add_lpm(m_core, value, plen, index, group, size) < 0) NS_FATAL_ERROR("DlcpSwitch: out of memory");
    }
    void AddNhop(int group, int member, int index, uint64_t dmac, int port) {
        uint8_t mac[6];
        for (int i = 0; i < 6; ++i) mac[i] = (dmac >> (8 * (5 - i))) & 0xFF;
        if (sw_add_nhop(m_core, group, member, index, mac, port) < 0)
            NS_FATAL_ERROR("DlcpSwitch: nhop (" << group << ", " << member << ") out of range");
    }
    // classify precomputed for one index of the classify keys concatenated
    void SetClass(int key, int index, int qid, int color) { sw_set_class(m_core, key, index, qid, color); }
    void SetThresholds(int port, uint32_t qmax, uint32_t k1, uint32_t k2, uint32_t k3) {
        sw_set_thresholds(m_core, port, qmax, k1, k2, k3);
    }
    void SetEcnK(int port, int qid, uint32_t k) { m_core->ecn_k[port * N_QUEUES + qid] = k; }
    void SetRrNext(int group, uint16_t v) { m_core->rr_next[group] = v; }
    // a port's queue discipline: QDISC_* and its N_QUEUES parameters (QueueingConfig.c_params)
    void SetQueueing(int port, int kind, const std::vector<uint32_t> &params) {
        if (params.size() != N_QUEUES || sw_set_qdisc(m_core, port, kind, params.data()) < 0)
            NS_FATAL_ERROR("DlcpSwitch: port " << port << ": queue discipline " << kind << " with these parameters");
    }

    // A port; dev may be null (captured output, for the conformance harness). Rates: frame bits
    // per second (0 = none) wins over packets per second (0 = none); neither = the device's rate.
    void AddPort(int port, Ptr<NetDevice> dev, double rateBps, double ratePps, double devBps, uint32_t depth,
                 double delayS, double loss) {
        Port &p = m_ports[port];
        p.dev = dev;
        p.rateBps = rateBps;
        p.ratePps = ratePps;
        p.devBps = devBps;
        p.delay = Seconds(delayS);
        p.loss = loss;
        p.qd = CreateObjectWithAttributes<DlcpQueueDisc>("Depth", UintegerValue(depth));
        p.qd->SetDiscipline(&m_core->qdisc[port]);
        p.qd->Initialize();
        if (dev) m_devPort[PeekPointer(dev)] = port;
    }

    // Receive everything the node's devices get (call once, after the ports are added).
    void Attach(Ptr<Node> node) {
        node->RegisterProtocolHandler(MakeCallback(&DlcpSwitch::FromDevice, this), 0, nullptr, false);
    }

    // --- the data path -------------------------------------------------------------------------

    // A raw Ethernet frame arriving on `port` (the conformance harness's injection).
    void InjectFrame(int port, const std::string &frame) {
        const uint8_t *b = reinterpret_cast<const uint8_t *>(frame.data());
        uint32_t n = frame.size();
        if (n < (uint32_t)ETH_LEN) {  // too short for Ethernet: the parser fails before anything else
            CountRx(port, n);
            uint8_t f[ETH_LEN] = {0};
            std::memcpy(f, b, n);
            SwVerdict v;
            sw_ingress(m_core, f, n, &v);
            return;
        }
        Ingress(port, Create<Packet>(b + ETH_LEN, n - ETH_LEN), b);
    }

    std::vector<Captured> &GetCaptured() { return m_captured; }
    uint64_t GetPacketsIn() const { return m_pktsIn; }

    // --- counters, in the layout of the built-in engines' counters() ---------------------------

    // which: 0 admitted, 1 early drops, 2 tail drops, 3 ce marks, 4 drop reasons; packets or bytes
    std::vector<uint64_t> Counts(int which, bool bytes) const {
        int b = bytes ? 1 : 0;
        const uint64_t *v = which == 0   ? m_core->adm[b]
                            : which == 1 ? m_core->early[b]
                            : which == 2 ? m_core->tail[b]
                            : which == 3 ? m_core->ce[b]
                                         : m_core->drops[b];
        int n = which <= 2 ? SW_COUNTER_SLOTS : which == 3 ? SW_QUEUE_SLOTS : SW_N_REASONS;
        return std::vector<uint64_t>(v, v + n);
    }
    std::vector<uint64_t> LpmHits() const {
        return std::vector<uint64_t>(m_core->lpm_hits, m_core->lpm_hits + 2 * m_core->n_lpm_entries);
    }
    std::vector<uint64_t> ClassifyHits() const {
        return std::vector<uint64_t>(m_core->cls_hits, m_core->cls_hits + 2 * m_core->n_cls_entries);
    }
    std::vector<uint64_t> RrNext() const {
        return std::vector<uint64_t>(m_core->rr_next, m_core->rr_next + MAX_GROUPS);
    }
    std::vector<uint64_t> Occupancy() const {
        return std::vector<uint64_t>(m_core->occupancy, m_core->occupancy + SW_QUEUE_SLOTS);
    }
    // index, admitted, early, tail of every non-zero non-DLCP slot
    std::vector<uint64_t> NonDlcp() const {
        std::vector<uint64_t> out;
        for (int i = 0; i < SW_NON_DLCP_SLOTS; ++i) {
            if (m_core->non_dlcp[0][i] | m_core->non_dlcp[1][i] | m_core->non_dlcp[2][i]) {
                out.insert(out.end(),
                           {uint64_t(i), m_core->non_dlcp[0][i], m_core->non_dlcp[1][i], m_core->non_dlcp[2][i]});
            }
        }
        return out;
    }
    // per port: rx_pkts rx_bytes tx_pkts tx_bytes queue_overflow link_loss queued pending
    std::vector<uint64_t> PortCounters(int port) const {
        auto it = m_ports.find(port);
        if (it == m_ports.end()) return {};
        const Port &p = it->second;
        return {p.rxPkts, p.rxBytes, p.txPkts, p.txBytes, p.overflow, p.lost, p.qd->GetNPackets(), p.pending};
    }
    std::vector<uint64_t> DelayFine() const {
        return std::vector<uint64_t>(m_core->delay_fine, m_core->delay_fine + SW_DELAY_FINE);
    }
    std::vector<uint64_t> DelayCoarse() const {  // key, count, key, count ...
        std::vector<uint64_t> out;
        for (int k = 0; k < SW_DELAY_COARSE; ++k) {
            if (m_core->delay_coarse[k]) out.insert(out.end(), {uint64_t(k), m_core->delay_coarse[k]});
        }
        return out;
    }
    uint64_t DelayN() const { return m_core->delay_n; }
    uint64_t DelayMax() const { return m_core->delay_max; }
    uint64_t MaxEnqQdepth() const { return m_core->max_enq_qdepth; }
    int LastDrop() const { return m_core->last_drop; }

  private:
    struct Port {
        Ptr<NetDevice> dev;
        Ptr<DlcpQueueDisc> qd;
        double rateBps = 0, ratePps = 0, devBps = 0;
        Time delay;
        double loss = 0;
        bool busy = false;
        uint64_t rxPkts = 0, rxBytes = 0, txPkts = 0, txBytes = 0, overflow = 0, lost = 0, pending = 0;
    };

    void FromDevice(Ptr<NetDevice> dev, Ptr<const Packet> packet, uint16_t protocol, const Address &from,
                    const Address &to, NetDevice::PacketType type) {
        auto it = m_devPort.find(PeekPointer(dev));
        if (it == m_devPort.end()) return;
        uint8_t eth[ETH_LEN] = {0};
        eth[12] = protocol >> 8;
        eth[13] = protocol & 0xFF;
        Ingress(it->second, packet->Copy(), eth);
    }

    void CountRx(int port, uint32_t n) {
        ++m_pktsIn;
        auto it = m_ports.find(port);
        if (it != m_ports.end()) {
            it->second.rxPkts += 1;
            it->second.rxBytes += n;
        }
    }

    // `eth`: the 14-byte Ethernet header the packet came with (its dst MAC becomes the src MAC).
    void Ingress(int inPort, Ptr<Packet> l3, const uint8_t *eth) {
        uint32_t l3n = l3->GetSize(), n = l3n + ETH_LEN;
        CountRx(inPort, n);
        uint8_t f[SW_VIEW];
        std::memcpy(f, eth, ETH_LEN);
        l3->CopyData(f + ETH_LEN, std::min<uint32_t>(l3n, SW_VIEW - ETH_LEN));
        SwVerdict v;
        if (!sw_ingress(m_core, f, n, &v)) return;
        auto it = m_ports.find(v.port);
        if (it == m_ports.end()) {  // a next hop on a port without a queue (the runtime reader refuses it)
            sw_release(m_core, v.port, v.qid);
            return;
        }
        Rewrite(l3, f, 20);  // the IPv4 header: TOS, TTL, checksum
        Port &p = it->second;
        Ptr<DlcpItem> item = Create<DlcpItem>(l3, v.qid, v.tel, p.qd->Length(v.qid), f);
        item->SetTimeStamp(Simulator::Now());
        if (!p.qd->Enqueue(item)) {
            p.overflow += 1;
            sw_release(m_core, v.port, v.qid);  // the physical queue refused it: give the slot back
            return;
        }
        if (!p.busy) TxNext(v.port);
    }

    // Put the first `len` bytes of the L3 view `f + 14` back at the front of packet `l3`.
    static void Rewrite(Ptr<Packet> l3, const uint8_t *f, uint32_t len) {
        len = std::min(len, l3->GetSize());
        l3->RemoveAtStart(len);
        DlcpRawHeader h;
        h.Set(f + ETH_LEN, len);
        l3->AddHeader(h);
    }

    // The port's next transmission slot: dequeue (the discipline's pick), sw_egress (slot back,
    // queueing time, telemetry), then loss and delay on the link.
    void TxNext(int port) {
        Port &p = m_ports[port];
        Ptr<QueueDiscItem> qi = p.qd->Dequeue();
        if (!qi) {
            p.busy = false;
            return;
        }
        p.busy = true;
        Ptr<DlcpItem> item = StaticCast<DlcpItem>(qi);
        Ptr<Packet> l3 = item->GetPacket();
        uint32_t l3n = l3->GetSize(), n = l3n + ETH_LEN;
        uint64_t waitUs = (Simulator::Now() - item->GetTimeStamp()).GetMicroSeconds();
        if (item->tel >= 0) {
            uint8_t f[SW_VIEW];
            l3->CopyData(f + ETH_LEN, SW_VIEW - ETH_LEN);
            sw_egress(m_core, port, item->qid, f, item->tel, item->enqDepth, waitUs, 0);
            Rewrite(l3, f, SW_VIEW - ETH_LEN);
        } else {
            sw_egress(m_core, port, item->qid, nullptr, -1, item->enqDepth, waitUs, 0);
        }
        double slot = 0;
        if (p.rateBps > 0) {
            slot = n * 8.0 / p.rateBps;
        } else if (p.ratePps > 0) {
            slot = 1.0 / p.ratePps;
        }
        if (p.dev && p.devBps > 0) {  // never faster than the device serialises (IP + 2 bytes of PPP)
            slot = std::max(slot, (l3n + 2) * 8.0 / p.devBps);
        }
        Simulator::Schedule(Seconds(slot), &DlcpSwitch::TxNext, this, port);
        if (p.loss > 0 && m_lossRng->GetValue() < p.loss) {
            p.lost += 1;
            return;
        }
        if (p.delay.IsStrictlyPositive()) {
            p.pending += 1;
            Simulator::Schedule(p.delay, &DlcpSwitch::Deliver, this, port, item, true);
        } else {
            Deliver(port, item, false);
        }
    }

    void Deliver(int port, Ptr<DlcpItem> item, bool delayed) {
        Port &p = m_ports[port];
        if (delayed) p.pending -= 1;
        Ptr<Packet> l3 = item->GetPacket();
        uint32_t n = l3->GetSize() + ETH_LEN;
        p.txPkts += 1;
        p.txBytes += n;
        if (p.dev) {
            p.dev->Send(l3, p.dev->GetBroadcast(), 0x0800);
            return;
        }
        std::string frame(n, '\0');
        std::memcpy(&frame[0], item->macs, 12);
        frame[12] = 0x08;
        frame[13] = 0x00;
        l3->CopyData(reinterpret_cast<uint8_t *>(&frame[ETH_LEN]), n - ETH_LEN);
        m_captured.push_back({Simulator::Now().GetSeconds(), port, frame});
    }

    SwCore *m_core;
    Ptr<UniformRandomVariable> m_rng;
    Ptr<UniformRandomVariable> m_lossRng;
    std::map<int, Port> m_ports;
    std::unordered_map<NetDevice *, int> m_devPort;
    uint64_t m_pktsIn = 0;
    std::vector<Captured> m_captured;
};

// The conformance harness's injection: `frame` arrives on `port` at simulated time `t` (s).
inline void ScheduleInject(Ptr<DlcpSwitch> sw, double t, int port, const std::string &frame) {
    Simulator::Schedule(Seconds(t), &DlcpSwitch::InjectFrame, sw, port, frame);
}

}  // namespace ns3
