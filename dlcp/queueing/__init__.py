"""Egress queueing of a DLCP switch port: admission by drop precedence and the ECN decision
(admission.py), and the queue disciplines that choose which queue sends next, registered by name
(registry.py; one module each in disciplines/) with the experiment's `[switch]` section built from
them (settings.py). The reference switch pipeline (dlcp/switch) and the transport's virtual
network queue packets through these; the C pipeline core states the same rules in C."""
