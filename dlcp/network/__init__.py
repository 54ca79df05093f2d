"""The network as data: topologies (hosts, switches, ports, routes), the switches' runtime entries,
and the names of the switch pipeline. Below the collectives and the experiment config."""
