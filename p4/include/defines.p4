/* DLCP switch: types and the constants that are not DLCP's own. The DLCP header, its constants
 * and every control-plane name, size and width are generated from dlcp/wire/layout.py and
 * dlcp/network/pipeline_names.py into generated/ (`make gen`; docs/wire-format.md).
 * Semantics: docs/pipeline.md. */
#ifndef DLCP_DEFINES_P4
#define DLCP_DEFINES_P4

#include "generated/dlcp_wire.p4"
#include "generated/dlcp_pipeline.p4"

typedef bit<SET_NHOP_PORT_BITS>        port_t;
typedef bit<SET_NHOP_GROUP_GROUP_BITS> group_t;
typedef bit<32>                        index_t;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;
const bit<16> DLCP_PORT = DLCP_DATA_PORT;

#endif
