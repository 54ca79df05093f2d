"""The DLCP switch as a library (docs/pipeline.md): the readable reference model of its pipeline
in Python (pipeline, match_tables, hashing) and the counter dump every engine writes
(counter_dump); c/dlcp_wire.h is the C engines' view of the wire format and the pipeline names,
generated from them (`make gen`)."""
