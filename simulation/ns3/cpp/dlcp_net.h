// Building blocks of a simulated experiment network, called once per node, link or flow from
// simulation/ns3/network.py. They wrap ns-3 helpers whose set-up calls are variadic templates
// (awkward through cppyy) and keep the modelling choices in one place:
//  - a link is a point-to-point channel without delay (a switch port applies the runtime's
//    delay_us after its queue, as the built-in switch does); each device serialises at its
//    link rate and waits a 12-byte inter-frame gap, so a packet occupies IP + 2 (PPP) + 12 bytes
//    of link time: the IP + 14 bytes of the Ethernet frame the emulator's rates count;
//  - a host NIC is a FIFO queue disc of links.host_queue_pkts packets in front of a 1-packet
//    device queue (Mininet: HTB at the link rate with a pfifo of that limit);
//  - a host has one IPv4 address, 10.0.0.N/24, on its one interface;
//  - TCP (control channel, tcp background) as Linux sets it up, not ns-3's defaults: the RTO is
//    srtt + max(200 ms, 4 rttvar) as Linux computes it (ns-3's: max(1 s, srtt + 4 rttvar); with
//    a 200 ms floor every RTO is an exact multiple of 100 ms and retransmissions keep hitting the
//    same phase of periodic background bursts), 1448-byte segments (ns-3: 536), delayed ACKs of
//    at most 40 ms, 15 retransmissions before a connection is given up (tcp_retries2; ns-3: 6),
//    and no timestamps: ns-3 then takes RTT samples from the echoes of retransmitted segments, and
//    one control frame lost twice inflated the RTO to 4.5 s (ps-incast, fifo), after which every
//    further loss of a control frame stalled its message until the transport's 2 s deadline;
//    without timestamps ns-3 follows Karn's rule (Linux, with timestamps, has RACK-TLP instead).
#pragma once

#include "ns3/applications-module.h"
#include "ns3/internet-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <deque>
#include <map>
#include <string>
#include <vector>

namespace ns3 {

inline void DlcpTcpLikeLinux() {
    // ns-3: rto = max(MinRto, srtt + max(ClockGranularity, 4 rttvar)); Linux's tcp_rto_min sits
    // where ns-3 puts the clock granularity
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(40)));
    Config::SetDefault("ns3::TcpSocket::TcpNoDelay", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(15));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
}

inline NetDeviceContainer DlcpLink(Ptr<Node> a, Ptr<Node> b, double rateA, double rateB, uint32_t mtu) {
    PointToPointHelper p2p;
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(0)));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1p"));
    NetDeviceContainer devs = p2p.Install(a, b);
    double rates[2] = {rateA, rateB};
    for (uint32_t i = 0; i < 2; ++i) {
        Ptr<PointToPointNetDevice> d = DynamicCast<PointToPointNetDevice>(devs.Get(i));
        d->SetDataRate(DataRate(uint64_t(rates[i])));
        d->SetInterframeGap(Seconds(12 * 8.0 / rates[i]));
    }
    return devs;
}

// A switch-side device queue: the switch hands a packet down only when the device is idle, so
// this never holds more than a packet that a 1 ns rounding difference let arrive early.
inline void DlcpSwitchDeviceQueue(Ptr<NetDevice> dev, uint32_t packets) {
    Ptr<PointToPointNetDevice> d = DynamicCast<PointToPointNetDevice>(dev);
    d->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, packets));
}

// links.host_fair_queueing: the host NIC serves its destinations round-robin, as the emulated
// hosts' HTB does (emulation/network.py): one FIFO of `Limit` packets per other host, plus one for
// anything else, served by deficit round robin with a quantum of one full frame (HTB's quantum
// there; its leaves have equal rates and may each borrow the whole link, so backlogged
// destinations share it frame by frame).
class DlcpDestFairQueueDisc : public QueueDisc {
  public:
    static TypeId GetTypeId() {
        static TypeId tid =
            TypeId("ns3::DlcpDestFairQueueDisc")
                .SetParent<QueueDisc>()
                .SetGroupName("Dlcp")
                .AddConstructor<DlcpDestFairQueueDisc>()
                .AddAttribute("Limit", "packets per destination's FIFO (host_queue_pkts)", UintegerValue(128),
                              MakeUintegerAccessor(&DlcpDestFairQueueDisc::m_limit), MakeUintegerChecker<uint32_t>(1));
        return tid;
    }

    DlcpDestFairQueueDisc() : QueueDisc(QueueDiscSizePolicy::NO_LIMITS) {}

    // the other hosts' addresses, each its own FIFO (before the queue disc is initialized)
    void AddDestination(uint32_t addr) { m_class.emplace(addr, m_class.size() + 1); }

  private:
    static constexpr uint32_t QUANTUM = 1514;  // one full Ethernet frame

    bool DoEnqueue(Ptr<QueueDiscItem> item) override {
        uint32_t c = 0;  // anything no destination matches
        Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
        if (ip) {
            auto it = m_class.find(ip->GetHeader().GetDestination().Get());
            c = it == m_class.end() ? 0 : it->second;
        }
        Ptr<InternalQueue> q = GetInternalQueue(c);
        if (q->GetNPackets() >= m_limit) {
            DropBeforeEnqueue(item, "destination's queue full");
            return false;
        }
        if (!q->Enqueue(item)) { return false; }
        if (!m_inRound[c]) {
            m_inRound[c] = true;
            m_deficit[c] = 0;
            m_round.push_back(c);
        }
        return true;
    }

    Ptr<QueueDiscItem> DoDequeue() override {
        while (!m_round.empty()) {
            uint32_t c = m_round.front();
            Ptr<InternalQueue> q = GetInternalQueue(c);
            if (!q->GetNPackets()) {
                m_round.pop_front();
                m_inRound[c] = false;
                continue;
            }
            uint32_t size = q->Peek()->GetSize();
            if (m_deficit[c] < size) {
                m_deficit[c] += QUANTUM;
                m_round.pop_front();
                m_round.push_back(c);
                continue;
            }
            m_deficit[c] -= size;
            Ptr<QueueDiscItem> item = q->Dequeue();
            if (!q->GetNPackets()) {
                m_round.pop_front();
                m_inRound[c] = false;
            }
            return item;
        }
        return nullptr;
    }

    bool CheckConfig() override {
        if (GetNInternalQueues() == 0) {
            for (size_t c = 0; c <= m_class.size(); ++c) {
                AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                    "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, m_limit + 1))));
            }
            m_deficit.assign(m_class.size() + 1, 0);
            m_inRound.assign(m_class.size() + 1, false);
        }
        return GetNInternalQueues() == m_class.size() + 1;
    }

    void InitializeParams() override {}

    uint32_t m_limit = 128;
    std::map<uint32_t, uint32_t> m_class;  // destination address -> its FIFO (0: the rest)
    std::vector<uint32_t> m_deficit;
    std::vector<bool> m_inRound;
    std::deque<uint32_t> m_round;  // FIFOs with packets, in serving order
};

// A host's address and NIC queue: one FIFO of `queuePkts`, or with `fairTo` (the other hosts'
// addresses) a DlcpDestFairQueueDisc.
inline void DlcpHostNic(Ptr<Node> host, Ptr<NetDevice> dev, uint32_t addr, uint32_t queuePkts,
                        const std::vector<uint32_t> &fairTo) {
    Ptr<Ipv4> ipv4 = host->GetObject<Ipv4>();
    int32_t iface = ipv4->AddInterface(dev);
    ipv4->AddAddress(iface, Ipv4InterfaceAddress(Ipv4Address(addr), Ipv4Mask("255.255.255.0")));
    ipv4->SetMetric(iface, 1);
    ipv4->SetUp(iface);
    TrafficControlHelper tch;
    if (fairTo.empty()) {
        tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize",
                             QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, queuePkts)));
    } else {
        DlcpDestFairQueueDisc::GetTypeId();  // registers the name (no static registration in code cppyy compiles)
        tch.SetRootQueueDisc("ns3::DlcpDestFairQueueDisc", "Limit", UintegerValue(queuePkts));
    }
    QueueDiscContainer qd = tch.Install(dev);
    Ptr<DlcpDestFairQueueDisc> fair = DynamicCast<DlcpDestFairQueueDisc>(qd.Get(0));
    for (uint32_t other : fairTo) { fair->AddDestination(other); }
}

// UDP at `rateBps` during on-periods (onS = 0: always on), `payload` bytes per datagram; with
// `exponential` each on- and off-period is drawn with means onS and offS (ns-3's RNG, seeded by the run).
inline Ptr<Application> DlcpUdpSource(Ptr<Node> src, uint32_t dst, uint16_t port, double rateBps, uint32_t payload,
                                      double onS, double offS, bool exponential, uint8_t tos, double start,
                                      double stop) {
    OnOffHelper h("ns3::UdpSocketFactory", InetSocketAddress(Ipv4Address(dst), port));
    h.SetAttribute("DataRate", DataRateValue(DataRate(uint64_t(rateBps))));
    h.SetAttribute("PacketSize", UintegerValue(payload));
    h.SetAttribute("Tos", UintegerValue(tos));
    if (onS > 0) {
        std::ostringstream on, off;
        if (exponential) {
            on << "ns3::ExponentialRandomVariable[Mean=" << onS << "]";
            off << "ns3::ExponentialRandomVariable[Mean=" << offS << "]";
        } else {
            on << "ns3::ConstantRandomVariable[Constant=" << onS << "]";
            off << "ns3::ConstantRandomVariable[Constant=" << offS << "]";
        }
        h.SetAttribute("OnTime", StringValue(on.str()));
        h.SetAttribute("OffTime", StringValue(off.str()));
    } else {
        h.SetAttribute("OnTime", StringValue("ns3::ConstantRandomVariable[Constant=1e9]"));
        h.SetAttribute("OffTime", StringValue("ns3::ConstantRandomVariable[Constant=0]"));
    }
    ApplicationContainer apps = h.Install(src);
    apps.Start(Seconds(start));
    if (stop > start) { apps.Stop(Seconds(stop)); }
    return apps.Get(0);
}

// One long TCP flow, as fast as TCP lets it.
inline Ptr<Application> DlcpTcpSource(Ptr<Node> src, uint32_t dst, uint16_t port, uint8_t tos, double start,
                                      double stop) {
    BulkSendHelper h("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address(dst), port));
    h.SetAttribute("MaxBytes", UintegerValue(0));
    h.SetAttribute("Tos", UintegerValue(tos));
    ApplicationContainer apps = h.Install(src);
    apps.Start(Seconds(start));
    if (stop > start) { apps.Stop(Seconds(stop)); }
    return apps.Get(0);
}

// The receiving end: counts and discards (UDP) or drains (TCP).
inline Ptr<PacketSink> DlcpSink(Ptr<Node> dst, uint16_t port, bool tcp) {
    PacketSinkHelper h(tcp ? "ns3::TcpSocketFactory" : "ns3::UdpSocketFactory",
                       InetSocketAddress(Ipv4Address::GetAny(), port));
    ApplicationContainer apps = h.Install(dst);
    apps.Start(Seconds(0));
    return DynamicCast<PacketSink>(apps.Get(0));
}

// Packets an OnOff/BulkSend source put on its socket (the OnOff "Tx" trace, counted in C++), and
// with keepTimes their times in seconds (tests: burst lengths and phases).
struct DlcpTxCounter {
    uint64_t packets = 0;
    uint64_t bytes = 0;
    bool keepTimes = false;
    std::vector<double> times;

    void Tx(Ptr<const Packet> p) {
        packets += 1;
        bytes += p->GetSize();
        if (keepTimes) { times.push_back(Simulator::Now().GetSeconds()); }
    }

    void Attach(Ptr<Application> app) { app->TraceConnectWithoutContext("Tx", MakeCallback(&DlcpTxCounter::Tx, this)); }
};

}  // namespace ns3
