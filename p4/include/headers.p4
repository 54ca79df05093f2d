/* Headers and metadata. The DLCP header (dlcp_t) and its telemetry block (dlcp_telemetry_t) are
 * generated from dlcp/wire/layout.py into generated/dlcp_wire.p4 (included by defines.p4). */
#ifndef DLCP_HEADERS_P4
#define DLCP_HEADERS_P4

#include "defines.p4"

header ethernet_t {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<6>  dscp;      /* DLCP senders put (prio << 3) | (drop_prec << 1) here */
    bit<2>  ecn;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

/* Only the ports of TCP are needed (flow hash); the rest of the segment stays payload. */
header tcp_ports_t {
    bit<16> src_port;
    bit<16> dst_port;
}

struct headers_t {
    ethernet_t       ethernet;
    ipv4_t           ipv4;
    udp_t            udp;
    tcp_ports_t      tcp;
    dlcp_t           dlcp;
    dlcp_telemetry_t telemetry;
}

/* Per-packet state. bmv2 carries user metadata from ingress to egress, so the egress finds the
 * occupancy slot the ingress charged. */
struct metadata_t {
    bit<1>  no_route;     /* routing found no usable next hop */
    bit<1>  admitted;     /* admission charged occupancy[occ_index]; egress gives it back */
    group_t nhop_group;
    bit<SET_NHOP_GROUP_SIZE_BITS> group_size;
    bit<SET_NHOP_GROUP_SIZE_BITS> member;
    bit<SET_LB_MODE_MODE_BITS> lb_mode;
    bit<16> l4_sport;
    bit<16> l4_dport;
    bit<SET_CLASS_QID_BITS> qid;
    bit<SET_CLASS_COLOR_BITS> color;
    bit<SET_THRESHOLDS_QMAX_BITS> qmax;  /* admission thresholds of this packet's port */
    bit<SET_THRESHOLDS_QMAX_BITS> k;     /* the early-drop threshold of its color (qmax for color 0) */
    bit<REGISTER_OCCUPANCY_BITS> occ;    /* occupancy[occ_index] when it arrived */
    index_t occ_index;    /* port * N_QUEUES + qid */
    index_t queue_index;  /* occ_index * N_COLORS + color */
}

error {
    DlcpBadVersion
}

#endif
