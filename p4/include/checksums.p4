/* Checksums. The switch changes few bytes (the IPv4 TTL, the telemetry block), so it patches the
 * checksums incrementally (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')) where it changes them rather
 * than recomputing: that stays right for IPv4 options and never has to read the UDP payload.
 * Checksums are not verified on arrival (docs/pipeline.md lists every drop reason). */
#ifndef DLCP_CHECKSUMS_P4
#define DLCP_CHECKSUMS_P4

#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

/* Fold a sum of 16-bit words to a 16-bit one's-complement sum (enough for up to 2**16 terms). */
bit<16> ones_fold(in bit<32> sum) {
    bit<32> s = (sum & 0xffff) + (sum >> 16);
    s = (s & 0xffff) + (s >> 16);
    return s[15:0];
}

/* Checksum after one 16-bit word of the covered data changes from old_word to new_word. */
bit<16> csum_replace2(in bit<16> csum, in bit<16> old_word, in bit<16> new_word) {
    return ~ones_fold((bit<32>)(~csum) + (bit<32>)(~old_word) + (bit<32>)new_word);
}

/* Same for four words at once (the telemetry block). */
bit<16> csum_replace8(in bit<16> csum, in bit<64> old_words, in bit<64> new_words) {
    return ~ones_fold((bit<32>)(~csum)
                      + (bit<32>)(~old_words[63:48]) + (bit<32>)(~old_words[47:32])
                      + (bit<32>)(~old_words[31:16]) + (bit<32>)(~old_words[15:0])
                      + (bit<32>)new_words[63:48] + (bit<32>)new_words[47:32]
                      + (bit<32>)new_words[31:16] + (bit<32>)new_words[15:0]);
}

control DlcpVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control DlcpComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

#endif
