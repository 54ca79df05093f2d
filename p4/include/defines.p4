/* DLCP switch: constants and sizes. dlcp/network/pipeline_names.py and dlcp/wire/header.py hold the same values (a test
 * parses this file and compares). Semantics: docs/pipeline.md. */
#ifndef DLCP_DEFINES_P4
#define DLCP_DEFINES_P4

/* The DLCP data port can be moved at build time: `dlcp build --data-port N` passes
 * -DDLCP_DATA_PORT=N to p4c. */
#ifndef DLCP_DATA_PORT
#define DLCP_DATA_PORT 9910
#endif

typedef bit<9>  port_t;
typedef bit<16> group_t;
typedef bit<32> index_t;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;
const bit<16> DLCP_PORT = DLCP_DATA_PORT;

const bit<4>  DLCP_VERSION = 1;
const bit<8>  DLCP_FLAG_TELEMETRY = 0x04;

/* sizes (dlcp/network/pipeline_names.py) */
const bit<32> MAX_PORTS = 64;      /* ports 0..63: Mininet interface sN-ethK is port K */
const bit<32> N_QUEUES = 8;        /* strict-priority queues per port; 7 is served first */
const bit<32> N_COLORS = 4;        /* drop precedences */
const bit<32> MAX_GROUPS = 1024;   /* next-hop groups */
const bit<32> OCCUPANCY_SIZE = 512;          /* MAX_PORTS * N_QUEUES */
const bit<32> QUEUE_COUNTER_SIZE = 2048;     /* MAX_PORTS * N_QUEUES * N_COLORS */
const bit<32> DROP_COUNTER_SIZE = 8;

/* drop reasons: index of DlcpIngress.drops */
const bit<32> DROP_PARSER_ERROR = 0;
const bit<32> DROP_NOT_IPV4 = 1;
const bit<32> DROP_NO_ROUTE = 2;
const bit<32> DROP_TTL_EXPIRED = 3;

/* load-balancing modes (DlcpIngress.set_lb_mode) */
const bit<2>  LB_PER_FLOW = 0;
const bit<2>  LB_SPRAY_RANDOM = 1;
const bit<2>  LB_SPRAY_RR = 2;

/* admission thresholds in packets, until the control plane sets others */
const bit<32> DEFAULT_QMAX = 64;
const bit<32> DEFAULT_K1 = 48;
const bit<32> DEFAULT_K2 = 32;
const bit<32> DEFAULT_K3 = 16;

/* table sizes */
const int IPV4_LPM_SIZE = 1024;
const int NHOP_SIZE = 4096;
const int CLASSIFY_SIZE = 64;

#endif
