/* Classification: (prio, drop_prec) of a DLCP header, or the IPv4 DSCP, to a queue (qid 0..7, 7
 * served first) and a color (drop precedence 0..3). An empty table is the FIFO baseline. */
#ifndef DLCP_CLASSIFICATION_P4
#define DLCP_CLASSIFICATION_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

control DlcpClassification(inout headers_t hdr, inout metadata_t meta,
                           inout standard_metadata_t standard_metadata) {

    @name(TABLE_CLASSIFY_COUNTER)
    direct_counter(CounterType.packets_and_bytes) classify_hits;

    @name(ACTION_CLASSIFY_FROM_DLCP)
    action classify_from_dlcp() {
        meta.qid = hdr.dlcp.prio;
        meta.color = hdr.dlcp.drop_prec;
    }

    /* DSCP = (prio << 3) | (drop_prec << 1) */
    @name(ACTION_CLASSIFY_FROM_DSCP)
    action classify_from_dscp() {
        meta.qid = hdr.ipv4.dscp[DSCP_PRIO_HI:DSCP_PRIO_LO];
        meta.color = hdr.ipv4.dscp[DSCP_DROP_PREC_HI:DSCP_DROP_PREC_LO];
    }

    @name(ACTION_SET_CLASS)
    action set_class(bit<SET_CLASS_QID_BITS> qid, bit<SET_CLASS_COLOR_BITS> color) {
        meta.qid = qid;
        meta.color = color;
    }

    @name(TABLE_CLASSIFY)
    table classify {
        key = {
            hdr.dlcp.isValid(): exact @name(KEY_DLCP_VALID);
            hdr.dlcp.prio: ternary @name(KEY_DLCP_PRIO);
            hdr.dlcp.drop_prec: ternary @name(KEY_DLCP_DROP_PREC);
            hdr.ipv4.dscp: ternary @name(KEY_DSCP);
        }
        actions = {
            classify_from_dlcp;
            classify_from_dscp;
            set_class;
        }
        default_action = set_class(CLASSIFY_DEFAULT_QID, CLASSIFY_DEFAULT_COLOR);
        counters = classify_hits;
        size = TABLE_CLASSIFY_SIZE;
    }

    apply {
        classify.apply();
    }
}

#endif
