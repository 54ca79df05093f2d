/* ECN marking for senders with congestion control (DCTCP-style; docs/pipeline.md, "ECN").
 *
 * An ECN-capable packet (ECT(0) or ECT(1)) admitted while its queue already held K or more packets
 * leaves marked CE. K comes from `ecn_threshold`, per egress port and queue (ternary: an entry may
 * name a port, a queue, or both; the default action holds the switch-wide K). The occupancy is the
 * one admission read (meta.occ, before this packet), so marking and early dropping see the same
 * queue. Counter `ce_marked` counts the packets this switch marked, per port and queue. */
#ifndef DLCP_ECN_P4
#define DLCP_ECN_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"
#include "checksums.p4"

const bit<32> DEFAULT_ECN_K = 10;         /* packets; ECN_NEVER disables marking */
const bit<32> ECN_NEVER = 0xffffffff;
const bit<32> CE_COUNTER_SIZE = 512;      /* MAX_PORTS * N_QUEUES, index port * N_QUEUES + qid */

control DlcpEcn(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {

    @name(".DlcpIngress.ce_marked")
    counter(CE_COUNTER_SIZE, CounterType.packets_and_bytes) ce_marked;

    bit<32> ecn_k = ECN_NEVER;

    @name(".DlcpIngress.set_ecn_threshold")
    action set_ecn_threshold(bit<32> k) {
        ecn_k = k;
    }

    @name(".DlcpIngress.ecn_threshold")
    table ecn_threshold {
        key = {
            standard_metadata.egress_spec: ternary @name("egress_port");
            meta.qid: ternary @name("qid");
        }
        actions = {
            set_ecn_threshold;
        }
        default_action = set_ecn_threshold(DEFAULT_ECN_K);
        size = 64;
    }

    /* CE in place, the IPv4 checksum patched over the first header word (version, IHL, DSCP, ECN) */
    @hidden
    action mark() {
        hdr.ipv4.hdr_checksum = csum_replace2(hdr.ipv4.hdr_checksum,
                                              hdr.ipv4.version ++ hdr.ipv4.ihl ++ hdr.ipv4.dscp ++ hdr.ipv4.ecn,
                                              hdr.ipv4.version ++ hdr.ipv4.ihl ++ hdr.ipv4.dscp ++ 2w3);
        hdr.ipv4.ecn = 3;
        ce_marked.count(meta.occ_index);
    }

    apply {
        if (meta.admitted == 1 && (hdr.ipv4.ecn == 1 || hdr.ipv4.ecn == 2)) {
            ecn_threshold.apply();
            if (meta.occ >= ecn_k) {
                mark();
            }
        }
    }
}

#endif
