/* Generated from dlcp/wire/layout.py, dlcp/network/pipeline_names.py and dlcp/queueing by `python -m dlcp.codegen` (make gen): do not edit. */
#ifndef DLCP_WIRE_H
#define DLCP_WIRE_H

/* a frame: Ethernet, IPv4 (transport headers only behind a 20-byte header), UDP, DLCP */
#define ETH_LEN                              14
#define L4_OFF                               34
#define DLCP_OFF                             42
#define DLCP_DATA_PORT                       9910

/* DLCP header: each field's word starts at byte _OFF (_SIZE bytes, big-endian); the field is
 * (word >> _SHIFT) & _MASK */
#define DLCP_VERSION                         1
#define DLCP_HEADER_LEN                      24
#define DLCP_VER_OFF                         0
#define DLCP_VER_SIZE                        1
#define DLCP_VER_SHIFT                       4
#define DLCP_VER_MASK                        0xf
#define DLCP_TYPE_OFF                        0
#define DLCP_TYPE_SIZE                       1
#define DLCP_TYPE_SHIFT                      0
#define DLCP_TYPE_MASK                       0xf
#define DLCP_PRIO_OFF                        1
#define DLCP_PRIO_SIZE                       1
#define DLCP_PRIO_SHIFT                      5
#define DLCP_PRIO_MASK                       0x7
#define DLCP_DROP_PREC_OFF                   1
#define DLCP_DROP_PREC_SIZE                  1
#define DLCP_DROP_PREC_SHIFT                 3
#define DLCP_DROP_PREC_MASK                  0x3
#define DLCP_PHASE_OFF                       1
#define DLCP_PHASE_SIZE                      1
#define DLCP_PHASE_SHIFT                     0
#define DLCP_PHASE_MASK                      0x7
#define DLCP_JOB_ID_OFF                      2
#define DLCP_JOB_ID_SIZE                     1
#define DLCP_JOB_ID_SHIFT                    0
#define DLCP_JOB_ID_MASK                     0xff
#define DLCP_SRC_RANK_OFF                    3
#define DLCP_SRC_RANK_SIZE                   1
#define DLCP_SRC_RANK_SHIFT                  0
#define DLCP_SRC_RANK_MASK                   0xff
#define DLCP_ITER_OFF                        4
#define DLCP_ITER_SIZE                       2
#define DLCP_ITER_SHIFT                      0
#define DLCP_ITER_MASK                       0xffff
#define DLCP_MSG_ID_OFF                      6
#define DLCP_MSG_ID_SIZE                     2
#define DLCP_MSG_ID_SHIFT                    0
#define DLCP_MSG_ID_MASK                     0xffff
#define DLCP_LAYER_ID_OFF                    8
#define DLCP_LAYER_ID_SIZE                   2
#define DLCP_LAYER_ID_SHIFT                  0
#define DLCP_LAYER_ID_MASK                   0xffff
#define DLCP_MAG_CLASS_OFF                   10
#define DLCP_MAG_CLASS_SIZE                  1
#define DLCP_MAG_CLASS_SHIFT                 0
#define DLCP_MAG_CLASS_MASK                  0xff
#define DLCP_FLAGS_OFF                       11
#define DLCP_FLAGS_SIZE                      1
#define DLCP_FLAGS_SHIFT                     0
#define DLCP_FLAGS_MASK                      0xff
#define DLCP_SEQ_OFF                         12
#define DLCP_SEQ_SIZE                        4
#define DLCP_SEQ_SHIFT                       0
#define DLCP_SEQ_MASK                        0xffffffff
#define DLCP_N_PKTS_OFF                      16
#define DLCP_N_PKTS_SIZE                     4
#define DLCP_N_PKTS_SHIFT                    0
#define DLCP_N_PKTS_MASK                     0xffffffff
#define DLCP_OFFSET_OFF                      20
#define DLCP_OFFSET_SIZE                     4
#define DLCP_OFFSET_SHIFT                    0
#define DLCP_OFFSET_MASK                     0xffffffff
#define DLCP_TYPE_DATA                       0
#define DLCP_TYPE_RETX                       1
#define DLCP_TYPE_PARAM                      2
#define DLCP_TYPE_PROBE                      3
#define DLCP_PHASE_PUSH                      0
#define DLCP_PHASE_PULL                      1
#define DLCP_PHASE_RS                        2
#define DLCP_PHASE_AG                        3
#define DLCP_PHASE_P2P                       4
#define DLCP_FLAG_LAST                       0x01
#define DLCP_FLAG_PROTECTED                  0x02
#define DLCP_FLAG_TELEMETRY                  0x04

/* telemetry block (after the header when DLCP_FLAG_TELEMETRY is set) and PROBE body */
#define DLCP_TELEMETRY_LEN                   8
#define DLCP_TEL_HOPS_OFF                    0
#define DLCP_TEL_HOPS_SIZE                   1
#define DLCP_TEL_HOPS_SHIFT                  0
#define DLCP_TEL_HOPS_MASK                   0xff
#define DLCP_TEL_RESERVED_OFF                1
#define DLCP_TEL_RESERVED_SIZE               1
#define DLCP_TEL_RESERVED_SHIFT              0
#define DLCP_TEL_RESERVED_MASK               0xff
#define DLCP_TEL_MAX_ENQ_QDEPTH_OFF          2
#define DLCP_TEL_MAX_ENQ_QDEPTH_SIZE         2
#define DLCP_TEL_MAX_ENQ_QDEPTH_SHIFT        0
#define DLCP_TEL_MAX_ENQ_QDEPTH_MASK         0xffff
#define DLCP_TEL_SUM_DEQ_TIMEDELTA_US_OFF    4
#define DLCP_TEL_SUM_DEQ_TIMEDELTA_US_SIZE   4
#define DLCP_TEL_SUM_DEQ_TIMEDELTA_US_SHIFT  0
#define DLCP_TEL_SUM_DEQ_TIMEDELTA_US_MASK   0xffffffff
#define DLCP_PROBE_LEN                       8
#define DLCP_PROBE_ROUND_OFF                 0
#define DLCP_PROBE_ROUND_SIZE                1
#define DLCP_PROBE_ROUND_SHIFT               0
#define DLCP_PROBE_ROUND_MASK                0xff
#define DLCP_PROBE_ATTEMPT_OFF               1
#define DLCP_PROBE_ATTEMPT_SIZE              1
#define DLCP_PROBE_ATTEMPT_SHIFT             0
#define DLCP_PROBE_ATTEMPT_MASK              0xff
#define DLCP_PROBE_RESERVED_OFF              2
#define DLCP_PROBE_RESERVED_SIZE             2
#define DLCP_PROBE_RESERVED_SHIFT            0
#define DLCP_PROBE_RESERVED_MASK             0xffff
#define DLCP_PROBE_ROUND_PKTS_OFF            4
#define DLCP_PROBE_ROUND_PKTS_SIZE           4
#define DLCP_PROBE_ROUND_PKTS_SHIFT          0
#define DLCP_PROBE_ROUND_PKTS_MASK           0xffffffff

/* IPv4 DSCP of a DLCP packet */
#define DSCP_PRIO_SHIFT                      3
#define DSCP_DROP_PREC_SHIFT                 1

/* ECN codepoints of the IPv4 TOS byte's two low bits */
#define ECN_MASK                             3
#define ECN_NOT_ECT                          0
#define ECN_ECT1                             1
#define ECN_ECT0                             2
#define ECN_CE                               3

/* pipeline sizes, drop reasons, load-balancing modes, default action parameters */
#define MAX_PORTS                            64
#define N_QUEUES                             8
#define N_COLORS                             4
#define MAX_GROUPS                           1024
#define DROP_PARSER_ERROR                    0
#define DROP_NOT_IPV4                        1
#define DROP_NO_ROUTE                        2
#define DROP_TTL_EXPIRED                     3
#define LB_PER_FLOW                          0
#define LB_SPRAY_RANDOM                      1
#define LB_SPRAY_RR                          2
#define LB_CONFIG_DEFAULT_MODE               0
#define CLASSIFY_DEFAULT_QID                 0
#define CLASSIFY_DEFAULT_COLOR               0
#define QUEUE_THRESHOLDS_DEFAULT_QMAX        64
#define QUEUE_THRESHOLDS_DEFAULT_K1          48
#define QUEUE_THRESHOLDS_DEFAULT_K2          32
#define QUEUE_THRESHOLDS_DEFAULT_K3          16
#define ECN_THRESHOLD_DEFAULT_K              10

/* registers and counters: widths and sizes */
#define REGISTER_OCCUPANCY_BITS              32
#define REGISTER_OCCUPANCY_SIZE              512
#define REGISTER_RR_NEXT_BITS                16
#define REGISTER_RR_NEXT_SIZE                1024
#define COUNTER_ADMITTED_SIZE                2048
#define COUNTER_EARLY_DROPS_SIZE             2048
#define COUNTER_TAIL_DROPS_SIZE              2048
#define COUNTER_DROPS_SIZE                   8
#define COUNTER_CE_MARKED_SIZE               512
#define NON_DLCP_DSCP_CLASSES                8  /* the non-DLCP split of the queue counters */

/* queue disciplines (dlcp/queueing): the id sw_qdisc_pick switches on; bytes per unit of weight */
#define QDISC_STRICT                         0
#define QDISC_WRR                            1
#define QDISC_QUANTUM_BYTES                  1514

/* each table's keys concatenated, first key most significant: a dense index */
#define IPV4_LPM_KEY_BITS                    32
#define IPV4_LPM_IPV4_DST_BITS               32
#define IPV4_LPM_IPV4_DST_SHIFT              0
#define NHOP_KEY_BITS                        32
#define NHOP_NHOP_GROUP_BITS                 16
#define NHOP_NHOP_GROUP_SHIFT                16
#define NHOP_NHOP_MEMBER_BITS                16
#define NHOP_NHOP_MEMBER_SHIFT               0
#define CLASSIFY_KEY_BITS                    12
#define CLASSIFY_DLCP_VALID_BITS             1
#define CLASSIFY_DLCP_VALID_SHIFT            11
#define CLASSIFY_DLCP_PRIO_BITS              3
#define CLASSIFY_DLCP_PRIO_SHIFT             8
#define CLASSIFY_DLCP_DROP_PREC_BITS         2
#define CLASSIFY_DLCP_DROP_PREC_SHIFT        6
#define CLASSIFY_DSCP_BITS                   6
#define CLASSIFY_DSCP_SHIFT                  0
#define QUEUE_THRESHOLDS_KEY_BITS            9
#define QUEUE_THRESHOLDS_EGRESS_PORT_BITS    9
#define QUEUE_THRESHOLDS_EGRESS_PORT_SHIFT   0
#define ECN_THRESHOLD_KEY_BITS               12
#define ECN_THRESHOLD_EGRESS_PORT_BITS       9
#define ECN_THRESHOLD_EGRESS_PORT_SHIFT      3
#define ECN_THRESHOLD_QID_BITS               3
#define ECN_THRESHOLD_QID_SHIFT              0

#endif
