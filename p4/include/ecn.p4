/* ECN marking for senders with congestion control (DCTCP-style; docs/pipeline.md, "ECN").
 *
 * An ECN-capable packet (ECT(0) or ECT(1)) admitted while its queue already held K or more packets
 * leaves marked CE. K comes from `ecn_threshold`, per egress port and queue (ternary: an entry may
 * name a port, a queue, or both; the default action holds the switch-wide K). The occupancy is the
 * one admission read (meta.occ, before this packet), so marking and early dropping see the same
 * queue. Counter `ce_marked` counts the packets this switch marked, per port and queue. Names,
 * sizes and the default K are generated from dlcp/network/pipeline_names.py. */
#ifndef DLCP_ECN_P4
#define DLCP_ECN_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"
#include "checksums.p4"

control DlcpEcn(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {

    /* index: port * N_QUEUES + qid (meta.occ_index) */
    @name(COUNTER_CE_MARKED)
    counter(COUNTER_CE_MARKED_SIZE, CounterType.packets_and_bytes) ce_marked;

    bit<SET_ECN_THRESHOLD_K_BITS> ecn_k = ECN_THRESHOLD_DEFAULT_K;

    @name(ACTION_SET_ECN_THRESHOLD)
    action set_ecn_threshold(bit<SET_ECN_THRESHOLD_K_BITS> k) {
        ecn_k = k;
    }

    @name(TABLE_ECN_THRESHOLD)
    table ecn_threshold {
        key = {
            standard_metadata.egress_spec: ternary @name(KEY_EGRESS_PORT);
            meta.qid: ternary @name(KEY_QID);
        }
        actions = {
            set_ecn_threshold;
        }
        default_action = set_ecn_threshold(ECN_THRESHOLD_DEFAULT_K);
        size = TABLE_ECN_THRESHOLD_SIZE;
    }

    /* CE in place, the IPv4 checksum patched over the first header word (version, IHL, DSCP, ECN) */
    @hidden
    action mark() {
        hdr.ipv4.hdr_checksum = csum_replace2(hdr.ipv4.hdr_checksum,
                                              hdr.ipv4.version ++ hdr.ipv4.ihl ++ hdr.ipv4.dscp ++ hdr.ipv4.ecn,
                                              hdr.ipv4.version ++ hdr.ipv4.ihl ++ hdr.ipv4.dscp ++ ECN_CE);
        hdr.ipv4.ecn = ECN_CE;
        ce_marked.count(meta.occ_index);
    }

    apply {
        if (meta.admitted == 1 && (hdr.ipv4.ecn == ECN_ECT0 || hdr.ipv4.ecn == ECN_ECT1)) {
            ecn_threshold.apply();
            if (meta.occ >= ecn_k) {
                mark();
            }
        }
    }
}

#endif
