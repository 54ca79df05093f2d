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
    apply {
        if (hdr.telemetry.isValid()) {
            bit<64> old_words = hdr.telemetry.hops ++ hdr.telemetry.reserved
                                ++ hdr.telemetry.max_enq_qdepth ++ hdr.telemetry.sum_deq_timedelta_us;
            /* bmv2's enq_qdepth: packets in this packet's priority queue when it was enqueued */
            bit<16> depth = 0xffff;
            if (standard_metadata.enq_qdepth < 0xffff) {
                depth = (bit<16>)standard_metadata.enq_qdepth;
            }
            hdr.telemetry.hops = hdr.telemetry.hops + 1;
            if (depth > hdr.telemetry.max_enq_qdepth) {
                hdr.telemetry.max_enq_qdepth = depth;
            }
            hdr.telemetry.sum_deq_timedelta_us = hdr.telemetry.sum_deq_timedelta_us
                                                 + standard_metadata.deq_timedelta;
            /* a zero UDP checksum means "none" and stays zero; a computed zero is sent as 0xffff */
            if (hdr.udp.checksum != 0) {
                bit<64> new_words = hdr.telemetry.hops ++ hdr.telemetry.reserved
                                    ++ hdr.telemetry.max_enq_qdepth ++ hdr.telemetry.sum_deq_timedelta_us;
                hdr.udp.checksum = csum_replace8(hdr.udp.checksum, old_words, new_words);
                if (hdr.udp.checksum == 0) {
                    hdr.udp.checksum = 0xffff;
                }
            }
        }
    }
}

#endif
