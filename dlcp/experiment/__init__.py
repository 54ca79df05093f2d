"""An experiment as data: config, topologies, switch runtime entries, pipeline names."""
