/* Headers and metadata. The DLCP header and its telemetry block mirror dlcp/wire/header.py FIELD_BITS and
 * TELEMETRY_FIELD_BITS field by field (a test compares them). */
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

/* 24 bytes, big-endian: dlcp/wire/header.py */
header dlcp_t {
    bit<4>  ver;
    bit<4>  type;
    bit<3>  prio;
    bit<2>  drop_prec;
    bit<3>  phase;
    bit<8>  job_id;
    bit<8>  src_rank;
    bit<16> iter;
    bit<16> msg_id;
    bit<16> layer_id;
    bit<8>  mag_class;
    bit<8>  flags;
    bit<32> seq;
    bit<32> n_pkts;
    bit<32> offset;
}

/* 8 bytes after the DLCP header when flags.TELEMETRY is set; filled in place by every switch */
header dlcp_telemetry_t {
    bit<8>  hops;
    bit<8>  reserved;
    bit<16> max_enq_qdepth;
    bit<32> sum_deq_timedelta_us;
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
    bit<16> group_size;
    bit<16> member;
    bit<2>  lb_mode;
    bit<16> l4_sport;
    bit<16> l4_dport;
    bit<3>  qid;
    bit<2>  color;
    bit<32> qmax;         /* admission thresholds of this packet's port */
    bit<32> k;            /* the early-drop threshold of its color (qmax for color 0) */
    bit<32> occ;          /* occupancy[occ_index] when it arrived */
    index_t occ_index;    /* port * N_QUEUES + qid */
    index_t queue_index;  /* occ_index * N_COLORS + color */
}

error {
    DlcpBadVersion
}

#endif
