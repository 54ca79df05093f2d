/* Queue telemetry (in the spirit of the p4lang tutorials' mri.p4, but in place: the sender reserves
 * a zeroed block, each switch updates it, the frame length never changes). */
#ifndef DLCP_TELEMETRY_P4
#define DLCP_TELEMETRY_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"
#include "checksums.p4"

control DlcpTelemetry(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    /* one action (bmv2 makes every statement outside an action a table of its own) */
    @hidden
    action stamp() {
        bit<64> old_words = hdr.telemetry.hops ++ hdr.telemetry.reserved
                            ++ hdr.telemetry.max_enq_qdepth ++ hdr.telemetry.sum_deq_timedelta_us;
        /* bmv2's enq_qdepth: packets in this packet's priority queue when it was enqueued */
        bit<16> depth = standard_metadata.enq_qdepth < 0xffff ? (bit<16>)standard_metadata.enq_qdepth : 0xffff;
        hdr.telemetry.hops = hdr.telemetry.hops + 1;
        hdr.telemetry.max_enq_qdepth = depth > hdr.telemetry.max_enq_qdepth ? depth : hdr.telemetry.max_enq_qdepth;
        hdr.telemetry.sum_deq_timedelta_us = hdr.telemetry.sum_deq_timedelta_us + standard_metadata.deq_timedelta;
        bit<64> new_words = hdr.telemetry.hops ++ hdr.telemetry.reserved
                            ++ hdr.telemetry.max_enq_qdepth ++ hdr.telemetry.sum_deq_timedelta_us;
        /* a zero UDP checksum means "none" and stays zero; a computed zero is sent as 0xffff */
        bit<16> csum = csum_replace8(hdr.udp.checksum, old_words, new_words);
        hdr.udp.checksum = hdr.udp.checksum == 0 ? 16w0 : (csum == 0 ? 16w0xffff : csum);
    }

    apply {
        if (hdr.telemetry.isValid()) {
            stamp();
        }
    }
}

#endif
