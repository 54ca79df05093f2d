/* DLCP switch, P4_16 for v1model (bmv2 simple_switch_grpc with `--priority-queues 8`).
 *
 * The specification of the DLCP switch pipeline; the built-in switch implements the same
 * semantics (docs/pipeline.md). Control-plane names are fixed with @name(...) from the macros
 * generated from dlcp/network/pipeline_names.py (include/generated/, `make gen`), so that P4Info
 * holds exactly those names, whichever include file a table lives in.
 *
 * Ingress: drop reasons -> routing + load balancing -> classification -> admission -> ECN marking.
 * Egress:  occupancy release -> queue telemetry.
 */
#include <core.p4>
#include <v1model.p4>

#include "include/defines.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/checksums.p4"
#include "include/routing.p4"
#include "include/classification.p4"
#include "include/admission.p4"
#include "include/ecn.p4"
#include "include/telemetry.p4"

control DlcpIngress(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

    /* index: drop reason (DROP_*) */
    @name(COUNTER_DROPS)
    counter(COUNTER_DROPS_SIZE, CounterType.packets_and_bytes) drops;

    DlcpRouting() routing;
    DlcpClassification() classification;
    DlcpAdmission() admission;
    DlcpEcn() ecn;

    /* a dropped packet touches no queue counter and no register */
    @hidden
    action drop_for(index_t reason) {
        drops.count(reason);
        mark_to_drop(standard_metadata);
    }

    apply {
        /* meta.no_route and meta.admitted start at 0 (set by the parser) */
        if (standard_metadata.parser_error != error.NoError) {
            drop_for(DROP_PARSER_ERROR);
        } else if (!hdr.ipv4.isValid()) {
            drop_for(DROP_NOT_IPV4);
        } else if (hdr.ipv4.ttl <= 1) {
            drop_for(DROP_TTL_EXPIRED);
        } else {
            routing.apply(hdr, meta, standard_metadata);
            if (meta.no_route == 1) {
                drop_for(DROP_NO_ROUTE);
            } else {
                classification.apply(hdr, meta, standard_metadata);
                admission.apply(hdr, meta, standard_metadata);
                ecn.apply(hdr, meta, standard_metadata);
            }
        }
    }
}

control DlcpEgress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    DlcpDeparture() departure;
    DlcpTelemetry() telemetry;

    apply {
        departure.apply(hdr, meta, standard_metadata);
        telemetry.apply(hdr, meta, standard_metadata);
    }
}

V1Switch(DlcpParser(),
         DlcpVerifyChecksum(),
         DlcpIngress(),
         DlcpEgress(),
         DlcpComputeChecksum(),
         DlcpDeparser()) main;
