/* Generated from dlcp/wire/layout.py by `python -m dlcp.codegen` (make gen): do not edit. */
#ifndef DLCP_GENERATED_WIRE_P4
#define DLCP_GENERATED_WIRE_P4

/* the DLCP data port can be moved at build time: `dlcp build --data-port N` passes
 * -DDLCP_DATA_PORT=N to p4c */
#ifndef DLCP_DATA_PORT
#define DLCP_DATA_PORT                       9910
#endif

const bit<4> DLCP_VERSION = 1;
const bit<4> DLCP_TYPE_DATA = 0;
const bit<4> DLCP_TYPE_RETX = 1;
const bit<4> DLCP_TYPE_PARAM = 2;
const bit<4> DLCP_TYPE_PROBE = 3;
const bit<3> DLCP_PHASE_PUSH = 0;
const bit<3> DLCP_PHASE_PULL = 1;
const bit<3> DLCP_PHASE_RS = 2;
const bit<3> DLCP_PHASE_AG = 3;
const bit<3> DLCP_PHASE_P2P = 4;
const bit<8> DLCP_FLAG_LAST = 0x01;
const bit<8> DLCP_FLAG_PROTECTED = 0x02;
const bit<8> DLCP_FLAG_TELEMETRY = 0x04;

/* bit positions of prio and drop_prec in the IPv4 DSCP (for slices dscp[HI:LO]) */
#define DSCP_PRIO_HI                         5
#define DSCP_PRIO_LO                         3
#define DSCP_DROP_PREC_HI                    2
#define DSCP_DROP_PREC_LO                    1

#define DLCP_HEADER_LEN                      24
#define DLCP_TELEMETRY_LEN                   8

/* 24 bytes, big-endian */
header dlcp_t {
    bit<4>   ver;                   /* version */
    bit<4>   type;                  /* DATA, RETX, PARAM or PROBE */
    bit<3>   prio;                  /* queue priority, 7 served first */
    bit<2>   drop_prec;             /* drop precedence, 0 protected .. 3 most droppable */
    bit<3>   phase;                 /* PUSH, PULL, RS, AG or P2P */
    bit<8>   job_id;                /* experiment / job */
    bit<8>   src_rank;              /* sender rank */
    bit<16>  iter;                  /* iteration mod 2**16 */
    bit<16>  msg_id;                /* message (tensor, bucket, ring step) within the iteration */
    bit<16>  layer_id;              /* layer of the first value in the payload (0 = input side) */
    bit<8>   mag_class;             /* log2 magnitude bucket 0..15, 8 = message median */
    bit<8>   flags;                 /* bit0 LAST, bit1 PROTECTED, bit2 TELEMETRY */
    bit<32>  seq;                   /* packet index in the message */
    bit<32>  n_pkts;                /* packets in the message */
    bit<32>  offset;                /* value offset of the payload in the flattened message */
}

/* 8 bytes after the DLCP header when flags.TELEMETRY is set; filled in place by every switch */
header dlcp_telemetry_t {
    bit<8>   hops;                  /* switches that stamped the block */
    bit<8>   reserved;              /* zero; switches leave it as it came */
    bit<16>  max_enq_qdepth;        /* packets ahead in the packet's priority queue on arrival, max over hops */
    bit<32>  sum_deq_timedelta_us;  /* time spent queued, summed over hops */
}

#endif
