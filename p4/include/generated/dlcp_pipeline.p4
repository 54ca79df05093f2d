/* Generated from dlcp/network/pipeline_names.py by `python -m dlcp.codegen` (make gen): do not edit. */
#ifndef DLCP_GENERATED_PIPELINE_P4
#define DLCP_GENERATED_PIPELINE_P4

/* sizes */
const bit<32> MAX_PORTS = 64;
const bit<32> N_QUEUES = 8;
const bit<32> N_COLORS = 4;
const bit<32> MAX_GROUPS = 1024;

/* drop reasons: index of the drops counter */
const bit<32> DROP_PARSER_ERROR = 0;
const bit<32> DROP_NOT_IPV4 = 1;
const bit<32> DROP_NO_ROUTE = 2;
const bit<32> DROP_TTL_EXPIRED = 3;

/* load-balancing modes: values of set_lb_mode(mode) */
const bit<2> LB_PER_FLOW = 0;
const bit<2> LB_SPRAY_RANDOM = 1;
const bit<2> LB_SPRAY_RR = 2;

/* default action parameters, until the control plane sets others */
const bit<2> LB_CONFIG_DEFAULT_MODE = 0;
const bit<3> CLASSIFY_DEFAULT_QID = 0;
const bit<2> CLASSIFY_DEFAULT_COLOR = 0;
const bit<32> QUEUE_THRESHOLDS_DEFAULT_QMAX = 64;
const bit<32> QUEUE_THRESHOLDS_DEFAULT_K1 = 48;
const bit<32> QUEUE_THRESHOLDS_DEFAULT_K2 = 32;
const bit<32> QUEUE_THRESHOLDS_DEFAULT_K3 = 16;

/* control-plane names: @name(...) of tables, keys, direct counters; table sizes */
#define TABLE_IPV4_LPM                       ".DlcpIngress.ipv4_lpm"
#define TABLE_IPV4_LPM_SIZE                  1024
#define TABLE_IPV4_LPM_COUNTER               ".DlcpIngress.ipv4_lpm_hits"
#define KEY_IPV4_DST                         "ipv4_dst"
#define TABLE_NHOP                           ".DlcpIngress.nhop"
#define TABLE_NHOP_SIZE                      4096
#define KEY_NHOP_GROUP                       "nhop_group"
#define KEY_NHOP_MEMBER                      "nhop_member"
#define TABLE_LB_CONFIG                      ".DlcpIngress.lb_config"
#define TABLE_LB_CONFIG_SIZE                 1
#define TABLE_CLASSIFY                       ".DlcpIngress.classify"
#define TABLE_CLASSIFY_SIZE                  64
#define TABLE_CLASSIFY_COUNTER               ".DlcpIngress.classify_hits"
#define KEY_DLCP_VALID                       "dlcp_valid"
#define KEY_DLCP_PRIO                        "dlcp_prio"
#define KEY_DLCP_DROP_PREC                   "dlcp_drop_prec"
#define KEY_DSCP                             "dscp"
#define TABLE_QUEUE_THRESHOLDS               ".DlcpIngress.queue_thresholds"
#define TABLE_QUEUE_THRESHOLDS_SIZE          64
#define KEY_EGRESS_PORT                      "egress_port"

/* actions and the widths of their parameters */
#define ACTION_SET_NHOP_GROUP                ".DlcpIngress.set_nhop_group"
#define SET_NHOP_GROUP_GROUP_BITS            16
#define SET_NHOP_GROUP_SIZE_BITS             16
#define ACTION_SET_NHOP                      ".DlcpIngress.set_nhop"
#define SET_NHOP_DMAC_BITS                   48
#define SET_NHOP_PORT_BITS                   9
#define ACTION_MARK_NO_ROUTE                 ".DlcpIngress.mark_no_route"
#define ACTION_SET_LB_MODE                   ".DlcpIngress.set_lb_mode"
#define SET_LB_MODE_MODE_BITS                2
#define ACTION_CLASSIFY_FROM_DLCP            ".DlcpIngress.classify_from_dlcp"
#define ACTION_CLASSIFY_FROM_DSCP            ".DlcpIngress.classify_from_dscp"
#define ACTION_SET_CLASS                     ".DlcpIngress.set_class"
#define SET_CLASS_QID_BITS                   3
#define SET_CLASS_COLOR_BITS                 2
#define ACTION_SET_THRESHOLDS                ".DlcpIngress.set_thresholds"
#define SET_THRESHOLDS_QMAX_BITS             32
#define SET_THRESHOLDS_K1_BITS               32
#define SET_THRESHOLDS_K2_BITS               32
#define SET_THRESHOLDS_K3_BITS               32

/* registers and counters: names, widths, sizes */
#define REGISTER_OCCUPANCY                   ".DlcpIngress.occupancy"
#define REGISTER_OCCUPANCY_BITS              32
#define REGISTER_OCCUPANCY_SIZE              512
#define REGISTER_RR_NEXT                     ".DlcpIngress.rr_next"
#define REGISTER_RR_NEXT_BITS                16
#define REGISTER_RR_NEXT_SIZE                1024
#define COUNTER_ADMITTED                     ".DlcpIngress.admitted"  /* index: (port * N_QUEUES + qid) * N_COLORS + color */
#define COUNTER_ADMITTED_SIZE                2048
#define COUNTER_EARLY_DROPS                  ".DlcpIngress.early_drops"  /* index: (port * N_QUEUES + qid) * N_COLORS + color */
#define COUNTER_EARLY_DROPS_SIZE             2048
#define COUNTER_TAIL_DROPS                   ".DlcpIngress.tail_drops"  /* index: (port * N_QUEUES + qid) * N_COLORS + color */
#define COUNTER_TAIL_DROPS_SIZE              2048
#define COUNTER_DROPS                        ".DlcpIngress.drops"  /* index: drop reason */
#define COUNTER_DROPS_SIZE                   8

#endif
