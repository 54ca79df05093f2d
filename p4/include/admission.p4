/* Admission control: per-(egress port, queue) occupancy in a register, charged here when a packet
 * is admitted and given back in the egress when it leaves the queue. Color c > 0 is dropped early
 * once the occupancy reaches K_c; every color is dropped at Qmax. */
#ifndef DLCP_ADMISSION_P4
#define DLCP_ADMISSION_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"
#include "checksums.p4"

/* Shared by the ingress (charge) and the egress (give back), hence declared at the top level.
 * Index: port * N_QUEUES + qid. */
@name(REGISTER_OCCUPANCY)
register<bit<REGISTER_OCCUPANCY_BITS>>(REGISTER_OCCUPANCY_SIZE) occupancy;

control DlcpAdmission(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {

    /* index: (port * N_QUEUES + qid) * N_COLORS + color */
    @name(COUNTER_ADMITTED)
    counter(COUNTER_ADMITTED_SIZE, CounterType.packets_and_bytes) admitted;
    @name(COUNTER_EARLY_DROPS)
    counter(COUNTER_EARLY_DROPS_SIZE, CounterType.packets_and_bytes) early_drops;
    @name(COUNTER_TAIL_DROPS)
    counter(COUNTER_TAIL_DROPS_SIZE, CounterType.packets_and_bytes) tail_drops;

    /* Besides the thresholds, reads the queue's occupancy and picks the threshold of the packet's
     * color: all in the one action bmv2 runs anyway (each extra step would be a table). */
    @name(ACTION_SET_THRESHOLDS)
    action set_thresholds(bit<SET_THRESHOLDS_QMAX_BITS> qmax, bit<SET_THRESHOLDS_K1_BITS> k1,
                          bit<SET_THRESHOLDS_K2_BITS> k2, bit<SET_THRESHOLDS_K3_BITS> k3) {
        meta.qmax = qmax;
        meta.k = meta.color == 1 ? k1 : (meta.color == 2 ? k2 : (meta.color == 3 ? k3 : qmax));
        meta.occ_index = (index_t)standard_metadata.egress_spec * N_QUEUES + (index_t)meta.qid;
        meta.queue_index = meta.occ_index * N_COLORS + (index_t)meta.color;
        occupancy.read(meta.occ, meta.occ_index);
    }

    /* the default action holds the switch-wide thresholds; entries override them per port */
    @name(TABLE_QUEUE_THRESHOLDS)
    table queue_thresholds {
        key = {
            standard_metadata.egress_spec: exact @name(KEY_EGRESS_PORT);
        }
        actions = {
            set_thresholds;
        }
        default_action = set_thresholds(QUEUE_THRESHOLDS_DEFAULT_QMAX, QUEUE_THRESHOLDS_DEFAULT_K1,
                                        QUEUE_THRESHOLDS_DEFAULT_K2, QUEUE_THRESHOLDS_DEFAULT_K3);
        size = TABLE_QUEUE_THRESHOLDS_SIZE;
    }

    /* charge the queue in one action: bmv2 holds the register's lock for the whole action */
    @hidden
    action admit() {
        bit<REGISTER_OCCUPANCY_BITS> occ;
        @atomic {
            occupancy.read(occ, meta.occ_index);
            occupancy.write(meta.occ_index, occ + 1);
        }
        meta.admitted = 1;
        admitted.count(meta.queue_index);
        standard_metadata.priority = meta.qid;
        hdr.ipv4.hdr_checksum = csum_replace2(hdr.ipv4.hdr_checksum,
                                              hdr.ipv4.ttl ++ hdr.ipv4.protocol,
                                              (hdr.ipv4.ttl - 1) ++ hdr.ipv4.protocol);
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    @hidden
    action early_drop() {
        early_drops.count(meta.queue_index);
        mark_to_drop(standard_metadata);
    }

    @hidden
    action tail_drop() {
        tail_drops.count(meta.queue_index);
        mark_to_drop(standard_metadata);
    }

    apply {
        queue_thresholds.apply();
        if (meta.occ >= meta.qmax) {
            tail_drop();
        } else if (meta.color != 0 && meta.occ >= meta.k) {
            early_drop();
        } else {
            admit();
        }
    }
}

/* Egress half: give the slot back when the packet leaves the queue (saturating at 0). */
control DlcpDeparture(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    @hidden
    action release() {
        bit<REGISTER_OCCUPANCY_BITS> occ;
        @atomic {
            occupancy.read(occ, meta.occ_index);
            occupancy.write(meta.occ_index, occ - (bit<REGISTER_OCCUPANCY_BITS>)((bit<1>)(occ != 0)));
        }
    }

    apply {
        if (meta.admitted == 1) {
            release();
        }
    }
}

#endif
