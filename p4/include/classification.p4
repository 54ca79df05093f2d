/* Classification: (prio, drop_prec) of a DLCP header, or the IPv4 DSCP, to a queue (qid 0..7, 7
 * served first) and a color (drop precedence 0..3). An empty table is the FIFO baseline. */
#ifndef DLCP_CLASSIFICATION_P4
#define DLCP_CLASSIFICATION_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

control DlcpClassification(inout headers_t hdr, inout metadata_t meta,
                           inout standard_metadata_t standard_metadata) {

    @name(".DlcpIngress.classify_hits")
    direct_counter(CounterType.packets_and_bytes) classify_hits;

    @name(".DlcpIngress.classify_from_dlcp")
    action classify_from_dlcp() {
        meta.qid = hdr.dlcp.prio;
        meta.color = hdr.dlcp.drop_prec;
    }

    /* DSCP = (prio << 3) | (drop_prec << 1) */
    @name(".DlcpIngress.classify_from_dscp")
    action classify_from_dscp() {
        meta.qid = hdr.ipv4.dscp[5:3];
        meta.color = hdr.ipv4.dscp[2:1];
    }

    @name(".DlcpIngress.set_class")
    action set_class(bit<3> qid, bit<2> color) {
        meta.qid = qid;
        meta.color = color;
    }

    @name(".DlcpIngress.classify")
    table classify {
        key = {
            hdr.dlcp.isValid(): exact @name("dlcp_valid");
            hdr.dlcp.prio: ternary @name("dlcp_prio");
            hdr.dlcp.drop_prec: ternary @name("dlcp_drop_prec");
            hdr.ipv4.dscp: ternary @name("dscp");
        }
        actions = {
            classify_from_dlcp;
            classify_from_dscp;
            set_class;
        }
        default_action = set_class(0, 0);
        counters = classify_hits;
        size = CLASSIFY_SIZE;
    }

    apply {
        classify.apply();
    }
}

#endif
