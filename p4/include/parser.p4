/* Parser and deparser: Ethernet -> IPv4 -> UDP / TCP ports -> DLCP (UDP destination DLCP_PORT) ->
 * telemetry (flags.TELEMETRY). Anything else is parsed as far as it goes and still forwarded. */
#ifndef DLCP_PARSER_P4
#define DLCP_PARSER_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

parser DlcpParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    /* per-packet metadata is set here rather than in the ingress: assignments in the parser cost
     * bmv2 no table application */
    state start {
        meta.no_route = 0;
        meta.admitted = 0;
        meta.l4_sport = 0;
        meta.l4_dport = 0;
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        /* L4 headers only follow an option-less header of a first (or only) fragment */
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, PROTO_UDP): parse_udp;
            (5, 0, PROTO_TCP): parse_tcp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_sport = hdr.udp.src_port;
        meta.l4_dport = hdr.udp.dst_port;
        transition select(hdr.udp.dst_port) {
            DLCP_PORT: parse_dlcp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        meta.l4_sport = hdr.tcp.src_port;
        meta.l4_dport = hdr.tcp.dst_port;
        transition accept;
    }

    state parse_dlcp {
        packet.extract(hdr.dlcp);
        verify(hdr.dlcp.ver == DLCP_VERSION, error.DlcpBadVersion);
        transition select(hdr.dlcp.flags) {
            DLCP_FLAG_TELEMETRY &&& DLCP_FLAG_TELEMETRY: parse_telemetry;
            default: accept;
        }
    }

    state parse_telemetry {
        packet.extract(hdr.telemetry);
        transition accept;
    }
}

control DlcpDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.tcp);
        packet.emit(hdr.dlcp);
        packet.emit(hdr.telemetry);
    }
}

#endif
