// A simulated host's sockets for the bounded-loss transport: what the UDP driver does with the
// kernel in an emulated run (dlcp/transport/udp_driver.py), on ns-3's Internet stack.
//
// Data: one UDP socket on the data port. Datagrams handed down by Python wait in this object's
// send queue and enter the NIC's queue disc only while it holds fewer than `sendBufPkts`: the
// sender blocks, as the emulated hosts' blocking socket does once its send buffer is charged with
// the packets still in the host (Linux), instead of losing them in its own host; the rest of the
// NIC queue stays free for the control connections, as on the emulated hosts.
// A datagram received is either taken by the receive path in C++ (dlcp_rx.h: most data packets of
// a message; after one that may make its sender's FEEDBACK due, a DECIDE up-call) or goes up to
// Python at once, with its arrival time and the ECN bits of its IPv4 header. Control: TCP connections on the control port at priority 7 (TOS 0xE0) in both
// directions (the connections this host opens and the ones it accepts), with the retransmission
// timeout floor the emulated transport sets on its control sockets (dlcp/transport/sockets.py,
// TCP_RTO_MIN_US: 10 ms, not Linux's default 200 ms), as the emulated transport's; bytes are
// handed up per TCP read and split into frames in Python.
//
// Up-calls go through one static dispatcher (converting a Python callable to std::function
// costs cppyy tens of milliseconds, so it is done once per process, not per host or packet).
#pragma once

#include "dlcp_rx.h"

#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/traffic-control-module.h"

#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ns3 {

class DlcpHostIo : public Object {
  public:
    enum Kind {
        DATA = 0,       // a datagram: conn = 0, ecn = its ECN bits
        CONTROL = 1,    // bytes read from control connection `conn`
        CONNECTED = 2,  // outgoing connection `conn` is up
        CLOSED = 3,     // connection `conn` closed or failed
        ACCEPTED = 4,   // a peer opened connection `conn` to us
        WRITABLE = 5,   // the data socket took every datagram handed down (after WouldBlock)
        DECIDE = 6      // the receive path took a datagram after which sender `conn`'s FEEDBACK may be due
    };

    // (host index, kind, connection id, bytes, ecn, peer IPv4)
    using Dispatcher = std::function<void(uint32_t, int, uint64_t, const std::string &, int, uint32_t)>;

    static Dispatcher &Up() {
        static Dispatcher d;
        return d;
    }

    static void SetDispatcher(Dispatcher d) { Up() = std::move(d); }

    static TypeId GetTypeId() {
        static TypeId tid = TypeId("ns3::DlcpHostIo").SetParent<Object>().SetGroupName("Dlcp");
        return tid;
    }

    void Setup(Ptr<Node> node, uint32_t index, uint16_t dataPort, uint16_t controlPort, Ptr<NetDevice> nic,
               uint32_t sendBufPkts, double controlRtoMinS) {
        m_controlRtoMin = Seconds(controlRtoMinS);
        m_node = node;
        m_index = index;
        m_dataPort = dataPort;
        m_controlPort = controlPort;
        m_sendBufPkts = sendBufPkts;
        m_udp = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
        m_udp->Bind(InetSocketAddress(Ipv4Address::GetAny(), dataPort));
        m_udp->SetIpRecvTos(true);
        m_udp->SetRecvCallback(MakeCallback(&DlcpHostIo::OnData, this));
        Ptr<TrafficControlLayer> tc = node->GetObject<TrafficControlLayer>();
        m_qdisc = tc->GetRootQueueDiscOnDevice(nic);
        m_qdisc->TraceConnectWithoutContext("Dequeue", MakeCallback(&DlcpHostIo::OnNicDequeue, this));
        m_listen = Socket::CreateSocket(node, TcpSocketFactory::GetTypeId());
        ControlOptions(m_listen);  // accepted connections are forks of it: they inherit the RTO floor
        m_listen->Bind(InetSocketAddress(Ipv4Address::GetAny(), controlPort));
        m_listen->Listen();
        m_listen->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address &>(),
                                    MakeCallback(&DlcpHostIo::OnAccept, this));
    }

    // --- data ------------------------------------------------------------------------------------

    void SendData(uint32_t dstIp, const std::string &datagram, uint8_t tos) {
        m_pending.push_back({dstIp, tos, datagram});
        // ns-3's TCP sends what SendFrame wrote from an event one time step later; data go one
        // time step later too, so the NIC takes frames and datagrams in the order they were
        // written, as Linux's send calls do (else a BITMAP written just before the next ring
        // step's data waited behind all of it in the NIC's FIFO)
        if (!m_pumpEvent.IsPending()) { m_pumpEvent = Simulator::Schedule(TimeStep(1), &DlcpHostIo::Pump, this); }
    }

    uint64_t PendingData() const { return m_pending.size(); }

    // Whether the datagrams handed down so far fill more than the send buffer has room for: the
    // emulated sender would now be blocked in sendmmsg until the last of them is taken, and only
    // then ask its transport core for the next message. If so, a WRITABLE up-call says when.
    bool WouldBlock() {
        uint64_t queued = m_qdisc->GetNPackets();
        uint64_t room = queued < m_sendBufPkts ? m_sendBufPkts - queued : 0;
        m_wantWritable = m_pending.size() > room;
        return m_wantWritable;
    }

    uint64_t DataSent() const { return m_sent; }

    uint64_t DataReceived() const { return m_received; }

    // the data packets taken here instead of in Python (dlcp_rx.h)
    DlcpRxPath &Rx() { return m_rx; }

    // --- control ---------------------------------------------------------------------------------

    uint64_t Connect(uint32_t dstIp) {
        Ptr<Socket> s = Socket::CreateSocket(m_node, TcpSocketFactory::GetTypeId());
        ControlOptions(s);
        s->Bind();
        uint64_t id = Register(s, dstIp);
        s->SetConnectCallback(MakeCallback(&DlcpHostIo::OnConnected, this),
                              MakeCallback(&DlcpHostIo::OnConnectFailed, this));
        s->Connect(InetSocketAddress(Ipv4Address(dstIp), m_controlPort));
        return id;
    }

    void SendFrame(uint64_t conn, const std::string &bytes) {
        auto it = m_conns.find(conn);
        if (it == m_conns.end()) { return; }
        it->second.out += bytes;
        Flush(it->second);
    }

    // bytes of connection `conn` not yet handed to TCP, TCP's free send buffer, whether it is up,
    // its IP TOS, its retransmission timeout floor and its delayed-ACK timeout in microseconds
    // (diagnostics)
    std::vector<int64_t> ConnState(uint64_t conn) const {
        auto it = m_conns.find(conn);
        if (it == m_conns.end()) { return {}; }
        Ptr<TcpSocketBase> tcp = DynamicCast<TcpSocketBase>(it->second.sock);
        return {int64_t(it->second.out.size()),
                int64_t(it->second.sock->GetTxAvailable()),
                it->second.up ? 1 : 0,
                int64_t(it->second.sock->GetIpTos()),
                tcp ? tcp->GetMinRto().GetMicroSeconds() : -1,
                DelAckUs(it->second.sock)};
    }

  private:
    EventId m_pumpEvent;

    struct Datagram {
        uint32_t dst;
        uint8_t tos;
        std::string bytes;
    };

    struct Conn {
        uint64_t id;
        Ptr<Socket> sock;
        uint32_t peer;
        bool up = false;
        std::string out;
    };

    void Pump() {
        while (!m_pending.empty() && m_qdisc->GetNPackets() < m_sendBufPkts) {
            Datagram &d = m_pending.front();
            Ptr<Packet> p = Create<Packet>(reinterpret_cast<const uint8_t *>(d.bytes.data()), d.bytes.size());
            SocketIpTosTag tag;
            tag.SetTos(d.tos);
            p->AddPacketTag(tag);
            m_udp->SendTo(p, 0, InetSocketAddress(Ipv4Address(d.dst), m_dataPort));
            m_sent += 1;
            m_pending.pop_front();
        }
        if (m_pending.empty() && m_wantWritable) {
            m_wantWritable = false;
            Up()(m_index, WRITABLE, 0, std::string(), 0, 0);
        }
    }

    void OnNicDequeue(Ptr<const QueueDiscItem>) {
        if (!m_pending.empty()) { Simulator::ScheduleNow(&DlcpHostIo::Pump, this); }
    }

    void OnData(Ptr<Socket> s) {
        Address from;
        Ptr<Packet> p;
        while ((p = s->RecvFrom(from))) {
            SocketIpTosTag tag;
            int ecn = p->RemovePacketTag(tag) ? (tag.GetTos() & 3) : 0;
            std::string &buf = m_rxBuf;
            buf.resize(p->GetSize());
            p->CopyData(reinterpret_cast<uint8_t *>(&buf[0]), buf.size());
            m_received += 1;
            int r = m_rx.Absorb(reinterpret_cast<const uint8_t *>(buf.data()), buf.size(), ecn,
                                Simulator::Now().GetSeconds());
            if (r == RX_TAKEN) { continue; }
            if (r == RX_DECIDE) {
                Up()(m_index, DECIDE, uint64_t(m_rx.DecideSrc()), std::string(), 0, 0);
                continue;
            }
            uint32_t peer = InetSocketAddress::ConvertFrom(from).GetIpv4().Get();
            Up()(m_index, DATA, 0, buf, ecn, peer);
        }
    }

    uint64_t Register(Ptr<Socket> s, uint32_t peer) {
        uint64_t id = ++m_nextConn;
        m_conns[id] = Conn{id, s, peer};
        m_connOf[PeekPointer(s)] = id;
        s->SetRecvCallback(MakeCallback(&DlcpHostIo::OnControl, this));
        s->SetSendCallback(MakeCallback(&DlcpHostIo::OnSendSpace, this));
        s->SetCloseCallbacks(MakeCallback(&DlcpHostIo::OnClosed, this), MakeCallback(&DlcpHostIo::OnClosed, this));
        return id;
    }

    // Priority 7 and the control RTO floor (rto = max(floor, srtt + max(floor, 4 rttvar)), as
    // Linux computes it with TCP_RTO_MIN_US; see DlcpTcpLikeLinux for the 200 ms default)
    // Linux caps a socket's delayed ACK at its RTO floor (tcp_delack_max): the emulated control
    // sockets ACK within 10 ms, not the 40 ms of the other connections
    void ControlOptions(Ptr<Socket> s) {
        s->SetIpTos(0xE0);
        s->SetAttribute("MinRto", TimeValue(m_controlRtoMin));
        s->SetAttribute("ClockGranularity", TimeValue(m_controlRtoMin));
        s->SetAttribute("DelAckTimeout", TimeValue(m_controlRtoMin));
    }

    static int64_t DelAckUs(Ptr<Socket> s) {
        TimeValue t;
        s->GetAttribute("DelAckTimeout", t);
        return t.Get().GetMicroSeconds();
    }

    void OnAccept(Ptr<Socket> s, const Address &from) {
        s->SetIpTos(0xE0);  // ns-3's fork does not carry the listener's TOS: answers would go at priority 0
        uint32_t peer = InetSocketAddress::ConvertFrom(from).GetIpv4().Get();
        uint64_t id = Register(s, peer);
        m_conns[id].up = true;
        Up()(m_index, ACCEPTED, id, std::string(), 0, peer);
    }

    void OnConnected(Ptr<Socket> s) {
        uint64_t id = m_connOf[PeekPointer(s)];
        Conn &c = m_conns[id];
        c.up = true;
        Flush(c);
        Up()(m_index, CONNECTED, id, std::string(), 0, c.peer);
    }

    void OnConnectFailed(Ptr<Socket> s) { OnClosed(s); }

    void OnClosed(Ptr<Socket> s) {
        auto it = m_connOf.find(PeekPointer(s));
        if (it == m_connOf.end()) { return; }
        uint64_t id = it->second;
        uint32_t peer = m_conns[id].peer;
        m_conns.erase(id);
        m_connOf.erase(it);
        Up()(m_index, CLOSED, id, std::string(), 0, peer);
    }

    void OnControl(Ptr<Socket> s) {
        uint64_t id = m_connOf[PeekPointer(s)];
        Ptr<Packet> p;
        std::string buf;
        while ((p = s->Recv())) {
            size_t at = buf.size();
            buf.resize(at + p->GetSize());
            p->CopyData(reinterpret_cast<uint8_t *>(&buf[at]), p->GetSize());
        }
        if (!buf.empty()) { Up()(m_index, CONTROL, id, buf, 0, m_conns[id].peer); }
    }

    void OnSendSpace(Ptr<Socket> s, uint32_t) {
        auto it = m_connOf.find(PeekPointer(s));
        if (it != m_connOf.end()) { Flush(m_conns[it->second]); }
    }

    void Flush(Conn &c) {
        if (!c.up || c.out.empty()) { return; }
        uint32_t room = c.sock->GetTxAvailable();
        uint32_t n = std::min<size_t>(room, c.out.size());
        if (!n) { return; }
        Ptr<Packet> p = Create<Packet>(reinterpret_cast<const uint8_t *>(c.out.data()), n);
        int sent = c.sock->Send(p);
        if (sent > 0) { c.out.erase(0, sent); }
    }

    Ptr<Node> m_node;
    uint32_t m_index = 0;
    uint16_t m_dataPort = 9910;
    uint16_t m_controlPort = 9911;
    uint32_t m_sendBufPkts = 113;
    Time m_controlRtoMin = MilliSeconds(200);
    Ptr<Socket> m_udp;
    Ptr<Socket> m_listen;
    Ptr<QueueDisc> m_qdisc;
    std::deque<Datagram> m_pending;
    bool m_wantWritable = false;  // the host's driver waits for WRITABLE (WouldBlock)
    std::string m_rxBuf;          // the datagram being received
    DlcpRxPath m_rx;
    uint64_t m_sent = 0, m_received = 0, m_nextConn = 0;
    std::map<uint64_t, Conn> m_conns;
    std::map<Socket *, uint64_t> m_connOf;
};

// Python timers by integer token through one dispatcher (see DlcpHostIo for why).
struct DlcpTimers {
    static std::function<void(uint64_t)> &Up() {
        static std::function<void(uint64_t)> d;
        return d;
    }

    static void SetDispatcher(std::function<void(uint64_t)> d) { Up() = std::move(d); }

    static void Fire(uint64_t token) { Up()(token); }

    // simulated seconds: one call from Python instead of two (Now(), GetSeconds()) and a temporary
    static double Now() { return Simulator::Now().GetSeconds(); }

    // at `t` seconds, rounded up to the simulator's nanosecond: never before the deadline
    static EventId At(double t, uint64_t token) {
        double delay = std::ceil((t - Simulator::Now().GetSeconds()) * 1e9);
        return Simulator::Schedule(NanoSeconds(int64_t(delay > 0 ? delay : 0)), &DlcpTimers::Fire, token);
    }
};

}  // namespace ns3
