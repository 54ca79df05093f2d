/* Routing and load balancing: IPv4 LPM to a next-hop group, then one member of the group, chosen
 * per packet for DLCP (spray: random or round-robin, as DlcpIngress.lb_config says) and per flow
 * (CRC-16 of the 5-tuple) for everything else. */
#ifndef DLCP_ROUTING_P4
#define DLCP_ROUTING_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

control DlcpRouting(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

    @name(TABLE_IPV4_LPM_COUNTER)
    direct_counter(CounterType.packets_and_bytes) ipv4_lpm_hits;

    /* next round-robin value per group; wraps */
    @name(REGISTER_RR_NEXT)
    register<bit<REGISTER_RR_NEXT_BITS>>(REGISTER_RR_NEXT_SIZE) rr_next;

    /* the ingress drops the packet afterwards, counting drop reason no_route */
    @name(ACTION_MARK_NO_ROUTE)
    action mark_no_route() {
        meta.no_route = 1;
    }

    @name(ACTION_SET_NHOP_GROUP)
    action set_nhop_group(bit<SET_NHOP_GROUP_GROUP_BITS> group, bit<SET_NHOP_GROUP_SIZE_BITS> size) {
        meta.nhop_group = group;
        meta.group_size = size;
    }

    /* a default route is a 0.0.0.0/0 entry, so the miss action stays fixed */
    @name(TABLE_IPV4_LPM)
    table ipv4_lpm {
        key = {
            hdr.ipv4.dst_addr: lpm @name(KEY_IPV4_DST);
        }
        actions = {
            set_nhop_group;
            mark_no_route;
        }
        const default_action = mark_no_route();
        counters = ipv4_lpm_hits;
        size = TABLE_IPV4_LPM_SIZE;
    }

    @name(ACTION_SET_LB_MODE)
    action set_lb_mode(bit<SET_LB_MODE_MODE_BITS> mode) {
        meta.lb_mode = mode;
    }

    /* keyless: the control plane sets the mode as this table's default action */
    @name(TABLE_LB_CONFIG)
    table lb_config {
        actions = {
            set_lb_mode;
        }
        default_action = set_lb_mode(LB_CONFIG_DEFAULT_MODE);
        size = TABLE_LB_CONFIG_SIZE;
    }

    @name(ACTION_SET_NHOP)
    action set_nhop(bit<SET_NHOP_DMAC_BITS> dmac, bit<SET_NHOP_PORT_BITS> port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
        hdr.ethernet.dst_addr = dmac;
    }

    @name(TABLE_NHOP)
    table nhop {
        key = {
            meta.nhop_group: exact @name(KEY_NHOP_GROUP);
            meta.member: exact @name(KEY_NHOP_MEMBER);
        }
        actions = {
            set_nhop;
            mark_no_route;
        }
        const default_action = mark_no_route();
        size = TABLE_NHOP_SIZE;
    }

    @hidden
    action pick_random() {
        random(meta.member, (bit<16>)0, meta.group_size - 1);
    }

    /* read-modify-write of the group's counter in one action: bmv2 holds the register's lock for
     * the whole action */
    @hidden
    action pick_round_robin() {
        bit<REGISTER_RR_NEXT_BITS> rr;
        @atomic {
            rr_next.read(rr, (index_t)meta.nhop_group);
            rr_next.write((index_t)meta.nhop_group, rr + 1);
        }
        /* rr mod size: bmv2 takes the hash modulo its last argument, and p4c only folds `%` on
         * compile-time constants */
        hash(meta.member, HashAlgorithm.identity, (bit<16>)0, { rr }, meta.group_size);
    }

    @hidden
    action pick_by_flow_hash() {
        hash(meta.member, HashAlgorithm.crc16, (bit<16>)0,
             { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol, meta.l4_sport, meta.l4_dport },
             meta.group_size);
    }

    apply {
        /* meta.l4_sport / l4_dport: set by the parser (0 without UDP/TCP) */
        ipv4_lpm.apply();
        /* out-of-range groups would index past rr_next; an empty group has no member */
        if (meta.no_route == 0 && ((index_t)meta.nhop_group >= MAX_GROUPS || meta.group_size == 0)) {
            meta.no_route = 1;
        }
        if (meta.no_route == 0) {
            lb_config.apply();
            if (hdr.dlcp.isValid() && meta.lb_mode == LB_SPRAY_RANDOM) {
                pick_random();
            } else if (hdr.dlcp.isValid() && meta.lb_mode == LB_SPRAY_RR) {
                pick_round_robin();
            } else {
                pick_by_flow_hash();
            }
            nhop.apply();
            /* ports past MAX_PORTS would index past the queue registers and counters */
            if (meta.no_route == 0 && (index_t)standard_metadata.egress_spec >= MAX_PORTS) {
                meta.no_route = 1;
            }
        }
    }
}

#endif
